"""The seed's heuristic for general DAGs: Algorithm FTC with ChooseBackup-DAG."""

from __future__ import annotations

import heapq
from collections import deque

from planners.backups.common import EPS, BackupPlan, _finish, _forced, _require_feasible
from planners.graph import TaskGraph

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
