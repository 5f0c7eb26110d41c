"""The RTAP seed's Algorithm 1: WUD order, grouping, then 1-D packing per group."""

from __future__ import annotations

from collections.abc import Iterable

from planners.graph import TaskGraph
from planners.placement.model import NodePool, Placement
from planners.placement.state import _run_greedy

# ------------------------------------------------------------------ Algorithm 1


def place_rtap_nf(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with next fit (A^RTAP-NF).

    Tasks are sorted by weighted upstream degree (:func:`weighted_upstream_degree`,
    ties by breadth-first order), partitioned into groups that hold no pair of
    adjacent tasks that could never share a node, and each group is packed on its
    own nodes with next fit and the recovery check.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> place_rtap_nf(g, NodePool.uniform(2), bound=1).nodes_used
    2

    Notes
    -----
    O(n log n) to sort, O(n · d) to group (d = degree), then as next fit.

    References
    ----------
    Algorithm 1 and equation (10) of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("rtap-nf", graph, pool, bound, backups, "nf", grouped=True)


def place_rtap_ff(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with first fit (A^RTAP-FF).

    As :func:`place_rtap_nf`, packing each group with first fit.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "c"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> place_rtap_ff(g, NodePool.uniform(3), bound=2).nodes_used
    1

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Algorithm 1 of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("rtap-ff", graph, pool, bound, backups, "ff", grouped=True)


def place_rtap_bf(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with best fit (A^RTAP-BF), its best variant.

    As :func:`place_rtap_nf`, packing each group with best fit (least CPU left).

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = place_rtap_bf(g, NodePool.uniform(3), bound=1)
    >>> p.nodes_used, p.worst
    (2, 1.0)

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Algorithm 1 of ``seeds/rtap-journal.txt``; Table 5 reports it best of six.
    """
    return _run_greedy("rtap-bf", graph, pool, bound, backups, "bf", grouped=True)
