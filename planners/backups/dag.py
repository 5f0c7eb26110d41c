"""The seed's heuristic for general DAGs: Algorithm FTC with ChooseBackup-DAG."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Literal

from planners.backups.common import EPS, BackupPlan, _finish, _forced, _require_feasible
from planners.backups.local import _State
from planners.graph import TaskGraph

Ranking = Literal["covered-share", "workload"]
"""How a round ranks its candidates: ours, or by ``B`` first as Algorithm 4 reads."""

Elimination = Literal["redundant", "b-covered", "none"]
"""How ``dag`` ends (the seed's "remove tasks that have been b-covered … to
eliminate redundant backups"): every redundant backup after the last round,
only the backups a round's new backup b-covers, or nothing."""


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


@dataclass
class _Region:
    """GenerateCandidates: the tasks reachable from ``v`` through non-backups."""

    dist: dict[int, float]
    """``D(v, w)``: the longest such path (``v``'s own ``t`` only if it keeps no backup)."""
    expanded: set[int]
    """Tasks the paths go through (``v`` and the reached non-backups within the bound)."""
    order: list[int]
    """Reached tasks within the bound, in topological order."""
    violators: list[int]
    """Reached tasks beyond the bound."""


def _region(graph: TaskGraph, limit: float, v: int, flags: list[bool]) -> _Region:
    t, preds, succs = graph.latency, graph.preds, graph.succs
    region = _Region({v: 0.0 if flags[v] else t[v]}, {v}, [], [])
    dist, expanded = region.dist, region.expanded
    heap = list(succs[v])
    seen = set(heap)
    while heap:
        w = heapq.heappop(heap)  # topological order: all in-region inputs are done
        d = t[w] + max(dist[p] for p in preds[w] if p in expanded)
        dist[w] = d
        if d > limit:
            region.violators.append(w)
            continue
        region.order.append(w)
        if flags[w]:
            continue  # an existing backup ends the path
        expanded.add(w)
        for s in succs[w]:
            if s not in seen:
                seen.add(s)
                heapq.heappush(heap, s)
    return region


def _best_candidate(
    graph: TaskGraph, v: int, flags: list[bool], region: _Region, ranking: Ranking
) -> int:
    """The region's task to give a backup next (the ranking is in the module doc)."""
    t, preds, succs = graph.latency, graph.preds, graph.succs
    expanded, order, dist = region.expanded, region.order, region.dist
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
    g = dict.fromkeys(region.violators, 1.0)
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
    if ranking == "workload":  # Algorithm 4 as written: highest B, then distance
        return max(candidates, key=lambda w: (round(b[w], 9), dist[w], -w))
    return max(
        candidates,
        key=lambda w: (round(f[w] * g[w], 9), round(b[w], 9), dist[w], -w),
    )


def _choose_backup_dag(
    graph: TaskGraph, bound: float, v: int, flags: list[bool], ranking: Ranking = "covered-share"
) -> list[int]:
    """One round of the seed's ChooseBackup-DAG from search source ``v``.

    Returns the new backups; ``flags`` is updated in place (``v`` itself may
    become a backup if one of its consumers cannot wait for it).
    """
    t, succs = graph.latency, graph.succs
    limit = bound + EPS
    if not flags[v] and any(t[v] + t[w] > limit for w in succs[v]):
        flags[v] = True
    picks: list[int] = []
    while True:
        region = _region(graph, limit, v, flags)
        if not region.violators:
            return picks  # Rule II: every path from v now meets a backup or a sink within R
        best = _best_candidate(graph, v, flags, region, ranking)
        flags[best] = True
        picks.append(best)


def _b_covered_backups(graph: TaskGraph, w: int, flags: list[bool]) -> list[int]:
    """Backups that new backup ``w`` b-covers (Definition 2): no other backup between them.

    Walks upstream from ``w`` through tasks without a backup and collects the
    backups it meets (it does not walk past them); latest task first.
    """
    preds = graph.preds
    found: set[int] = set()
    seen = {w}
    stack = list(preds[w])
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if flags[u]:
            found.add(u)
        else:
            stack.extend(preds[u])
    return sorted(found, reverse=True)


def _paths_fit_without(state: _State, u: int) -> bool:
    """Whether every path through ``u`` stays within ``R`` once ``u`` keeps no backup.

    Mid-algorithm some tasks are still beyond ``R`` (later rounds handle
    them), so "no latency that changes goes beyond ``R``" is not enough: a
    path through ``u`` hidden behind a longer one would show once a later
    round cuts the longer one. Every path from ``u`` up to the next backup
    (or a sink) is checked instead, with ``u``'s own latency as it is now.
    """
    graph, flags, limit = state.graph, state.flags, state.limit
    t, preds, succs = graph.latency, graph.preds, graph.succs
    via = {u: state.ell[u]}
    heap = list(succs[u])
    seen = set(heap)
    while heap:
        w = heapq.heappop(heap)  # topological order: every in-region input is done
        via[w] = t[w] + max(via[p] for p in preds[w] if p in via and (p == u or not flags[p]))
        if via[w] > limit:
            return False
        if not flags[w]:
            for s in succs[w]:
                if s not in seen:
                    seen.add(s)
                    heapq.heappush(heap, s)
    return True


def _ftc_dag(
    graph: TaskGraph,
    bound: float,
    elimination: Elimination = "none",
    ranking: Ranking = "covered-share",
) -> list[bool]:
    """Algorithm FTC (seed Algorithm 1) with ChooseBackup-DAG (Algorithm 4).

    ``elimination`` picks the final step (:data:`Elimination`); a backup is
    removed only when every latency its removal changes stays within ``R``.
    """
    flags = [False] * len(graph)
    level = _bfs_levels(graph)
    heap = [(-level[s], -s, s) for s in graph.sources]
    heapq.heapify(heap)
    queued = set(graph.sources)
    state = _State(graph, bound, flags) if elimination == "b-covered" else None
    forced = _forced(graph, bound)
    while heap:
        _, _, v = heapq.heappop(heap)  # the pending search source of largest index I(v)
        was_backup = flags[v]
        picks = _choose_backup_dag(graph, bound, v, flags, ranking)
        for w in picks:
            if w not in queued:
                queued.add(w)
                heapq.heappush(heap, (-level[w], -w, w))
        if state is None:
            continue
        new = [*picks, v] if flags[v] and not was_backup else picks
        for w in new:  # the round's new backups, into the tracked latencies
            state.flags[w] = False
            state.set_flag(w, True, check=False)
        for w in new:
            for u in _b_covered_backups(graph, w, flags):
                if not forced[u] and _paths_fit_without(state, u):
                    state.set_flag(u, False, check=False)
                    flags[u] = False
    if elimination == "redundant":
        state = _State(graph, bound, flags)
        for u in sorted((u for u in range(len(graph)) if flags[u]), reverse=True):
            if not forced[u]:
                state.set_flag(u, False)
        flags = state.flags
    return flags


def backups_dag(
    graph: TaskGraph,
    bound: float,
    *,
    time_limit: float = 10.0,
    elimination: Elimination = "redundant",
    ranking: Ranking = "covered-share",
) -> BackupPlan:
    """The seed's heuristic for general DAGs: Algorithm FTC with ChooseBackup-DAG.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused (the heuristic does not search); kept for the common signature.
    elimination : {"redundant", "b-covered", "none"}
        The seed's final step, "remove tasks that have been b-covered … to
        eliminate redundant backups": ``"redundant"`` (default) removes, after
        the last round and latest task first, every backup whose removal keeps
        every ``L(v) ≤ R``; ``"b-covered"`` removes at the end of each round
        only the redundant backups that a new backup b-covers (Definition 2:
        no other backup between them); ``"none"`` skips the step
        (:func:`backups_dag_no_elim`).
    ranking : {"covered-share", "workload"}
        How a round picks its next backup: ours (default, see Notes) or
        Algorithm 4 as written, highest backup workload ``B`` first.

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
    beyond ``R``. A round ends when no task beyond ``R`` remains, the exact
    form of the seed's "``F`` sums to 1" rule that also holds where paths end
    at sinks. Every path from every search source is then within ``R``, so the
    plan is valid (seed Lemma 3); the elimination step removes a backup only
    when every latency that changes stays within ``R``.

    Each round costs O(Z log Z) per pick for a region of ``Z`` tasks within
    ``R``, so the whole is O(N²) in the worst case (seed Theorem 1) and close to
    linear when ``R`` spans few tasks; the final step is O(M · (N + E)) in the
    worst case for ``M`` backups.

    Deviations from the seed, each measured on its Guru and Senti cases by
    ``bench/bench_backups.py`` (the average gap to the proven optimum per row):

    - Ranking (Sec. IV-D, Algorithm 4, lines 6-7: "choose tasks with highest ``B(v)``"):
      candidates are ranked first by the share of ``v``'s stream they b-cover on its way
      beyond ``R`` (the b-cover percentage ``F`` of eq. 7, restricted to the flow that
      needs a backup), then by ``B`` (eq. 8), then by the longest distance. On lines and
      trees every candidate covers the whole stream, so this is the seed's order; on
      shuffle-heavy DAGs ranking by ``B`` first picks many parallel tasks where one
      upstream task covers them all (on Twitter Sentiment it stays far above the optimum
      even with the elimination step below). The seed's ranking is kept as
      ``ranking="workload"``.
    - Elimination (Sec. IV-D, "Finally, we remove tasks that have been
      b-covered from the new backup task to eliminate redundant backups"):
      the seed does not say when a b-covered backup is redundant nor which
      ones it removes. We remove a backup when the bound still holds without
      it, either only among the backups a round's new backup b-covers
      (``elimination="b-covered"``) or, the default, among every backup once
      at the end, which comes closest to the optimum and to the seed's own
      gap (Sec. V-B); ``"none"`` skips the step. Read with Algorithm 4's line 11
      ("remove all tasks on the paths from v to v_mark in Z"), the sentence
      removes candidates, not backups.

    Algorithm 4 with every step as printed is
    :func:`planners.backups.dag_paper.backups_dag_paper`; its plans can leave a
    task beyond ``R`` (``docs/ftc-algorithm4.md``).

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-A and IV-D, Algorithms 1 and 4, eqs. (7) and (8), Lemma 3,
    Theorem 1.
    """
    _require_feasible(graph, bound)
    flags = _ftc_dag(graph, bound, elimination, ranking)
    lower = sum(_forced(graph, bound))
    name = {"redundant": "dag", "b-covered": "dag-b-covered", "none": "dag-no-elim"}[elimination]
    if ranking == "workload":
        name += "+workload"
    return _finish(graph, bound, name, flags, True if sum(flags) == lower else None)


def backups_dag_no_elim(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The seed's DAG heuristic without its final redundancy-elimination step.

    ``auto`` and ``exact`` start from this plan and remove redundant backups in
    their own local search.

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
        As :func:`backups_dag`, with ``algorithm="dag-no-elim"``.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> backups_dag_no_elim(g, 2.0).backups
    ('s', 'c')

    Notes
    -----
    As :func:`backups_dag` with ``elimination="none"``, which is further from
    the optimum on the seed's Guru and Senti cases (``bench/bench_backups.py``).

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-D, Algorithms 1 and 4 (without the final elimination step).
    """
    return backups_dag(graph, bound, time_limit=time_limit, elimination="none")
