"""The seed's comparison algorithms: the share-based baseline and Algorithm exhaust."""

from __future__ import annotations

import math
import time
from itertools import combinations

from planners.backups.common import (
    EPS,
    BackupPlan,
    _ell,
    _finish,
    _forced,
    _require_feasible,
    _sinks,
)
from planners.errors import PlannerError
from planners.graph import TaskGraph

EXHAUSTIVE_MAX_TASKS = 20
"""``exhaustive`` refuses larger graphs unless the caller passes ``max_tasks``: it
enumerates subsets of the tasks."""


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
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. V-A ("share-based"), Table I.
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


def backups_exhaustive(
    graph: TaskGraph,
    bound: float,
    *,
    time_limit: float = 10.0,
    max_tasks: int | None = EXHAUSTIVE_MAX_TASKS,
) -> BackupPlan:
    """The seed's reference: try every set of backups, fewest first.

    Parameters
    ----------
    graph : TaskGraph
        At most ``max_tasks`` tasks.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds the search may use; it stops with an error when they run out.
    max_tasks : int or None
        Largest graph accepted (default :data:`EXHAUSTIVE_MAX_TASKS`, where the
        search is quick); ``None`` accepts any size, bounded by ``time_limit``
        alone (the seed's Table III runs it on 93 tasks).

    Returns
    -------
    BackupPlan
        A minimum plan (``optimal=True``); among minimum plans, one with the
        smallest worst latency (as the seed's Algorithm exhaust).

    Raises
    ------
    PlannerError
        If the graph has more than ``max_tasks`` tasks, or ``time_limit`` runs
        out before a plan is found (the message says how far the search got).
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
    others are enumerated. Each size ``k`` is tried in full before ``k + 1``,
    so the time grows with ``C(K, k)`` for the minimum ``k``: graphs of tens of
    tasks finish when few backups are needed and run out of time otherwise.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-E (Algorithm exhaust), Sec. V-B (Table III).
    """
    if max_tasks is not None and len(graph) > max_tasks:
        raise PlannerError(
            f"algorithm 'exhaustive' is limited to {max_tasks} tasks (max_tasks) and this "
            f"graph has {len(graph)}; use 'exact' (provably optimal, with a time budget), "
            "or call backups_exhaustive with max_tasks=None and a time_limit"
        )
    _require_feasible(graph, bound)
    deadline = time.monotonic() + time_limit
    forced = _forced(graph, bound)
    sinks = _sinks(graph)
    free = [u for u in range(len(graph)) if not forced[u] and not sinks[u]]
    for k in range(len(free) + 1):
        best = _best_of_size(graph, bound, forced, free, k, deadline)
        if best is None:
            continue
        if best is _OUT_OF_TIME:
            raise PlannerError(
                f"algorithm 'exhaustive' ran out of its time budget of {time_limit:g}s: "
                f"no plan with up to {k - 1 + sum(forced)} backups keeps R = {bound:g}s, "
                f"and the {math.comb(len(free), k)} plans with {k + sum(forced)} were not "
                f"all tried ({len(free)} candidate tasks); raise time_limit or use 'exact'"
            )
        assert isinstance(best, list)
        return _finish(graph, bound, "exhaustive", best, True)
    raise RuntimeError("internal error: backing up every task must keep a feasible bound")


_OUT_OF_TIME = object()


def _best_of_size(
    graph: TaskGraph,
    bound: float,
    forced: list[bool],
    free: list[int],
    k: int,
    deadline: float,
) -> list[bool] | object | None:
    """The feasible plan of ``k`` free backups with the smallest worst latency, if any.

    ``_OUT_OF_TIME`` if the deadline passes first (checked every 256 plans).
    """
    best: tuple[float, list[bool]] | None = None
    for i, combo in enumerate(combinations(free, k)):
        if i % 256 == 255 and time.monotonic() > deadline:
            return _OUT_OF_TIME
        flags = list(forced)
        for u in combo:
            flags[u] = True
        worst = max(_ell(graph, flags))
        if worst <= bound + EPS and (best is None or worst < best[0]):
            best = (worst, flags)
    return None if best is None else best[1]
