"""Query-level importance and the seed's two other selection procedures.

*Adaptive Selective Replication for Complex Event Processing Systems* observes that an
operator-level heuristic may replicate most but not all operators of a query, leaving weak
spots, and proposes a query importance ``impQ_heur: Q → [0, 1]`` combined from the operator
importances, with a selection that replicates whole queries first and single operators only
when no full query fits (Section 3.1.3). Its simple selection has two procedures for the
replication level (Section 3.2.1): raise every selected operator's level stepwise
(procedure 1, :func:`planners.replication.replicate_sort_fill`), or set a level above one
directly, so fewer operators are replicated (procedure 2, :func:`replicate_direct_level`).
"""

from __future__ import annotations

from collections.abc import Mapping

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication.model import ReplicationPlan, importance
from planners.replication.placement import _EPS, _Cluster

__all__ = [
    "QUERY_COMBINE",
    "query_importance",
    "replicate_direct_level",
    "replicate_query_fill",
]

QUERY_COMBINE = ("mean", "min", "product")
"""How operator importances combine into a query's (the seed leaves it open)."""


def query_importance(
    graph: TaskGraph, strategy: str = "qod-lu", *, combine: str = "mean", seed: int = 0
) -> dict[str, float]:
    """The seed's normalised query importance ``impQ_heur`` of every query.

    Parameters
    ----------
    graph:
        The task DAG; a query is an output task with its upstream closure.
    strategy:
        The operator heuristic ``heur`` (see :func:`planners.replication.importance`).
    combine:
        ``mean`` (default) of the query's operator importances, ``min`` (its
        weakest operator) or ``product``; each keeps the value in ``[0, 1]``.
    seed:
        Seed of the ``random`` heuristic.

    Returns
    -------
    dict
        ``{query (output task) id: importance in [0, 1]}``.

    Raises
    ------
    UnknownAlgorithm
        For an unknown heuristic or combination.

    Examples
    --------
    Two queries ``a`` and ``b`` sharing the source ``s``: QOD rates ``s`` 1 (both
    queries use it) and ``a``, ``b`` 1/2 each, so each query's mean is 3/4.

    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 2, "a": 1, "b": 1})
    >>> query_importance(g, "qod")
    {'a': 0.75, 'b': 0.75}
    >>> query_importance(g, "qod", combine="min")
    {'a': 0.5, 'b': 0.5}

    Notes
    -----
    The seed says only that operator importances are "combined" into a
    normalised query importance (Section 3.1.3); the three combinations are
    the natural normalised ones. O(Σ_q |closure(q)|).

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Section 3.1.3.
    """
    if combine not in QUERY_COMBINE:
        raise UnknownAlgorithm(
            f"unknown query combination {combine!r}; choose one of: {', '.join(QUERY_COMBINE)}"
        )
    imp = importance(graph, strategy, seed=seed)
    out: dict[str, float] = {}
    for q in sorted(graph.outputs):
        vals = [imp[graph.tasks[v]] for v in sorted(graph.upstream_closure[q])]
        if combine == "mean":
            x = sum(vals) / len(vals)
        elif combine == "min":
            x = min(vals)
        else:
            x = 1.0
            for y in vals:
                x *= y
        out[graph.tasks[q]] = x
    return out


