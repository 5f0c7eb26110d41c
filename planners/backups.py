"""Minimum upstream backups that keep every single-task recovery within a bound.

Why this module exists: keeping an upstream buffer on every task (``M ≡ 1``)
makes recovery fastest but costs memory and CPU on every task; keeping none
makes a failed task wait for its whole upstream to recompute. The FTC seed
(``../shared/seeds/minimum-backups-ftc.txt``) asks for the fewest backup tasks
such that every task ``v`` recovers within ``R`` when it fails alone::

    L(v) = t_v + max over upstream u with M(u) = 0 of L(u)     (eq. 3)

which is the project's failure-effect model with ``F = {v}``
(:func:`planners.evaluate.worst_task_failure`).

Every algorithm here has one signature,
``backups_<name>(graph, bound, *, time_limit=10.0) -> BackupPlan``, and is
registered in :data:`BACKUP_ALGORITHMS`; :func:`plan_backups` picks one by
name. Every returned plan has been checked by :func:`planners.evaluate.check_plan`
before it leaves this module, so a bug shows up as an internal error here and
never as a silently broken bound.

The seed's algorithms are the floor: ``line`` and ``tree`` are its exact O(N)
algorithms, ``dag`` is its Algorithm FTC with ChooseBackup-DAG (up to ~10 %
above optimal), ``share-based`` its baseline and ``exhaustive`` its reference.
``exact`` (CP-SAT) and ``auto`` (shape detection, exact within a time budget,
then the DAG heuristic plus local search) are ours.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Protocol

from ortools.sat.python import cp_model

from planners.budget import CP_SAT_WORK_PER_SECOND, WorkBudget, deterministic_cp_sat
from planners.errors import Infeasible, InvalidTopology, PlannerError, UnknownAlgorithm
from planners.evaluate import check_plan, worst_task_failure
from planners.graph import TaskGraph

__all__ = [
    "BACKUP_ALGORITHMS",
    "EXHAUSTIVE_MAX_TASKS",
    "BackupPlan",
    "backups_auto",
    "backups_dag",
    "backups_exact",
    "backups_exhaustive",
    "backups_line",
    "backups_share_based",
    "backups_tree",
    "plan_backups",
    "smallest_feasible_bound",
    "topology_shape",
]

EPS = 1e-9
"""Tolerance on the bound, the same as :func:`planners.evaluate.check_plan`'s."""

EXHAUSTIVE_MAX_TASKS = 20
"""``exhaustive`` refuses larger graphs: it enumerates subsets of the tasks."""


@dataclass(frozen=True)
class BackupPlan:
    """Which tasks keep upstream backups, with what the evaluator says about it.

    Attributes
    ----------
    algorithm:
        The algorithm that produced the plan (``auto`` adds the method it used,
        e.g. ``auto:tree``).
    bound:
        The recovery-latency bound ``R`` (seconds) the plan keeps.
    backups:
        Ids of the backup tasks (``M(v) = 1``), in topological order.
    worst:
        The evaluator's worst single-task recovery latency ``max_v L(v)``.
    optimal:
        ``True`` if the number of backups is proven minimum, ``False`` if it is
        known or possibly not (e.g. a solver ran out of time), ``None`` if the
        algorithm cannot tell.
    """

    algorithm: str
    bound: float
    backups: tuple[str, ...]
    worst: float
    optimal: bool | None


class BackupAlgorithm(Protocol):
    """The one signature every minimum-backup algorithm has."""

    def __call__(
        self, graph: TaskGraph, bound: float, *, time_limit: float = 10.0
    ) -> BackupPlan: ...


# --------------------------------------------------------------------------- helpers


def smallest_feasible_bound(graph: TaskGraph) -> tuple[float, str]:
    """The smallest bound any plan can keep, and the task that forces it.

    With every task a backup no failed task waits for anything upstream, so the
    evaluator's worst latency with ``M ≡ 1`` (that is ``max_v t_v``) is the
    smallest feasible bound.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2.5})
    >>> smallest_feasible_bound(g)
    (2.5, 'b')
    """
    return worst_task_failure(graph, None)


def _require_feasible(graph: TaskGraph, bound: float) -> None:
    smallest, task = smallest_feasible_bound(graph)
    if not smallest <= bound + EPS:  # also rejects NaN
        raise Infeasible(
            f"bound {bound:g}s is infeasible: task {task} alone needs {smallest:g}s to "
            f"reprocess, so the smallest feasible bound is {smallest:g}s",
            smallest_bound=smallest,
        )


def _sinks(graph: TaskGraph) -> list[bool]:
    return [not s for s in graph.succs]


