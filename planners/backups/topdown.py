"""The seed's tree algorithm as it is written: searches from the sources down to the sink."""

from __future__ import annotations

from collections import deque

from planners.backups.common import EPS, BackupPlan, _finish, _require_feasible, topology_shape
from planners.errors import InvalidTopology
from planners.graph import TaskGraph


def backups_tree_topdown(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """Backups for tree topologies by the seed's top-down search (Algorithms 1 and 3).

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
        A plan that keeps ``R`` (``optimal=None``: often minimum, not always;
        see Notes).

    Raises
    ------
    InvalidTopology
        If some task has more than one consumer.
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    A join ``j`` of a light, deep branch ``a → a2`` and a heavy, shallow one
    ``b``, then ``j → c → d → e`` (the sink):

    >>> lat = {"a": 1, "a2": 1, "b": 6, "j": 2, "c": 2, "d": 2, "e": 2}
    >>> g = TaskGraph.build(list(lat), [("a", "a2"), ("a2", "j"), ("b", "j"),
    ...                     ("j", "c"), ("c", "d"), ("d", "e")], latency=lat)
    >>> backups_tree_topdown(g, 8.0).backups
    ('j', 'd')

    The search from ``a`` (the deepest source) runs ``1+1+2+2+2 = 8`` up to ``d``
    and backs it up; the search from ``b`` runs ``6+2 = 8`` up to ``j`` and backs
    it up too. One backup suffices (the bottom-up ``tree`` algorithm's):

    >>> from planners.backups.shapes import backups_tree
    >>> backups_tree(g, 8.0).backups
    ('j',)

    Notes
    -----
    O(N) walks of at most the path length each. The tasks are indexed by a
    breadth-first search from a virtual sink joined to every sink (Sec. IV-A);
    Algorithm 1 keeps a set ``S`` of search sources, first the sources, and
    repeatedly searches from the one of largest index; Algorithm 3 walks from it
    towards the sink adding up ``T`` (from 0 when the source is itself a
    backup), and backs up the last task before the sum passes ``R``; each new
    backup joins ``S``. A walk that reaches the sink backs up nothing (the
    virtual sink stands for "no backup").

    One repair: line 8 of Algorithm 3 tests ``M(v)`` of the walk's current task
    ``v``, and the first time round that is the search source itself, which for
    every source taken from ``S`` after the first round is a backup; as written
    every such search ends at once and a line longer than two segments keeps
    unbounded latency. Here line 8 tests every task the walk reaches after its
    source, which is what the text says ("finishes the search ... where a
    scanned task is already set up as new backup task").

    The result keeps ``R`` (Lemma 2) but is not always minimum, against
    Theorem 2: a walk places its backup as far down as its own path allows,
    before a branch that joins that path later and is heavier forces another
    backup above it. A light, deep source does this with non-uniform ``T``
    (the example above); with uniform ``T`` a backup searched before a source
    of the same depth does it (the breadth-first order breaks such ties
    arbitrarily), e.g. ``s1 → x → j``, ``s2 → j``, ``j → k → o``, ``R = 2``
    gives ``x, j, k`` where ``x, j`` suffice. ``tree`` (bottom-up) is minimum
    on every tree and stays the default for trees.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-A (Algorithm 1), Sec. IV-C (Algorithm 3, Lemma 2),
    Sec. IV-E (Theorem 2).
    """
    _require_feasible(graph, bound)
    if topology_shape(graph) == "dag":
        raise InvalidTopology(
            "algorithm 'tree-topdown' needs every task to have at most one consumer; this "
            "graph is a general DAG (use 'dag', 'exact' or 'auto')"
        )
    index = _bfs_index(graph)
    flags = [False] * len(graph)
    pending = {v for v, ps in enumerate(graph.preds) if not ps}
    while pending:
        v = max(pending, key=index.__getitem__)  # Algorithm 1, line 3
        pending.remove(v)
        for u in _choose_backup_tree(graph, bound, v, flags):
            flags[u] = True
            pending.add(u)
    return _finish(graph, bound, "tree-topdown", flags, None)


def _bfs_index(graph: TaskGraph) -> list[int]:
    """``I(v)``: the breadth-first order from a virtual sink (index 0) over the inputs."""
    index = [0] * len(graph)
    queue = deque(v for v, ss in enumerate(graph.succs) if not ss)
    seen = set(queue)
    n = 0
    while queue:
        v = queue.popleft()
        n += 1
        index[v] = n
        for u in graph.preds[v]:
            if u not in seen:
                seen.add(u)
                queue.append(u)
    return index


def _choose_backup_tree(graph: TaskGraph, bound: float, v: int, flags: list[bool]) -> list[int]:
    """Algorithm 3 from search source ``v``: the new backup, or none."""
    t, succs = graph.latency, graph.succs
    r = 0.0 if flags[v] else t[v]  # lines 1-4
    source = v
    mark = v
    while r <= bound + EPS:  # line 5
        mark = v  # line 6
        if v != source and flags[v]:  # line 8, on the tasks the walk reaches
            return []
        if not succs[v]:  # the virtual sink is next: nothing to back up
            return []
        v = succs[v][0]  # line 7 (one consumer)
        r += t[v]  # line 12
    return [mark]  # line 15
