"""The seed's exact O(N) algorithms for line(s) and tree topologies."""

from __future__ import annotations

from planners.backups.common import (
    BackupPlan,
    _finish,
    _require_feasible,
    _tree_greedy,
    topology_shape,
)
from planners.errors import InvalidTopology
from planners.graph import TaskGraph

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
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-B, Algorithm 2, Theorem 2.
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
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-C, Algorithm 3, eq. (6), Theorem 2.
    """
    _require_feasible(graph, bound)
    shape = topology_shape(graph)
    if shape == "dag":
        raise InvalidTopology(
            "algorithm 'tree' needs every task to have at most one consumer; this graph "
            "is a general DAG (use 'dag', 'exact' or 'auto')"
        )
    return _finish(graph, bound, "tree", _tree_greedy(graph, bound), True)