def _forced(graph: TaskGraph, bound: float) -> list[bool]:
    """Tasks every feasible plan must back up: ``t_u + t_w > R`` for a consumer ``w``."""
    t = graph.latency
    return [any(t[u] + t[w] > bound + EPS for w in ss) for u, ss in enumerate(graph.succs)]


def _ell(graph: TaskGraph, flags: list[bool]) -> list[float]:
    """``L(v)`` of every task for backup flags ``flags`` (eq. 3), one pass."""
    ell = [0.0] * len(graph)
    t = graph.latency
    for v, ps in enumerate(graph.preds):
        m = 0.0
        for u in ps:
            if not flags[u] and ell[u] > m:
                m = ell[u]
        ell[v] = t[v] + m
    return ell


def _finish(
    graph: TaskGraph, bound: float, algorithm: str, flags: list[bool], optimal: bool | None
) -> BackupPlan:
    """Check a plan with the shared evaluator and wrap it; a failure here is a bug."""
    backups = tuple(graph.ids(i for i, f in enumerate(flags) if f))
    problems = check_plan(graph, bound=bound, backups=backups)
    if problems:
        raise RuntimeError(
            f"internal error: backups_{algorithm} produced an invalid plan: "
            + "; ".join(p.message for p in problems)
        )
    worst, _ = worst_task_failure(graph, backups)
    return BackupPlan(algorithm, float(bound), backups, worst, optimal)


def topology_shape(graph: TaskGraph) -> str:
    """Classify a task graph as ``"lines"``, ``"tree"`` or ``"dag"`` (seed, Sec. IV).

    ``lines``: every task has at most one consumer, and only sinks have more
    than one input (sequential lines, or parallel lines joining a common sink).
    ``tree``: every task has at most one consumer (an in-forest rooted at sinks).

    Examples
    --------
    >>> lat = dict.fromkeys("abcd", 1.0)
    >>> topology_shape(TaskGraph.build("abc", [("a", "c"), ("b", "c")], latency=lat))
    'lines'
    >>> topology_shape(TaskGraph.build("abcd", [("a", "c"), ("b", "c"), ("c", "d")],
    ...                                latency=lat))
    'tree'
    >>> topology_shape(TaskGraph.build("abc", [("a", "b"), ("a", "c")], latency=lat))
    'dag'
    """
    if any(len(s) > 1 for s in graph.succs):
        return "dag"
    if all(len(p) <= 1 or not s for p, s in zip(graph.preds, graph.succs, strict=True)):
        return "lines"
    return "tree"


def _tree_greedy(graph: TaskGraph, bound: float) -> list[bool]:
    """Bottom-up greedy on an in-forest: back up exactly the inputs that would break R."""
    t = graph.latency
    flags = [False] * len(graph)
    ell = [0.0] * len(graph)
    for v, ps in enumerate(graph.preds):
        worst = 0.0
        for u in ps:
            if t[v] + ell[u] > bound + EPS:
                flags[u] = True  # u's only consumer is v: this is the last chance
            elif ell[u] > worst:
                worst = ell[u]
        ell[v] = t[v] + worst
    return flags


# --------------------------------------------------------------------------- line, tree


