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

    Deviations from the seed (``rtap-ff`` and ``rtap-bf`` share them):

    - Grouping (Section 5.3.3, "v_i can be put into G'_g iff
      ∀v_j∈G'_g, h_j+t_i ≤ H̄"): the test is applied to adjacent
      (backup-dependent) pairs only, in both directions, since the seed
      itself notes that independent tasks may share a processor. As written
      it separates any two tall tasks and costs many more nodes on the
      seed's Table 4 instances (``docs/benchmarks/index.md``); that reading is
      :func:`place_rtap_nf_literal`.
    - Packing (Algorithm 1 line 4, "Apply 1SP algorithm … according to (1)
      and constraint (7)"): a task is placed only where the model's ``H`` of
      the node, every task on it re-evaluated, stays within ``R``, so the
      seed's backtracking of tasks made unfit by a later one (Section 4.3:
      "They will be picked out and put back into the item queue")
      never arises.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1 and equation (10).
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
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1.
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
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1; Table 5 reports it best of six.
    """
    return _run_greedy("rtap-bf", graph, pool, bound, backups, "bf", grouped=True)


# ------------------------------------------------------- the seed's grouping rule, literally


def place_rtap_nf_literal(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """A^RTAP-NF with the seed's grouping rule as written (Section 5.3.3).

    As :func:`place_rtap_nf`, but task ``v`` joins the first group whose every
    member ``u`` has ``h_u + t_v ≤ R`` ("v_i can be put into G'_g iff
    ∀v_j∈G'_g, h_j+t_i ≤ H̄"), adjacent or not; a group's nodes are packed with
    the recovery check as before, so the bound holds.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`planners.placement.place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`planners.placement.place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [], latency={"a": 0.6, "b": 0.6})
    >>> place_rtap_nf_literal(g, NodePool.uniform(2), bound=1).nodes_used
    2
    >>> place_rtap_nf(g, NodePool.uniform(2), bound=1).nodes_used
    1

    Notes
    -----
    O(n · q) to group for q groups, then as next fit.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1 and Section 5.3.3.
    """
    return _run_greedy("rtap-nf-literal", graph, pool, bound, backups, "nf", True, literal=True)


def place_rtap_ff_literal(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """A^RTAP-FF with the seed's grouping rule as written (Section 5.3.3).

    As :func:`place_rtap_nf_literal`, packing each group with first fit.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`planners.placement.place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`planners.placement.place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [], latency={"a": 0.6, "b": 0.3, "c": 0.3})
    >>> place_rtap_ff_literal(g, NodePool.uniform(3), bound=1).nodes_used
    1

    Notes
    -----
    O(n · q) to group, then O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1 and Section 5.3.3.
    """
    return _run_greedy("rtap-ff-literal", graph, pool, bound, backups, "ff", True, literal=True)


def place_rtap_bf_literal(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """A^RTAP-BF with the seed's grouping rule as written (Section 5.3.3).

    As :func:`place_rtap_nf_literal`, packing each group with best fit.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`planners.placement.place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`planners.placement.place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 0.5, "b": 0.5, "c": 0.5})
    >>> p = place_rtap_bf_literal(g, NodePool.uniform(3), bound=1)
    >>> p.nodes_used, p.worst <= 1
    (2, True)

    Notes
    -----
    O(n · q) to group, then O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1 and Section 5.3.3.
    """
    return _run_greedy("rtap-bf-literal", graph, pool, bound, backups, "bf", True, literal=True)
