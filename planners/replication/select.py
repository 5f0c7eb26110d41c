"""Choosing which tasks get active replicas, and placing them.

Seed: ``adaptive-selective-replication.txt``.

Why several algorithms: the seed sorts operators by an importance heuristic and
fills the spare resources in that order ("simple operator selection", Section
3.2.1, line 136), proposing QOD·LU as a cheap stand-in for a 0-1 knapsack
(Section 3.2.2, lines 146–152); its baseline is a random selection. We also
solve that knapsack exactly. Both are here under their own names
(:data:`SELECTIONS`), share the placement step (first fit over hosts, the
seed's colour bound and network constraint, lines 160–170) and answer to
:func:`planners.replication.check_replication`; ``best`` runs them all and keeps
the plan the availability model rates highest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication.crash import crash_availability
from planners.replication.model import STRATEGIES, ReplicationPlan, availability, importance

__all__ = [
    "HOST_ORDERS",
    "SELECTIONS",
    "ReplicationAlgorithm",
    "replicate_best",
    "replicate_knapsack",
    "replicate_sort_fill",
    "select_replicas",
]

HOST_ORDERS = ("spare", "neighbour")
"""Host orders for first fit: most spare CPU first, or the seed's neighbouring factor."""

_EPS = 1e-9
_SCALE = 1000  # millicores for the knapsack


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


# --------------------------------------------------------------------------- shared steps


class _Cluster:
    """Validated inputs and the running state of one placement attempt."""

    def __init__(
        self,
        graph: TaskGraph,
        assignment: Mapping[str, str],
        spare: Mapping[str, float],
        budget: float,
        level: int,
        host_order: str,
        net: Mapping[str, float] | None,
        net_capacity: Mapping[str, float] | None,
        host_failure_prob: float | None,
    ):
        if budget < 0:
            raise ValueError(f"replication budget {budget} must be >= 0")
        if level < 1:
            raise ValueError(f"replication level {level} must be >= 1")
        if host_order not in HOST_ORDERS:
            raise UnknownAlgorithm(
                f"unknown host order {host_order!r}; choose one of: {', '.join(HOST_ORDERS)}"
            )
        if host_failure_prob is not None and not 0 <= host_failure_prob <= 1:
            raise ValueError(f"host failure probability {host_failure_prob} must be in [0, 1]")
        for n, c in spare.items():
            if not c >= 0:
                raise ValueError(f"node {n!r} has invalid spare CPU {c}")
        for n, c in (net_capacity or {}).items():
            if not c >= 0:
                raise ValueError(f"node {n!r} has invalid spare network {c}")
        self.graph = graph
        self.assignment = assignment
        self.spare = spare
        self.level = level
        self.host_order = host_order
        self.primary = {graph.index(t): n for t, n in assignment.items()}
        self.hosts = sorted(spare, key=lambda h: (-spare[h], h))
        self.limit = min(float(budget), sum(spare.values()))
        self.traffic = [float((net or {}).get(t, 0.0)) for t in graph.tasks]
        self.netcap = (
            None if net_capacity is None else {h: float(net_capacity.get(h, 0.0)) for h in spare}
        )
        self.p = host_failure_prob

    def fits_somewhere(self, v: int) -> bool:
        w = self.graph.weight[v]
        return any(h != self.primary[v] and self.spare[h] + _EPS >= w for h in self.hosts)

    def host_order_for(self, v: int) -> list[str]:
        """First-fit order for a replica of ``v``.

        ``neighbour``: hosts running more of ``v``'s predecessors and successors
        first (the seed's neighbouring factor, line 160), ties by spare CPU.
        """
        if self.host_order == "spare":
            return self.hosts
        g = self.graph
        near: dict[str, int] = {}
        for u in (*g.preds[v], *g.succs[v]):
            h = self.primary.get(u)
            if h is not None:
                near[h] = near.get(h, 0) + 1
        rank = {h: i for i, h in enumerate(self.hosts)}
        return sorted(self.hosts, key=lambda h: (-near.get(h, 0), rank[h]))

    def place(
        self, order: list[int], colors: int | None
    ) -> tuple[dict[int, list[str]], list[int], dict[str, float], dict[str, float]]:
        """First fit of one replica per entry of ``order`` (a task may repeat, once per level).

        Constraints: spare CPU, spare network, never a host already holding a
        copy of the task, at most ``colors`` replicas per host.
        """
        g = self.graph
        rem = {h: float(self.spare[h]) for h in self.hosts}
        net = dict(self.netcap) if self.netcap is not None else None
        count = dict.fromkeys(self.hosts, 0)
        placed: dict[int, list[str]] = {}
        missed: list[int] = []
        for v in order:
            w, x = g.weight[v], self.traffic[v]
            have = {self.primary[v], *placed.get(v, ())}
            for h in self.host_order_for(v):
                if h in have or rem[h] + _EPS < w:
                    continue
                if net is not None and net[h] + _EPS < x:
                    continue
                if colors is not None and count[h] >= colors:
                    continue
                placed.setdefault(v, []).append(h)
                rem[h] -= w
                if net is not None:
                    net[h] -= x
                count[h] += 1
                break
            else:
                missed.append(v)
        return placed, missed, rem, net or {}

    def place_colored(
        self, order: list[int], max_colors: int | None
    ) -> tuple[dict[int, list[str]], list[int], dict[str, float], dict[str, float]]:
        """Colored bin packing: the smallest colour bound that places everything, else plain.

        Bounds tried: ``⌈m / hosts⌉`` and then doubling up to ``max_colors``
        (the seed's ``C``), so O(m·n·log m); past it, plain first fit (line 170).
        """
        if not order or not self.hosts:
            return self.place(order, None)
        c = max(1, math.ceil(len(order) / len(self.hosts)))
        upper = len(order) if max_colors is None else min(max_colors, len(order))
        while c <= upper:
            got = self.place(order, c)
            if not got[1]:
                return got
            c = upper + 1 if c == upper else min(upper, 2 * c)
        return self.place(order, None)

    def plan(
        self,
        strategy: str,
        selection: str,
        imp: dict[str, float],
        placed: Mapping[int, list[str]],
        missed: list[int],
    ) -> ReplicationPlan:
        g = self.graph
        per_host: dict[str, int] = {}
        for hs in placed.values():
            for h in hs:
                per_host[h] = per_host.get(h, 0) + 1
        replicas = {g.tasks[v]: tuple(placed[v]) for v in sorted(placed) if placed[v]}
        pool = frozenset(self.assignment.values()) | frozenset(self.spare)
        crash = base_crash = None
        if self.p is not None:
            crash = crash_availability(g, self.assignment, replicas, self.p)
            base_crash = crash_availability(g, self.assignment, {}, self.p)
        return ReplicationPlan(
            strategy=strategy,
            replicas=replicas,
            importance=imp,
            cpu=sum(g.weight[v] * len(hs) for v, hs in placed.items()),
            unplaced=tuple(g.tasks[v] for v in sorted(set(missed) - set(placed))),
            colors=max(per_host.values(), default=None),
            availability=availability(g, self.assignment, replicas, pool),
            baseline_availability=availability(g, self.assignment, {}, pool),
            selection=selection,
            level=self.level,
            host_failure_prob=self.p,
            crash_availability=crash,
            baseline_crash_availability=base_crash,
        )


