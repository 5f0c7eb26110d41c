"""Algorithm exhaust, pruned: the same fewest-first search, finished at Table III sizes.

The FTC seed's Algorithm exhaust tries every number of backups ``M = 1, 2, …`` and,
for each, every set of ``M`` backup locations; its Table III reports seconds to minutes
on 55 and 93 tasks. Tried literally (``exhaustive``), the subsets of a 55-task graph
needing 8 backups are too many to list. :func:`backups_exhaustive_pruned` searches the
same space in the same order, fewest first, and still proves its answer minimum, but it
skips the parts of the space no plan can come from, using three facts of eq. (3)
(``L(v) = t_v + max`` over unbacked upstream ``u`` of ``L(u)``):

- **Decided in topological order.** ``L(v)`` depends only on the tasks before ``v``, so
  once they are decided ``L(v)`` is known; a branch with ``L(v) > R`` is dropped, and so
  is leaving ``v`` unbacked when a consumer ``w`` would then have ``t_w + L(v) > R``.
- **States, not paths.** What the rest of the search can do depends only on the next
  task and on ``L(u)`` of the decided tasks still read later (``-1`` for a backup). A
  state already shown to have no completion within ``k`` more backups is not explored
  again with ``k`` or fewer, at this ``M`` or any later one.
- **Twins.** Tasks with the same upstream, downstream and ``t`` are interchangeable
  (equal ``L``, equal effect downstream), so among twins only the plans that back up
  the last ones are tried.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planners.backups.common import EPS, BackupPlan, _finish, _forced, _require_feasible, _sinks
from planners.errors import PlannerError
from planners.graph import TaskGraph

PRUNED_MAX_TASKS = 400
"""The search recurses once per task; larger graphs are refused (``exact`` has no limit)."""

_BACKED = -1.0
"""A decided task's entry in a state when it keeps a backup (``L`` is never negative)."""


class _OutOfTime(Exception):
    pass


@dataclass
class _Search:
    """One graph's search: the static facts, the current branch and the memo."""

    graph: TaskGraph
    forced: list[bool]
    sinks: list[bool]
    deadline: float
    flags: list[bool] = field(init=False)
    ell: list[float] = field(init=False)
    later: list[list[int]] = field(init=False)  # decided tasks a later task reads
    twin: list[int] = field(init=False)  # the previous interchangeable task, or -1
    forced_after: list[int] = field(init=False)  # forced backups from v on
    reach: list[float] = field(init=False)  # max t_w over consumers w
    memo: dict[float, dict[tuple[int, tuple[float, ...]], int]] = field(default_factory=dict)
    steps: int = 0

    def __post_init__(self) -> None:
        g, n = self.graph, len(self.graph)
        self.flags, self.ell = [False] * n, [0.0] * n
        last = [max(ss, default=-1) for ss in g.succs]
        self.later = [[u for u in range(v) if last[u] >= v] for v in range(n + 1)]
        seen: dict[tuple[frozenset[int], frozenset[int], float], int] = {}
        self.twin = []
        for v in range(n):
            key = (frozenset(g.preds[v]), frozenset(g.succs[v]), g.latency[v])
            self.twin.append(seen.get(key, -1))
            seen[key] = v
        self.forced_after = [0] * (n + 1)
        for v in range(n - 1, -1, -1):
            self.forced_after[v] = self.forced_after[v + 1] + self.forced[v]
        self.reach = [max((g.latency[w] for w in ss), default=0.0) for ss in g.succs]

    def feasible(self, most: int, bound: float) -> bool:
        """Whether some plan with at most ``most`` backups keeps every ``L(v) ≤ bound``;
        if so, ``flags`` holds one."""
        failed = self.memo.setdefault(bound, {})  # valid for any ``most``
        return self._dfs(0, 0, most, bound + EPS, failed)

    def _dfs(
        self,
        v: int,
        count: int,
        most: int,
        bound: float,
        failed: dict[tuple[int, tuple[float, ...]], int],
    ) -> bool:
        self.steps += 1
        if self.steps % 4096 == 0 and time.monotonic() > self.deadline:
            raise _OutOfTime
        if v == len(self.flags):
            return True
        flags, ell = self.flags, self.ell
        key = (v, tuple(_BACKED if flags[u] else ell[u] for u in self.later[v]))
        left = most - count
        if failed.get(key, -1) >= left:
            return False
        worst = 0.0
        for u in self.graph.preds[v]:
            if not flags[u] and ell[u] > worst:
                worst = ell[u]
        ell[v] = self.graph.latency[v] + worst
        found = False
        if ell[v] <= bound and self.forced_after[v] <= left:
            twin = self.twin[v]
            if (
                not self.forced[v]
                and ell[v] + self.reach[v] <= bound
                and (twin < 0 or not flags[twin])
            ):
                flags[v] = False
                found = self._dfs(v + 1, count, most, bound, failed)
            if not found and not self.sinks[v] and self.forced_after[v + 1] < left:
                flags[v] = True
                found = self._dfs(v + 1, count + 1, most, bound, failed)
                if not found:
                    flags[v] = False
        if not found:
            failed[key] = left
        return found