def replicate_query_fill(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    *,
    budget: float,
    strategy: str = "qod-lu",
    seed: int = 0,
    max_colors: int | None = None,
    level: int = 1,
    host_order: str | None = None,
    net: Mapping[str, float] | None = None,
    net_capacity: Mapping[str, float] | None = None,
    host_failure_prob: float | None = None,
    combine: str = "mean",
) -> ReplicationPlan:
    """The seed's selection on query-level importance: whole queries first, then operators.

    Queries in decreasing ``impQ`` (:func:`query_importance`) are selected whole:
    every operator of the query not yet selected gets a replica, if together they
    fit what is left of ``load_rem`` (``budget``) and each fits some host. Then,
    as the seed says, "only if not enough resources are available to replicate a
    full query, single operators would be selected": the budget left goes to single
    operators in decreasing operator importance. With ``level > 1`` both passes
    repeat per level (procedure 1). Placement as in
    :func:`planners.replication.replicate_sort_fill`.

    Parameters
    ----------
    graph, assignment, spare, budget, strategy, seed, max_colors, level, host_order, net,
    net_capacity, host_failure_prob:
        As for :func:`planners.replication.replicate_sort_fill`.
    combine:
        The query combination of :func:`query_importance`.

    Returns
    -------
    ReplicationPlan
        ``selection`` is ``"query-fill"``.

    Raises
    ------
    UnknownAlgorithm, InvalidTopology, ValueError
        As for :func:`planners.replication.replicate_sort_fill`.

    Examples
    --------
    Queries ``a`` (``s → a``) and ``b`` (``t → b``), 1 core to spend. LU rates
    ``a`` highest, so the operator-level sort-and-fill takes ``a`` and ``b`` (``t`` and
    ``b`` tie: the output first) and leaves both queries with an unreplicated operator;
    the query-level selection
    replicates query ``b`` whole (mean LU 0.5 against 0.4):

    >>> g = TaskGraph.build(["s", "a", "t", "b"], [("s", "a"), ("t", "b")],
    ...     latency=dict.fromkeys("satb", 1.0),
    ...     weight={"s": 1.0, "a": 0.2, "t": 0.5, "b": 0.5})
    >>> args = (g, dict.fromkeys("satb", "n1"), {"n2": 3.0})
    >>> sorted(replicate_query_fill(*args, budget=1.0, strategy="lu").replicas)
    ['b', 't']
    >>> from planners.replication.select import replicate_sort_fill
    >>> sorted(replicate_sort_fill(*args, budget=1.0, strategy="lu").replicas)
    ['a', 'b']

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.1.3 and 3.2.1.
    """
    imp = importance(graph, strategy, seed=seed)
    imp_q = query_importance(graph, strategy, combine=combine, seed=seed)
    cl = _Cluster(
        graph,
        assignment,
        spare,
        budget,
        level,
        host_order or "neighbour",
        net,
        net_capacity,
        host_failure_prob,
    )
    queries = sorted(graph.outputs, key=lambda q: (-imp_q[graph.tasks[q]], q))
    ops = sorted(cl.primary, key=lambda v: (-imp[graph.tasks[v]], v))
    count: dict[int, int] = {}
    used = 0.0
    for lvl in range(1, level + 1):
        for q in queries:
            need = [v for v in sorted(graph.upstream_closure[q]) if count.get(v, 0) < lvl]
            if not all(v in cl.primary and cl.fits_somewhere(v) for v in need):
                continue
            w = sum(graph.weight[v] for v in need)
            if used + w <= cl.limit + _EPS:
                used += w
                for v in need:
                    count[v] = lvl
        for v in ops:
            w = graph.weight[v]
            if count.get(v, 0) < lvl and cl.fits_somewhere(v) and used + w <= cl.limit + _EPS:
                used += w
                count[v] = lvl
    chosen = [v for v in sorted(count, key=lambda v: (-imp[graph.tasks[v]], v))]
    order = [v for k in range(1, level + 1) for v in chosen if count[v] >= k]
    placed, missed, _, _ = cl.place_colored(order, max_colors)
    return cl.plan(strategy, "query-fill", imp, placed, missed)


def replicate_direct_level(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    *,
    budget: float,
    strategy: str = "qod-lu",
    seed: int = 0,
    max_colors: int | None = None,
    level: int = 1,
    host_order: str | None = None,
    net: Mapping[str, float] | None = None,
    net_capacity: Mapping[str, float] | None = None,
    host_failure_prob: float | None = None,
) -> ReplicationPlan:
    """The seed's procedure 2: each selected operator gets ``level`` replicas at once.

    Operators in decreasing importance are selected with replication level
    ``level`` set directly, while ``level`` replicas of the next one fit what is
    left of ``load_rem`` (``budget``) and at least ``level`` hosts other than its
    primary's could each hold one; so, as the seed says, "some operators might be
    excluded from replication, if already all resources are consumed".
    With ``level = 1`` it selects as procedure 1 does. Placement as in
    :func:`planners.replication.replicate_sort_fill`.

    Parameters
    ----------
    graph, assignment, spare, budget, strategy, seed, max_colors, level, host_order, net,
    net_capacity, host_failure_prob:
        As for :func:`planners.replication.replicate_sort_fill`.

    Returns
    -------
    ReplicationPlan
        ``selection`` is ``"sort-fill-direct"``.

    Raises
    ------
    UnknownAlgorithm, InvalidTopology, ValueError
        As for :func:`planners.replication.replicate_sort_fill`.

    Examples
    --------
    Three 1-core operators, 4 cores, level 2: procedure 2 gives the two most
    important operators two replicas each; procedure 1 (``sort-fill``) would give
    all three one and the first a second.

    >>> g = TaskGraph.build(["a", "b", "c"], [],
    ...     latency=dict.fromkeys("abc", 1.0), weight=dict.fromkeys("abc", 1.0))
    >>> plan = replicate_direct_level(g, dict.fromkeys("abc", "n0"),
    ...     {"n1": 2.0, "n2": 2.0, "n3": 2.0}, budget=4.0, strategy="qod", level=2)
    >>> {t: len(hs) for t, hs in plan.replicas.items()}
    {'a': 2, 'b': 2}

    Notes
    -----
    Deviation, as in ``sort-fill``: an operator whose ``level`` replicas do not
    fit is skipped and the fill goes on with the next.

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Section 3.2.1 (procedure 2).
    """
    imp = importance(graph, strategy, seed=seed)
    cl = _Cluster(
        graph,
        assignment,
        spare,
        budget,
        level,
        host_order or "neighbour",
        net,
        net_capacity,
        host_failure_prob,
    )
    chosen: list[int] = []
    used = 0.0
    for v in sorted(cl.primary, key=lambda v: (-imp[graph.tasks[v]], v)):
        w = graph.weight[v]
        room = sum(1 for h in cl.hosts if h != cl.primary[v] and cl.spare[h] + _EPS >= w)
        if room >= level and used + level * w <= cl.limit + _EPS:
            chosen.append(v)
            used += level * w
    order = [v for _ in range(level) for v in chosen]
    placed, missed, _, _ = cl.place_colored(order, max_colors)
    return cl.plan(strategy, "sort-fill-direct", imp, placed, missed)