def _knapsack(values: list[float], weights: list[float], budget: float) -> list[int]:
    """Indices of a 0-1 knapsack optimum (ortools, integer-scaled)."""
    from ortools.algorithms.python import knapsack_solver

    free = [i for i, w in enumerate(weights) if w <= _EPS and values[i] > 0]
    items = [i for i, w in enumerate(weights) if w > _EPS and values[i] > 0]
    cap = math.floor(budget * _SCALE + 1e-6)
    if not items or cap <= 0:
        return free
    # exact dynamic programme, divide and conquer: 0.16 s for 1000 items and a 50-core
    # budget, where branch and bound took 200 s (bench/bench_replication.py's workload)
    kind = knapsack_solver.SolverType.KNAPSACK_DIVIDE_AND_CONQUER_SOLVER
    solver = knapsack_solver.KnapsackSolver(kind, "replicas")
    solver.init(
        [round(values[i] * 1_000_000) for i in items],
        [[math.ceil(weights[i] * _SCALE - 1e-6) for i in items]],
        [cap],
    )
    solver.solve()
    return free + [i for k, i in enumerate(items) if solver.best_solution_contains(k)]


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
    gives the seed's random selection, a uniformly random order) and selected
    while the next one fits in what is left of ``load_rem`` (``budget``); with
    ``level > 1`` the pass repeats, raising each selected operator's
    replication level by one per pass (the seed's procedure 1, line 138).
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
    consumed", line 136); an operator that fits on no node but its primary's is
    never selected; the selection is on the pooled budget, so a replica whose
    node-by-node placement fails is reported in ``unplaced``, not replaced.

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.2.1, 3.3.1 and 3.3.2; seed
    ``adaptive-selective-replication.txt``, lines 136–138 and 158–170.
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
    order = sorted(cl.primary, key=lambda v: (-imp[graph.tasks[v]], v))
    chosen: list[int] = []
    used = 0.0
    for _ in range(level):
        for v in order:
            w = graph.weight[v]
            if cl.fits_somewhere(v) and used + w <= cl.limit + _EPS:
                chosen.append(v)
                used += w
    chosen.sort(key=lambda v: (-imp[graph.tasks[v]], v))
    placed, missed, _, _ = cl.place_colored(chosen, max_colors)
    return cl.plan(strategy, "sort-fill", imp, placed, missed)


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
    load, capacity = ``load_rem``; Section 3.2.2, line 146) but suggests the
    QOD·LU sort as an approximation; here the knapsack is solved exactly
    (ortools). The replicas are placed by colored bin packing (hosts with the
    most spare CPU first by default); whatever budget is left is spent on
    further replicas by decreasing importance, level by level up to ``level``.

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
    packing, after Dawande et al.); seed ``adaptive-selective-replication.txt``.
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
    order = sorted(chosen, key=lambda v: (-imp[graph.tasks[v]], -graph.weight[v], v))
    placed, missed, rem, net_left = cl.place_colored(order, max_colors)
    # spend what is left of the budget, most important first, level by level
    used = sum(graph.weight[v] * len(hs) for v, hs in placed.items())
    rest = sorted(
        (v for v in cands if v not in missed),
        key=lambda v: (-imp[graph.tasks[v]], graph.weight[v], v),
    )
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
    The seed's replication optimizer (Section 4, lines 199–205) maximises
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
}
"""Every selection algorithm by name; ``knapsack`` is the default."""


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
