"""The RTAP seed's 2SP-based greedy baselines (A^NFDH, A^FFDH, A^BFDH)."""

from __future__ import annotations

from collections.abc import Iterable

from planners.graph import TaskGraph
from planners.placement.model import NodePool, Placement
from planners.placement.state import _run_greedy

# ------------------------------------------------------------------ baselines


def place_nfdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Next-fit decreasing height with the recovery check (the seed's A^NFDH).

    Tasks are sorted by reprocessing latency (the item height), ties by
    decreasing CPU (the width); each goes to the current node if it fits there
    (capacity, and the node's failure keeps the bound), else a new node is opened.

    Parameters
    ----------
    graph:
        The task DAG.
    pool:
        The nodes (explicit, or identical nodes on demand).
    bound:
        Recovery-latency bound ``R`` in seconds.
    backups:
        Tasks that keep upstream backups; ``None`` (the seeds' model) means all.
    time_limit:
        Unused (the greedy takes milliseconds); part of the shared signature.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        A task wider than every node, a task whose own recovery exceeds the
        bound (the message names the smallest feasible bound), or no node left.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1},
    ...                     weight={"a": 0.5, "b": 0.5})
    >>> place_nfdh(g, NodePool.uniform(1), bound=1).nodes_used
    2
    >>> place_nfdh(g, NodePool.uniform(1), bound=2).nodes_used
    1

    Notes
    -----
    O(n log n) to sort plus O(|K_p| + its edges) per recovery check.

    Deviation from the seed: a fit is tested with the failure-effect model
    itself (``H(K_p ∪ {v}) ≤ R``, every task on the node re-evaluated), not
    by the node's level height plus the task's height as the seed's 2SP
    greedy algorithms do (Section 4.2). That makes
    these baselines much stronger than the seed's (on its Table 4 instances
    BFDH then beats RTAP-BF, where the seed reports the opposite);
    the seed's reading is :func:`planners.placement.place_nfdh_2sp` and its
    siblings. ``ffdh`` and ``bfdh`` deviate the same way.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Section 4.2.
    """
    return _run_greedy("nfdh", graph, pool, bound, backups, "nf", grouped=False)


def place_ffdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """First-fit decreasing height with the recovery check (the seed's A^FFDH).

    Same order as :func:`place_nfdh`; each task goes to the first opened node
    where it fits and the node's failure keeps the bound.

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
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = place_ffdh(g, NodePool.uniform(2), bound=1)
    >>> p.nodes_used, p.assignment["a"] != p.assignment["b"]
    (2, True)

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Section 4.2.
    """
    return _run_greedy("ffdh", graph, pool, bound, backups, "ff", grouped=False)


def place_bfdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Best-fit decreasing height with the recovery check (the seed's A^BFDH).

    Same order as :func:`place_nfdh`; each task goes to the opened node with the
    least CPU left after it, among those where the node's failure keeps the bound.

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
    >>> place_bfdh(g, NodePool.uniform(2), bound=2).nodes_used
    1

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Section 4.2.
    """
    return _run_greedy("bfdh", graph, pool, bound, backups, "bf", grouped=False)
