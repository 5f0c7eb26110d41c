"""Choosing which tasks get active replicas, and placing them.

Seed: Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex Event
Processing Systems*.

Why several algorithms: the seed sorts operators by an importance heuristic and
fills the spare resources in that order ("simple operator selection", Section
3.2.1), proposing QOD·LU as a cheap stand-in for a 0-1 knapsack
(Section 3.2.2); its baseline is a random selection. We also
solve that knapsack exactly. Both are here under their own names
(:data:`SELECTIONS`), share the placement step (first fit over hosts, the
seed's colour bound and network constraint, Section 3.3) and answer to
:func:`planners.replication.check_replication`; ``best`` runs them all and keeps
the plan the availability model rates highest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication.genetic import replicate_genetic
from planners.replication.model import STRATEGIES, ReplicationPlan, importance
from planners.replication.placement import _EPS, _Cluster, _knapsack
from planners.replication.query import replicate_direct_level, replicate_query_fill

__all__ = [
    "SELECTIONS",
    "ReplicationAlgorithm",
    "replicate_best",
    "replicate_knapsack",
    "replicate_sort_fill",
    "select_replicas",
]


class ReplicationAlgorithm(Protocol):
    """The one signature every selection algorithm shares."""

    def __call__(
        self,
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
    ) -> ReplicationPlan: ...


# --------------------------------------------------------------------------- algorithms


def replicate_sort_fill(
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
    """The seed's simple operator selection: sort by importance, fill the spare resources.

    Operators are sorted by decreasing importance (``strategy``; ``random``
    gives the seed's random selection, a uniformly random order; ties: the nearer
    to an output first, the seed leaves them open) and selected
    while the next one fits in what is left of ``load_rem`` (``budget``); with
    ``level > 1`` the pass repeats, raising each selected operator's
    replication level by one per pass (the seed's procedure 1, Section 3.2.1).
    The replicas are then placed, most important first, by colored bin packing
    with first fit over hosts in the seed's neighbouring-factor order.

    Parameters
    ----------
    graph, assignment:
        The task DAG and the primaries' placement (task id → node).
    spare:
        Spare CPU per node that replicas may use.
    budget:
        CPU the replicas may use (the seed's ``load_rem``; capped by ``Σ spare``).
    strategy:
        ``qod``, ``lu``, ``qod-lu`` (default) or ``random``.
    seed:
        Seed of ``random``.
    max_colors:
        The seed's colour bound ``C`` (replicas per host); default none.
    level:
        Largest replication level (replicas per task), ``>= 1``.
    host_order:
        ``neighbour`` (default, the seed's) or ``spare``.
    net, net_capacity:
        Network traffic of each task (``net_in + net_out``) and spare network of
        each node; a node missing from ``net_capacity`` has none. Default: no
        network constraint.
    host_failure_prob:
        If given, the plan reports the seed's crash availability for it.

    Returns
    -------
    ReplicationPlan
        ``selection`` is ``"sort-fill"``.

    Raises
    ------
    UnknownAlgorithm
        For an unknown strategy or host order.
    InvalidTopology
        If the assignment names an unknown task.
    ValueError
        If the budget, a spare capacity or ``level`` is out of range.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 1, "a": 1, "b": 2})
    >>> plan = replicate_sort_fill(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...     {"n1": 1.0, "n2": 2.0}, budget=2.0, strategy="qod", host_failure_prob=0.1)
    >>> plan.replicas, round(plan.crash_availability, 3), plan.baseline_crash_availability
    ({'s': ('n2',), 'a': ('n2',)}, 0.945, 0.855)

    By hand: without replicas query ``a`` needs ``n1`` (0.9) and ``b`` needs
    both nodes (0.81), mean 0.855; with the replicas ``a`` needs either node
    (0.99) and ``b`` needs ``n2`` (0.9), mean 0.945.

    Notes
    -----
    O(V·Q) for the importance, O(V log V) for the sort, O(m·n·log m) for
    placing ``m`` replicas on ``n`` hosts. Deviations from the seed: an
    operator that does not fit the remaining budget is skipped and the fill
    goes on with the next (the seed says only "until all spare resources are
    consumed", Section 3.2.1); an operator that fits on no node but its primary's is
    never selected; the selection is on the pooled budget, so a replica whose
    node-by-node placement fails is reported in ``unplaced``, not replaced.

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.2.1, 3.3.1 and 3.3.2.
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
    order = sorted(cl.primary, key=lambda v: (-imp[graph.tasks[v]], cl.tie(v)))
    chosen: list[int] = []
    used = 0.0
    for _ in range(level):
        for v in order:
            w = graph.weight[v]
            if cl.fits_somewhere(v) and used + w <= cl.limit + _EPS:
                chosen.append(v)
                used += w
    chosen.sort(key=lambda v: (-imp[graph.tasks[v]], cl.tie(v)))
    placed, missed, _, _ = cl.place_colored(chosen, max_colors)
    return cl.plan(strategy, "sort-fill", imp, placed, missed)


def _fill_levels(
    graph: TaskGraph,
    cl: _Cluster,
    rest: list[int],
    placed: dict[int, list[str]],
    rem: dict[str, float],
    net_left: dict[str, float],
    level: int,
) -> None:
    """Spend the budget left on more replicas of ``rest``, in order, level by level.

    Each replica goes to the fitting host with the most spare CPU left; ``placed``,
    ``rem`` and ``net_left`` are updated.
    """
    used = sum(graph.weight[v] * len(hs) for v, hs in placed.items())
    for lvl in range(1, level + 1):
        for v in rest:
            hs = placed.get(v, [])
            w, x = graph.weight[v], cl.traffic[v]
            if len(hs) >= lvl or used + w > cl.limit + _EPS:
                continue
            have = {cl.primary[v], *hs}
            fits = [
                h
                for h in cl.hosts
                if h not in have
                and rem[h] + _EPS >= w
                and (cl.netcap is None or net_left[h] + _EPS >= x)
            ]
            if fits:
                h = max(fits, key=lambda y: (rem[y], y))
                placed.setdefault(v, []).append(h)
                rem[h] -= w
                if cl.netcap is not None:
                    net_left[h] -= x
                used += w


def replicate_knapsack(
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
    """Backstop's selection: an exact 0-1 knapsack over importance, then fill what is left.

    The seed models selection as a 0-1 knapsack (value = importance, weight =
    load, capacity = ``load_rem``; Section 3.2.2) but suggests the
    QOD·LU sort as an approximation; here the knapsack is solved exactly
    (ortools). The replicas are placed by colored bin packing (hosts with the
    most spare CPU first by default); whatever budget is left is spent on
    further replicas by decreasing importance (ties: the nearer to an output
    first, so with one query and equal weights, where every task's value is 0, the
    sink comes first), level by level up to ``level``.

    Parameters
    ----------
    graph, assignment, spare, budget, strategy, seed, max_colors, level, net, net_capacity,
    host_failure_prob:
        As for :func:`replicate_sort_fill`.
    host_order:
        ``spare`` (default) or ``neighbour``.

    Returns
    -------
    ReplicationPlan
        ``selection`` is ``"knapsack"``.

    Raises
    ------
    UnknownAlgorithm
        For an unknown strategy or host order.
    InvalidTopology
        If the assignment names an unknown task.
    ValueError
        If the budget, a spare capacity or ``level`` is out of range.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 1, "a": 1, "b": 2})
    >>> plan = replicate_knapsack(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...                           {"n1": 1.0, "n2": 2.0}, budget=2.0, strategy="qod")
    >>> plan.replicas, plan.availability > plan.baseline_availability
    ({'s': ('n2',), 'a': ('n2',)}, True)

    Notes
    -----
    The knapsack is ortools' divide-and-conquer dynamic programme, exact in
    O(V·budget in millicores); placement as in :func:`replicate_sort_fill`.
    With ``random`` the values are random, which is *not* the seed's random
    selection (use ``sort-fill`` for that).

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.2.2 (knapsack) and 3.3.2 (colored bin
    packing, after Dawande et al.).
    """
    imp = importance(graph, strategy, seed=seed)
    cl = _Cluster(
        graph,
        assignment,
        spare,
        budget,
        level,
        host_order or "spare",
        net,
        net_capacity,
        host_failure_prob,
    )
    cands = [v for v in sorted(cl.primary) if cl.fits_somewhere(v)]
    values = [imp[graph.tasks[v]] for v in cands]
    weights = [graph.weight[v] for v in cands]
    chosen = [cands[i] for i in _knapsack(values, weights, cl.limit)]
    order = sorted(chosen, key=lambda v: (-imp[graph.tasks[v]], -graph.weight[v], cl.tie(v)))
    placed, missed, rem, net_left = cl.place_colored(order, max_colors)
    # spend what is left of the budget, most important first, level by level
    rest = sorted(
        (v for v in cands if v not in missed),
        key=lambda v: (-imp[graph.tasks[v]], graph.weight[v], cl.tie(v)),
    )
    _fill_levels(graph, cl, rest, placed, rem, net_left, level)
    return cl.plan(strategy, "knapsack", imp, placed, missed)


def replicate_best(
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
    """Every selection with every non-random heuristic; the plan the model rates highest.

    Candidates: ``knapsack`` and ``sort-fill`` with ``qod``, ``lu`` and
    ``qod-lu`` (``strategy`` first, so it wins ties). Rated by the crash
    availability for ``host_failure_prob`` when given (the seed's model), else
    by the single-node availability; ties keep the earlier candidate.

    Parameters
    ----------
    graph, assignment, spare, budget, strategy, seed, max_colors, level, host_order, net,
    net_capacity, host_failure_prob:
        As for :func:`replicate_sort_fill`.

    Returns
    -------
    ReplicationPlan
        The winner, its ``strategy`` and ``selection`` naming what produced it.

    Raises
    ------
    UnknownAlgorithm, InvalidTopology, ValueError
        As for :func:`replicate_sort_fill`.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 1, "a": 1, "b": 2})
    >>> plan = replicate_best(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...     {"n1": 1.0, "n2": 2.0}, budget=2.0, host_failure_prob=0.1)
    >>> plan.crash_availability >= replicate_sort_fill(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...     {"n1": 1.0, "n2": 2.0}, budget=2.0, host_failure_prob=0.1).crash_availability
    True

    Notes
    -----
    Six selections and their ratings: a constant factor over one.

    References
    ----------
    The seed's replication optimizer (Section 4) maximises
    ``A(plc)`` over placements within a cost limit; this searches its
    candidates among the seed's own heuristics.
    """
    names = [strategy] + [s for s in STRATEGIES if s not in (strategy, "random")]
    best: ReplicationPlan | None = None
    for name in names:
        for fn in (replicate_knapsack, replicate_sort_fill):
            plan = fn(
                graph,
                assignment,
                spare,
                budget=budget,
                strategy=name,
                seed=seed,
                max_colors=max_colors,
                level=level,
                host_order=host_order,
                net=net,
                net_capacity=net_capacity,
                host_failure_prob=host_failure_prob,
            )
            if best is None or _score(plan) > _score(best) + 1e-12:
                best = plan
    assert best is not None
    return best


def _score(plan: ReplicationPlan) -> float:
    if plan.crash_availability is not None:
        return plan.crash_availability
    return plan.availability


SELECTIONS: dict[str, ReplicationAlgorithm] = {
    "knapsack": replicate_knapsack,
    "sort-fill": replicate_sort_fill,
    "best": replicate_best,
    "query-fill": replicate_query_fill,
    "sort-fill-direct": replicate_direct_level,
    "genetic": replicate_genetic,
}
"""Every selection algorithm by name; ``knapsack`` is the default.

``query-fill`` (the seed's query-level importance, Section 3.1.3), ``sort-fill-direct``
(its procedure 2, Section 3.2.1) and ``genetic`` (its optimizer, Section 4) are the seed's
as written; the operator's choice stays ``knapsack`` or ``best``.
"""


def select_replicas(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    *,
    budget: float,
    strategy: str = "qod-lu",
    seed: int = 0,
    max_colors: int | None = None,
    selection: str = "knapsack",
    level: int = 1,
    host_order: str | None = None,
    net: Mapping[str, float] | None = None,
    net_capacity: Mapping[str, float] | None = None,
    host_failure_prob: float | None = None,
) -> ReplicationPlan:
    """Run the selection algorithm named ``selection`` (see :data:`SELECTIONS`).

    Raises
    ------
    UnknownAlgorithm
        If ``selection`` is not registered; the message lists the names.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 1, "a": 1, "b": 2})
    >>> plan = select_replicas(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...                        {"n1": 1.0, "n2": 2.0}, budget=2.0, strategy="qod")
    >>> plan.replicas, plan.selection
    ({'s': ('n2',), 'a': ('n2',)}, 'knapsack')
    """
    try:
        fn = SELECTIONS[selection]
    except KeyError:
        names = ", ".join(SELECTIONS)
        raise UnknownAlgorithm(
            f"unknown replica selection {selection!r}; choose one of: {names}"
        ) from None
    return fn(
        graph,
        assignment,
        spare,
        budget=budget,
        strategy=strategy,
        seed=seed,
        max_colors=max_colors,
        level=level,
        host_order=host_order,
        net=net,
        net_capacity=net_capacity,
        host_failure_prob=host_failure_prob,
    )