def backups_exhaustive_pruned(
    graph: TaskGraph, bound: float, *, time_limit: float = 10.0
) -> BackupPlan:
    """The seed's Algorithm exhaust with its dead branches pruned: a proven minimum.

    Parameters
    ----------
    graph : TaskGraph
        At most :data:`PRUNED_MAX_TASKS` tasks.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds the search may use; it stops with an error when they run out.

    Returns
    -------
    BackupPlan
        A minimum plan (``optimal=True``); among minimum plans, one with the smallest
        worst latency, as the seed's Algorithm exhaust chooses.

    Raises
    ------
    PlannerError
        If the graph is larger than :data:`PRUNED_MAX_TASKS` or ``time_limit`` runs
        out first (the message says how far the search got).
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    A chain of four 1 s tasks within 2 s needs one backup; the seed's exhaust and
    this search both find the middle one, whose failure costs the least:

    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> plan = backups_exhaustive_pruned(g, 2.0)
    >>> plan.backups, plan.worst, plan.optimal
    (('b',), 2.0, True)

    Notes
    -----
    Exponential in the worst case, as exhaust is; the module docstring lists what is
    pruned and why no minimum plan is lost. Sizes ``M`` are tried in increasing order
    (each a depth-first search over the tasks in topological order); at the minimum,
    the bound is lowered below each plan's worst latency until no plan of that size is
    left.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-E (Algorithm exhaust), Sec. V-B (Table III).
    """
    if len(graph) > PRUNED_MAX_TASKS:
        raise PlannerError(
            f"algorithm 'exhaustive-pruned' is limited to {PRUNED_MAX_TASKS} tasks and this "
            f"graph has {len(graph)}; use 'exact' (provably optimal, with a time budget)"
        )
    _require_feasible(graph, bound)
    forced = _forced(graph, bound)
    search = _Search(graph, forced, _sinks(graph), time.monotonic() + time_limit)
    most = sum(forced)
    try:
        while not search.feasible(most, bound):
            most += 1
    except _OutOfTime:
        raise PlannerError(
            f"algorithm 'exhaustive-pruned' ran out of its time budget of {time_limit:g}s: "
            f"no plan with up to {most - 1} backups keeps R = {bound:g}s, and the plans "
            f"with {most} were not all tried; raise time_limit or use 'exact'"
        ) from None
    best = list(search.flags)
    try:  # the seed's tie-break; a minimum plan is already in hand if time runs out
        while search.feasible(most, max(search.ell) - 1e-6):
            best = list(search.flags)
    except _OutOfTime:
        pass
    return _finish(graph, bound, "exhaustive-pruned", best, True)