def backups_line(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """Minimum backups for line(s) topologies, exact in O(N) (seed Algorithm 2).

    Parameters
    ----------
    graph : TaskGraph
        Sequential lines, or parallel lines joining a common sink
        (:func:`topology_shape` is ``"lines"``).
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused (the algorithm is linear); kept for the common signature.

    Returns
    -------
    BackupPlan
        A minimum plan (``optimal=True``).

    Raises
    ------
    InvalidTopology
        If the graph is not line(s).
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> backups_line(g, 2.0)
    BackupPlan(algorithm='line', bound=2.0, backups=('b',), worst=2.0, optimal=True)

    Notes
    -----
    O(N). Walking each line from its source, a backup goes on the last task
    still within ``R`` of the previous backup (the seed's "smallest index among
    the candidates"); the walk here runs in topological order and backs up a
    task exactly when its consumer would otherwise exceed ``R``, which places
    the same backups. Placing each backup as late as possible is optimal for a
    line by the usual exchange argument (seed Theorem 2).

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. IV-B, Algorithm 2, Theorem 2.
    """
    _require_feasible(graph, bound)
    shape = topology_shape(graph)
    if shape != "lines":
        raise InvalidTopology(
            f"algorithm 'line' needs a line(s) topology, but this graph is a {shape} "
            "(use 'tree', 'dag', 'exact' or 'auto')"
        )
    return _finish(graph, bound, "line", _tree_greedy(graph, bound), True)


def backups_tree(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """Minimum backups for tree topologies (an in-tree rooted at the sink), exact in O(N).

    Parameters
    ----------
    graph : TaskGraph
        Every task has at most one consumer (:func:`topology_shape` is ``"lines"``
        or ``"tree"``).
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused (the algorithm is linear); kept for the common signature.

    Returns
    -------
    BackupPlan
        A minimum plan (``optimal=True``).

    Raises
    ------
    InvalidTopology
        If some task has more than one consumer.
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcde", [("a", "c"), ("b", "c"), ("c", "d"), ("d", "e")],
    ...                     latency={"a": 1, "b": 2, "c": 1, "d": 1, "e": 1})
    >>> backups_tree(g, 3.0).backups
    ('c',)

    Notes
    -----
    O(N): each task is visited once, in topological order. A task's latency is
    its own plus the worst of its non-backup inputs, and each input has only
    this consumer, so an input ``u`` must be a backup exactly when
    ``t_v + L(u) > R``. Backing up nothing else keeps every subtree at the
    fewest backups and, among those, the smallest ``L``; an exchange argument
    makes that optimal (seed Theorem 2). The seed searches from the sources
    with Algorithm 3 and stops at shared backups; both give minimum plans.

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. IV-C, Algorithm 3, eq. (6), Theorem 2.
    """
    _require_feasible(graph, bound)
    shape = topology_shape(graph)
    if shape == "dag":
        raise InvalidTopology(
            "algorithm 'tree' needs every task to have at most one consumer; this graph "
            "is a general DAG (use 'dag', 'exact' or 'auto')"
        )
    return _finish(graph, bound, "tree", _tree_greedy(graph, bound), True)


# --------------------------------------------------------------------------- DAG (seed)


def _bfs_levels(graph: TaskGraph) -> list[int]:
    """Hops from a virtual sink joined to every sink (the seed's BFS index order)."""
    level = [-1] * len(graph)
    queue: deque[int] = deque()
    for v, ss in enumerate(graph.succs):
        if not ss:
            level[v] = 1
            queue.append(v)
    while queue:
        v = queue.popleft()
        for u in graph.preds[v]:
            if level[u] < 0:
                level[u] = level[v] + 1
                queue.append(u)
    return level


def _choose_backup_dag(graph: TaskGraph, bound: float, v: int, flags: list[bool]) -> list[int]:
    """One round of the seed's ChooseBackup-DAG from search source ``v``.

    Returns the new backups; ``flags`` is updated in place (``v`` itself may
    become a backup if one of its consumers cannot wait for it).
    """
    t, preds, succs = graph.latency, graph.preds, graph.succs
    limit = bound + EPS
    if not flags[v] and any(t[v] + t[w] > limit for w in succs[v]):
        flags[v] = True
    picks: list[int] = []
    while True:
        # GenerateCandidates: tasks reachable from v through non-backups, with the
        # distance D(v, w) (longest such path, v's own t only if v keeps no backup).
        dist: dict[int, float] = {v: 0.0 if flags[v] else t[v]}
        expanded = {v}
        order: list[int] = []
        violators: list[int] = []
        heap = list(succs[v])
        seen = set(heap)
        while heap:
            w = heapq.heappop(heap)  # topological order: all in-region inputs are done
            d = t[w] + max(dist[p] for p in preds[w] if p in expanded)
            dist[w] = d
            if d > limit:
                violators.append(w)
                continue
            order.append(w)
            if flags[w]:
                continue  # an existing backup ends the path
            expanded.add(w)
            for s in succs[w]:
                if s not in seen:
                    seen.add(s)
                    heapq.heappush(heap, s)
        if not violators:
            return picks  # Rule II: every path from v now meets a backup or a sink within R
        # F(v) (eq. 7) and B(v) (eq. 8) over the region, and g(w): the share of
        # w's output that flows on (split equally, as in eq. 7) to a task beyond R.
        f: dict[int, float] = {v: 1.0}
        b: dict[int, float] = {v: t[v]}
        for w in order:
            fw = bw = 0.0
            for p in preds[w]:
                if p in expanded:
                    q = len(succs[p])
                    fw += f[p] / q
                    bw += (b[p] + t[p]) / q
            f[w], b[w] = fw, bw
        g = dict.fromkeys(violators, 1.0)
        candidates: list[int] = []
        for w in [*reversed(order), v]:
            if w in expanded and succs[w]:
                gw = sum(g.get(s, 0.0) for s in succs[w]) / len(succs[w])
                if gw > 0:
                    g[w] = gw
                    if w != v or not flags[v]:
                        candidates.append(w)
        # Largest share of the source's stream it b-covers on the way beyond R
        # (F restricted to the flow that needs a backup), then highest B, then
        # longest distance, then earliest task.
        best = max(
            candidates,
            key=lambda w: (round(f[w] * g[w], 9), round(b[w], 9), dist[w], -w),
        )
        flags[best] = True
        picks.append(best)


def _ftc_dag(graph: TaskGraph, bound: float) -> list[bool]:
    """Algorithm FTC (seed Algorithm 1) with ChooseBackup-DAG (Algorithm 4)."""
    flags = [False] * len(graph)
    level = _bfs_levels(graph)
    heap = [(-level[s], -s, s) for s in graph.sources]
    heapq.heapify(heap)
    queued = set(graph.sources)
    while heap:
        _, _, v = heapq.heappop(heap)  # the pending search source of largest index I(v)
        for w in _choose_backup_dag(graph, bound, v, flags):
            if w not in queued:
                queued.add(w)
                heapq.heappush(heap, (-level[w], -w, w))
    return flags


def backups_dag(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The seed's heuristic for general DAGs: Algorithm FTC with ChooseBackup-DAG.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused (the heuristic does not search); kept for the common signature.

    Returns
    -------
    BackupPlan
        A valid plan; ``optimal`` is ``True`` only when it meets the trivial
        lower bound (tasks with ``t_u + t_w > R`` for a consumer ``w``), else ``None``.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> backups_dag(g, 2.0).backups
    ('s', 'c')

    Notes
    -----
    Search sources (the sources, then every new backup) are processed from the
    largest breadth-first index from the sinks, as in Algorithm 1. A round from
    source ``v`` collects the tasks reachable from ``v`` through non-backups with
    their distance ``D(v, w)``; while some reachable task lies beyond ``R`` it
    backs up one candidate and looks again. Candidates are the tasks (``v``
    itself included while it keeps no backup) whose output flows on to a task
    beyond ``R``. They are ranked first by the share of ``v``'s stream they
    b-cover on its way beyond ``R`` (the b-cover percentage ``F`` of eq. 7,
    restricted to the flow that needs a backup), then by the backup workload
    ``B`` (eq. 8), then by the longest distance (Algorithm 4, lines 6-7). On
    lines and trees every candidate covers the whole stream, so this is the
    seed's order; on shuffle-heavy DAGs ranking by ``B`` first picks many
    parallel tasks where one upstream task covers them all (on Twitter
    Sentiment, ranking by ``B`` alone was up to 15x the optimum). A round ends
    when no task beyond ``R`` remains, the exact form of the seed's "``F``
    sums to 1" rule that also holds where paths end at sinks. Every path from
    every search source is then within ``R``, so the plan is valid (seed
    Lemma 3).

    Each round costs O(Z log Z) per pick for a region of ``Z`` tasks within
    ``R``, so the whole is O(N²) in the worst case (seed Theorem 1) and close to
    linear when ``R`` spans few tasks.

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. IV-A and IV-D, Algorithms 1 and 4,
    eqs. (7) and (8), Lemma 3, Theorem 1.
    """
    _require_feasible(graph, bound)
    flags = _ftc_dag(graph, bound)
    lower = sum(_forced(graph, bound))
    return _finish(graph, bound, "dag", flags, True if sum(flags) == lower else None)


# --------------------------------------------------------------------------- share-based


def backups_share_based(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The seed's baseline: back up the task with the largest resource share first.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused; kept for the common signature.

    Returns
    -------
    BackupPlan
        A valid plan (``optimal=None``).

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> backups_share_based(g, 2.0).backups
    ('a', 'b')

    Notes
    -----
    The seed models this baseline on the balanced resource shares of
    Eidenbenz and Locher (its ref. [9]): a task's share grows with the square
    root of its work, ``s(v) = sqrt(t_v · F(v))`` with ``F`` the share of the
    input stream that flows through ``v`` (eq. 7 over the whole graph). While
    the worst task breaks ``R``, the non-backup task of largest share among its
    non-backup upstream becomes a backup (ties: earliest task). O(M · (N + E))
    for ``M`` backups.

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. V-A ("share-based"), Table I.
    """
    _require_feasible(graph, bound)
    preds, succs, t = graph.preds, graph.succs, graph.latency
    flow = [0.0] * len(graph)
    for v, ps in enumerate(preds):
        flow[v] = 1.0 if not ps else sum(flow[u] / len(succs[u]) for u in ps)
    share = [math.sqrt(t[v] * flow[v]) for v in range(len(graph))]
    flags = [False] * len(graph)
    while True:
        ell = _ell(graph, flags)
        worst = max(range(len(graph)), key=ell.__getitem__)
        if ell[worst] <= bound + EPS:
            break
        # The non-backup upstream the worst task waits for.
        cands: list[int] = []
        stack = [u for u in preds[worst] if not flags[u]]
        seen = set(stack)
        while stack:
            u = stack.pop()
            cands.append(u)
            for p in preds[u]:
                if not flags[p] and p not in seen:
                    seen.add(p)
                    stack.append(p)
        flags[max(cands, key=lambda u: (share[u], -u))] = True
    return _finish(graph, bound, "share-based", flags, None)


# --------------------------------------------------------------------------- exhaustive


def backups_exhaustive(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The seed's reference: try every set of backups, fewest first (tiny graphs only).

    Parameters
    ----------
    graph : TaskGraph
        At most :data:`EXHAUSTIVE_MAX_TASKS` tasks.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused; the size limit keeps the search short.

    Returns
    -------
    BackupPlan
        A minimum plan (``optimal=True``); among minimum plans, one with the
        smallest worst latency (as the seed's Algorithm exhaust).

    Raises
    ------
    PlannerError
        If the graph has more than :data:`EXHAUSTIVE_MAX_TASKS` tasks.
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> backups_exhaustive(g, 2.0).backups
    ('b',)

    Notes
    -----
    O(2^K · (N + E)) for ``K`` candidate tasks. Sinks never need a backup, and
    tasks with ``t_u + t_w > R`` for a consumer ``w`` always do, so only the
    others are enumerated.

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. IV-E (Algorithm exhaust).
    """
    if len(graph) > EXHAUSTIVE_MAX_TASKS:
        raise PlannerError(
            f"algorithm 'exhaustive' is limited to {EXHAUSTIVE_MAX_TASKS} tasks and this "
            f"graph has {len(graph)}; use 'exact' (provably optimal, with a time budget)"
        )
    _require_feasible(graph, bound)
    forced = _forced(graph, bound)
    sinks = _sinks(graph)
    free = [u for u in range(len(graph)) if not forced[u] and not sinks[u]]
    for k in range(len(free) + 1):
        best: tuple[float, list[bool]] | None = None
        for combo in combinations(free, k):
            flags = list(forced)
            for u in combo:
                flags[u] = True
            worst = max(_ell(graph, flags))
            if worst <= bound + EPS and (best is None or worst < best[0]):
                best = (worst, flags)
        if best is not None:
            return _finish(graph, bound, "exhaustive", best[1], True)
    raise RuntimeError("internal error: backing up every task must keep a feasible bound")


# --------------------------------------------------------------------------- exact (CP-SAT)


def _scale(values: Iterable[float]) -> tuple[int, bool]:
    """A power of ten (up to 10⁶) that makes every value integral, with ``True``.

    Otherwise ``(S, False)`` with ``S`` as fine as int64 comfortably allows (up to
    10¹²), so that rounding every latency of a path changes its sum by far less
    than the evaluator's tolerance :data:`EPS`.
    """
    vals = list(values)
    for k in range(7):
        s = 10**k
        if all(abs(x * s - round(x * s)) <= 1e-9 * max(1.0, abs(x * s)) for x in vals):
            return s, True
    top = max(max(vals, default=1.0), 1.0)
    k = 12
    while k > 6 and top * 10**k > 1e15:
        k -= 1
    return 10**k, False


def _to_int(x: float, scale: int, up: bool) -> int:
    y = x * scale
    r = round(y)
    if abs(y - r) <= 1e-9 * max(1.0, abs(y)):
        return int(r)
    return math.ceil(y) if up else math.floor(y)


def _solve_cpsat(
    graph: TaskGraph,
    t_int: list[int],
    r_int: int,
    *,
    time_limit: float,
    hint: list[bool] | None,
    tie_break: bool,
    patience: float | None = None,
) -> tuple[list[bool] | None, bool, float, float]:
    """Minimum backups on integer latencies: (flags, proven, objective bound, work used).

    With ``patience``, the search also stops once no better plan has been found
    for that many (deterministic) seconds (what ``auto`` wants on large graphs).
    The work used is CP-SAT's deterministic time in seconds.
    """
    n = len(graph)
    preds, succs = graph.preds, graph.succs
    model = cp_model.CpModel()
    forced = [any(t_int[u] + t_int[w] > r_int for w in succs[u]) for u in range(n)]
    m: dict[int, cp_model.IntVar] = {}
    for u in range(n):
        if succs[u] and not forced[u]:
            m[u] = model.new_bool_var(f"m{u}")
    ell = [model.new_int_var(t_int[v], r_int, f"l{v}") for v in range(n)]
    for v, ps in enumerate(preds):
        for u in ps:
            if u in m:  # if u keeps no backup, v waits for u's recovery (eq. 3)
                model.add(ell[v] >= t_int[v] + ell[u]).only_enforce_if(~m[u])
    n_forced = sum(forced)
    model.minimize(sum(m.values()))
    if hint is not None:
        for u, var in m.items():
            model.add_hint(var, hint[u])
    solver = cp_model.CpSolver()
    deterministic_cp_sat(solver.parameters, time_limit)
    left = max(0.05, time_limit)
    if patience is None:
        status = solver.solve(model)
        left -= solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND
        values: dict[int, bool] = (
            {u: bool(solver.value(var)) for u, var in m.items()}
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
            else {}
        )
    else:
        status, values, left = _solve_with_patience(solver, model, m, patience, left)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False, float(n_forced), max(0.0, time_limit - left)
    proven = status == cp_model.OPTIMAL
    flags = [bool(forced[u]) or values.get(u, False) for u in range(n)]
    lower = solver.best_objective_bound + n_forced
    if tie_break and proven and left > 0.05 and m:
        # Second phase: same number of backups, smallest worst latency.
        count = sum(1 for u in m if flags[u])
        model.add(sum(m.values()) == count)
        worst = model.new_int_var(0, r_int, "worst")
        model.add_max_equality(worst, ell)
        model.minimize(worst)
        model.clear_hints()  # type: ignore[no-untyped-call]
        for u, var in m.items():
            model.add_hint(var, flags[u])
        deterministic_cp_sat(solver.parameters, min(left, 0.25 * time_limit))
        if solver.solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            flags = [bool(forced[u]) or (u in m and bool(solver.value(m[u]))) for u in range(n)]
        left -= solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND
    return flags, proven, lower, max(0.0, time_limit - left)


def _solve_with_patience(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    m: dict[int, cp_model.IntVar],
    patience: float,
    budget: float,
) -> tuple[Any, dict[int, bool], float]:
    """Solve in chunks of ``patience`` deterministic seconds; stop when one brings nothing.

    Each chunk restarts from the best plan so far (as a hint), so the search
    stops once ``patience`` of work found no better plan: the same answer on
    every machine, unlike a wall-clock watchdog. Returns (status of the best
    solve, its backup flags, deterministic seconds left).
    """
    best_status: Any = cp_model.UNKNOWN
    best: dict[int, bool] = {}
    best_obj = math.inf
    left = budget
    while left > 0.01:
        deterministic_cp_sat(solver.parameters, min(patience, left))
        status = solver.solve(model)
        left -= max(0.01, solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if not best:
                best_status = status
            break
        obj = solver.objective_value
        improved = obj < best_obj - 0.5
        if improved or status == cp_model.OPTIMAL:
            best_status, best_obj = status, obj
            best = {u: bool(solver.value(var)) for u, var in m.items()}
        if status == cp_model.OPTIMAL or not improved:
            break
        model.clear_hints()  # type: ignore[no-untyped-call]
        for u, var in m.items():
            model.add_hint(var, best[u])
    return best_status, best, left


def _exact(
    graph: TaskGraph,
    bound: float,
    time_limit: float,
    hint: list[bool] | None,
    patience: float | None = None,
) -> tuple[list[bool] | None, bool]:
    """CP-SAT on scaled latencies, sound for the float evaluator; (flags, proven)."""
    budget = WorkBudget(time_limit)
    scale, exact_scale = _scale([*graph.latency, bound])
    # Latencies rounded up and the bound (with the evaluator's tolerance when the
    # scaling is inexact) down: an integer plan is a float plan.
    slack = 0.0 if exact_scale else EPS
    t_up = [_to_int(x, scale, up=True) for x in graph.latency]
    r_down = _to_int(bound + slack, scale, up=False)
    flags, proven, _, used = _solve_cpsat(
        graph, t_up, r_down, time_limit=time_limit, hint=hint, tie_break=True, patience=patience
    )
    budget.spend_seconds(used)
    if flags is None or exact_scale or not proven:
        return flags, proven and exact_scale
    # Rounding made the model stricter; the opposite rounding relaxes it and gives
    # a lower bound. Equal counts prove the conservative plan optimal.
    left = budget.seconds_left()
    if left <= 0.05:
        return flags, False
    t_down = [_to_int(x, scale, up=False) for x in graph.latency]
    r_up = _to_int(bound + slack, scale, up=True)
    _, _, lower, _ = _solve_cpsat(graph, t_down, r_up, time_limit=left, hint=flags, tie_break=False)
    return flags, math.ceil(lower - 1e-6) >= sum(flags)


def backups_exact(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """Provably minimum backups with CP-SAT, within a time budget.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds the solver may use. When they run out, the best plan found so
        far is returned with ``optimal=False``.

    Returns
    -------
    BackupPlan
        ``optimal=True`` when the solver proved the count minimum. Among
        minimum plans it prefers a smaller worst latency when time allows.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> plan = backups_exact(g, 2.0)
    >>> len(plan.backups), plan.worst, plan.optimal
    (2, 2.0, True)

    Notes
    -----
    The model of problem (5): a Boolean ``m_u`` per task that has consumers and
    an integer ``ℓ_v ∈ [t_v, R]`` per task, with ``ℓ_v ≥ t_v + ℓ_u`` enforced
    when ``m_u`` is false (CP-SAT's enforcement literals replace the big-M
    linearization), minimizing ``Σ m_u``. Tasks with ``t_u + t_w > R`` for a
    consumer ``w`` are fixed to backups, and sinks never are. Latencies are
    scaled by the smallest power of ten (up to 10⁶) that makes them integral;
    otherwise they are scaled by up to 10¹², rounded up and the bound (plus
    the evaluator's tolerance) down, so every integer plan passes the float
    evaluator, and a second solve with the opposite rounding gives the lower
    bound that proves it optimal. The DAG heuristic's plan
    (with local improvement) seeds the solver as a hint. NP-hard in general;
    the solver's time is bounded by ``time_limit``.

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. III-C, problem (5); the seed's exact
    reference is Algorithm exhaust (Sec. IV-E).
    """
    _require_feasible(graph, bound)
    budget = WorkBudget(time_limit)
    hint = _improve(graph, bound, _ftc_dag(graph, bound), budget=budget)
    flags, proven = _exact(graph, bound, max(0.05, budget.seconds_left()), hint)
    if flags is None or sum(flags) > sum(hint):
        flags, proven = hint, sum(hint) == sum(_forced(graph, bound))
    return _finish(graph, bound, "exact", flags, proven)


# --------------------------------------------------------------------------- local search


class _State:
    """Backup flags with their latencies, updated incrementally and transactionally."""

    def __init__(self, graph: TaskGraph, bound: float, flags: list[bool]) -> None:
        self.graph = graph
        self.limit = bound + EPS
        self.flags = list(flags)
        self.ell = _ell(graph, self.flags)

    def set_flag(self, u: int, value: bool) -> bool:
        """Set ``M(u)``; keep it and return True only if every latency stays within R."""
        flags = self.flags
        if flags[u] == value:
            return True
        flags[u] = value
        preds, succs, t, ell = self.graph.preds, self.graph.succs, self.graph.latency, self.ell
        log: list[tuple[int, float]] = []
        heap = list(succs[u])
        queued = set(heap)
        ok = True
        while heap:
            w = heapq.heappop(heap)  # increasing index: inputs are final when w is popped
            worst = 0.0
            for p in preds[w]:
                if not flags[p] and ell[p] > worst:
                    worst = ell[p]
            new = t[w] + worst
            if new == ell[w]:
                continue
            log.append((w, ell[w]))
            ell[w] = new
            if new > self.limit:
                ok = False
                break
            if not flags[w]:
                for s in succs[w]:
                    if s not in queued:
                        queued.add(s)
                        heapq.heappush(heap, s)
        if not ok:
            for w, old in reversed(log):
                ell[w] = old
            flags[u] = not value
        return ok

    def cover(self, c: int) -> list[int]:
        """Backups next to ``c``: its upstream cover set and its downstream b-cover."""
        preds, succs, flags = self.graph.preds, self.graph.succs, self.flags
        out: list[int] = []
        seen = {c}
        stack = list(preds[c])
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            if flags[u]:
                out.append(u)
            else:
                stack.extend(preds[u])
        stack = list(succs[c])
        while stack:
            w = stack.pop()
            if w in seen:
                continue
            seen.add(w)
            if flags[w]:
                out.append(w)
            else:
                stack.extend(succs[w])
        return sorted(out)


def _improve(
    graph: TaskGraph, bound: float, flags: list[bool], *, budget: WorkBudget
) -> list[bool]:
    """Local search: drop redundant backups, then add one to drop two, until stuck.

    Spends ``budget`` (one step per task a move touches), so where it stops does
    not depend on the machine.
    """
    state = _State(graph, bound, flags)
    forced = _forced(graph, bound)
    sinks = _sinks(graph)
    for u in sorted((u for u in range(len(graph)) if state.flags[u]), reverse=True):
        if not forced[u]:
            state.set_flag(u, False)
    improved = True
    while improved and not budget.exhausted:
        improved = False
        for c in range(len(graph)):
            if state.flags[c] or sinks[c]:
                continue
            if budget.exhausted:
                break
            state.set_flag(c, True)
            cover = state.cover(c)
            budget.spend(1 + len(cover))
            dropped = [b for b in cover if not forced[b] and state.set_flag(b, False)]
            if len(dropped) >= 2:
                improved = True
                continue
            for b in dropped:
                state.set_flag(b, True)
            state.set_flag(c, False)
    return state.flags


# --------------------------------------------------------------------------- auto, registry


def backups_auto(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The default: the exact linear algorithm where the shape allows, else the best found.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds for local search and CP-SAT on general DAGs.

    Returns
    -------
    BackupPlan
        ``algorithm`` names the method used: ``auto:tree`` (line(s) and trees,
        always optimal), ``auto:dag+local`` (the heuristic met a lower bound or
        the solver did not beat it), or ``auto:exact``.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> plan = backups_auto(g, 2.0)
    >>> len(plan.backups), plan.optimal
    (2, True)

    Notes
    -----
    Line(s) and trees: O(N) and optimal (:func:`backups_tree`). Other DAGs:
    the seed's DAG heuristic (O(N²) worst case), local search (drop each
    backup that is not needed; add one task where that lets two backups go),
    each move checked incrementally against the bound; if the result does
    not meet the lower bound of forced backups, CP-SAT starts from it and
    keeps whichever plan is smaller when the budget ends, or earlier once the
    solver has found nothing better for a tenth of the budget (at least 0.5 s).

    References
    ----------
    ``minimum-backups-ftc.txt``, Sec. IV (Algorithms 1-4) and problem (5).
    """
    _require_feasible(graph, bound)
    if topology_shape(graph) != "dag":
        return _finish(graph, bound, "auto:tree", _tree_greedy(graph, bound), True)
    budget = WorkBudget(time_limit)
    flags = _improve(graph, bound, _ftc_dag(graph, bound), budget=budget)
    lower = sum(_forced(graph, bound))
    if sum(flags) == lower:
        return _finish(graph, bound, "auto:dag+local", flags, True)
    patience = max(0.5, 0.1 * time_limit)
    exact, proven = _exact(graph, bound, max(0.05, budget.seconds_left()), flags, patience)
    if exact is not None and sum(exact) <= sum(flags):
        return _finish(graph, bound, "auto:exact", exact, proven)
    return _finish(graph, bound, "auto:dag+local", flags, False)


BACKUP_ALGORITHMS: dict[str, BackupAlgorithm] = {
    "auto": backups_auto,
    "line": backups_line,
    "tree": backups_tree,
    "dag": backups_dag,
    "share-based": backups_share_based,
    "exhaustive": backups_exhaustive,
    "exact": backups_exact,
}
"""Every minimum-backup algorithm by name; ``auto`` is the default."""


def plan_backups(
    graph: TaskGraph, bound: float, *, algorithm: str = "auto", time_limit: float = 10.0
) -> BackupPlan:
    """Choose backup tasks with the named algorithm (see :data:`BACKUP_ALGORITHMS`).

    Parameters
    ----------
    graph : TaskGraph
        The task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    algorithm : str
        One of ``auto`` (default), ``line``, ``tree``, ``dag``, ``share-based``,
        ``exhaustive``, ``exact``.
    time_limit : float
        Seconds the searching algorithms may use.

    Returns
    -------
    BackupPlan
        A plan checked by the failure-effect evaluator.

    Raises
    ------
    UnknownAlgorithm
        If ``algorithm`` is not a registered name (the message lists them).
    InvalidTopology
        If ``line`` or ``tree`` is asked for a graph of another shape.
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> plan_backups(g, 2.0).backups
    ('b',)
    >>> plan_backups(g, 0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    planners.errors.Infeasible: bound 0.5s is infeasible: ... smallest feasible bound is 1s

    Notes
    -----
    Dispatch only; see each algorithm for its complexity.

    References
    ----------
    ``minimum-backups-ftc.txt``.
    """
    try:
        fn: Callable[..., BackupPlan] = BACKUP_ALGORITHMS[algorithm]
    except KeyError:
        raise UnknownAlgorithm(
            f"unknown backup algorithm {algorithm!r}; choose one of " + ", ".join(BACKUP_ALGORITHMS)
        ) from None
    return fn(graph, bound, time_limit=time_limit)
