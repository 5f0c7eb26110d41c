"""Selective active replication on spare CPU (seed ``adaptive-selective-replication.txt``).

Why this module exists: upstream backups bound how long recovery takes, but a
query still goes dark while its failed tasks restart. An active replica of a
task takes over at once, so where the cluster has spare CPU we can spend it on
replicas, and the question is which tasks are worth it. The seed rates tasks by
an importance heuristic: QOD (how many queries depend on the task), LU (how
cheap it is), their product QOD·LU, or at random as its baseline. It then
selects tasks with a 0-1 knapsack over the spare-CPU budget and places the
replicas by colored bin packing, so that few replicas share a host and one host
failure takes few of them down.

Placement always respects two rules: a replica is never on its primary's node,
and no two copies of a task share a node. :func:`check_replication` verifies
both, plus per-node spare capacity and the budget, for every strategy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph

__all__ = [
    "STRATEGIES",
    "ReplicationPlan",
    "availability",
    "check_replication",
    "importance",
    "select_replicas",
]

STRATEGIES = ("qod", "lu", "qod-lu", "random")
"""Importance heuristics by name; ``qod-lu`` is the default (the seed's best)."""

_EPS = 1e-9
_SCALE = 1000  # millicores for the knapsack


@dataclass(frozen=True)
class ReplicationPlan:
    """Which tasks get an active replica, and where.

    Attributes
    ----------
    strategy:
        The importance heuristic used.
    replicas:
        ``{task id: (node, …)}`` for every replicated task.
    importance:
        Normalised importance in ``[0, 1]`` of every task.
    cpu:
        Total CPU of the replicas.
    unplaced:
        Tasks the knapsack selected that no node could host (spare too small or
        only the primary's node left).
    colors:
        The most replicas on one node (the ``c`` of colored bin packing, where
        each replicated task is one colour); ``None`` without replicas.
    availability:
        Expected priority-weighted fraction of queries that survive one node
        failure without waiting for recovery, the node uniform over the cluster.
    baseline_availability:
        The same without any replica.
    """

    strategy: str
    replicas: dict[str, tuple[str, ...]]
    importance: dict[str, float]
    cpu: float
    unplaced: tuple[str, ...]
    colors: int | None
    availability: float
    baseline_availability: float


def importance(graph: TaskGraph, strategy: str = "qod-lu", *, seed: int = 0) -> dict[str, float]:
    """The seed's normalised operator importance of every task.

    Parameters
    ----------
    graph:
        The task DAG; queries are its output tasks.
    strategy:
        ``qod``: ``deg(t) / |Q|``, the share of queries whose upstream closure
        holds ``t``. ``lu``: ``1 − w_t / max w``, cheap tasks first.
        ``qod-lu``: their product. ``random``: uniform in ``[0, 1)``, seeded.
    seed:
        Seed of the ``random`` strategy.

    Returns
    -------
    dict
        ``{task id: importance in [0, 1]}``.

    Raises
    ------
    UnknownAlgorithm
        For an unknown strategy.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 2, "a": 1, "b": 1})
    >>> importance(g, "qod")
    {'s': 1.0, 'a': 0.5, 'b': 0.5}
    >>> importance(g, "qod-lu")
    {'s': 0.0, 'a': 0.25, 'b': 0.25}

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.1 and 3.2.2; seed
    ``adaptive-selective-replication.txt``.
    """
    if strategy not in STRATEGIES:
        raise UnknownAlgorithm(
            f"unknown replication strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}"
        )
    n = len(graph)
    if strategy == "random":
        rng = random.Random(seed)
        return {t: rng.random() for t in graph.tasks}
    deg = [0] * n
    for q in graph.outputs:
        for v in graph.upstream_closure[q]:
            deg[v] += 1
    nq = max(1, len(graph.outputs))
    qod = [d / nq for d in deg]
    top = max(graph.weight, default=0.0)
    lu = [1.0 - w / top if top > 0 else 1.0 for w in graph.weight]
    if strategy == "qod":
        vals = qod
    elif strategy == "lu":
        vals = lu
    else:
        vals = [a * b for a, b in zip(qod, lu, strict=True)]
    return dict(zip(graph.tasks, vals, strict=True))


def availability(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    replicas: Mapping[str, tuple[str, ...]],
    nodes: frozenset[str] | None = None,
) -> float:
    """Expected priority-weighted share of queries alive after one node fails.

    A query survives the loss of node ``n`` iff every task of its upstream
    closure still has a copy (primary or replica) off ``n``. The failed node
    is uniform over ``nodes`` (default: every node of the assignment and of the
    replicas).

    Examples
    --------
    >>> g = TaskGraph.build(["s", "q"], [("s", "q")], latency={"s": 1, "q": 1})
    >>> availability(g, {"s": "a", "q": "b"}, {})
    0.0
    >>> availability(g, {"s": "a", "q": "b"}, {"s": ("b",)})
    0.5
    """
    where: dict[int, set[str]] = {}
    for t, n in assignment.items():
        where.setdefault(graph.index(t), set()).add(n)
    for t, ns in replicas.items():
        where.setdefault(graph.index(t), set()).update(ns)
    pool = nodes if nodes is not None else frozenset(n for ns in where.values() for n in ns)
    outs = sorted(graph.outputs)
    total = sum(graph.priority[q] for q in outs)
    if not pool or total <= 0:
        return 1.0
    alive = 0.0
    for n in sorted(pool):  # a set of names: never iterate it in hash order
        for q in outs:
            if all(where.get(v, set()) - {n} for v in graph.upstream_closure[q]):
                alive += graph.priority[q]
    return alive / (total * len(pool))


def _knapsack(values: list[float], weights: list[float], budget: float) -> list[int]:
    """Indices of a 0-1 knapsack optimum (ortools' branch and bound, integer-scaled)."""
    from ortools.algorithms.python import knapsack_solver

    free = [i for i, w in enumerate(weights) if w <= _EPS and values[i] > 0]
    items = [i for i, w in enumerate(weights) if w > _EPS and values[i] > 0]
    cap = math.floor(budget * _SCALE + 1e-6)
    if not items or cap <= 0:
        return free
    solver = knapsack_solver.KnapsackSolver(
        knapsack_solver.SolverType.KNAPSACK_MULTIDIMENSION_BRANCH_AND_BOUND_SOLVER, "replicas"
    )
    solver.init(
        [round(values[i] * 1_000_000) for i in items],
        [[math.ceil(weights[i] * _SCALE - 1e-6) for i in items]],
        [cap],
    )
    solver.solve()
    return free + [i for k, i in enumerate(items) if solver.best_solution_contains(k)]


def _first_fit(
    order: list[int],
    graph: TaskGraph,
    primary: Mapping[int, str],
    hosts: list[str],
    spare: Mapping[str, float],
    limit: int | None,
) -> tuple[dict[int, str], list[int]]:
    """First fit with the replica rules and at most ``limit`` replicas (colours) per host."""
    rem = {h: float(spare[h]) for h in hosts}
    count = dict.fromkeys(hosts, 0)
    placed: dict[int, str] = {}
    missed: list[int] = []
    for v in order:
        w = graph.weight[v]
        for h in hosts:
            if h == primary[v] or rem[h] + _EPS < w:
                continue
            if limit is not None and count[h] >= limit:
                continue
            placed[v] = h
            rem[h] -= w
            count[h] += 1
            break
        else:
            missed.append(v)
    return placed, missed


def select_replicas(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    *,
    budget: float,
    strategy: str = "qod-lu",
    seed: int = 0,
    max_colors: int | None = None,
) -> ReplicationPlan:
    """Choose tasks to replicate actively and place one replica of each.

    Parameters
    ----------
    graph:
        The task DAG.
    assignment:
        The primaries' placement, task id → node.
    spare:
        Spare CPU per node that replicas may use.
    budget:
        Total CPU the replicas may use (capped by ``Σ spare``).
    strategy:
        Importance heuristic: ``qod``, ``lu``, ``qod-lu`` (default) or ``random``.
    seed:
        Seed of the ``random`` strategy.
    max_colors:
        The seed's upper bound ``C`` on replicas per host for colored bin
        packing; default no bound. Past it, plain first fit is used.

    Returns
    -------
    ReplicationPlan

    Raises
    ------
    UnknownAlgorithm
        For an unknown strategy.
    InvalidTopology
        If the assignment names an unknown task.
    ValueError
        If the budget or a spare capacity is negative.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...     latency={"s": 1, "a": 1, "b": 1}, weight={"s": 1, "a": 1, "b": 2})
    >>> plan = select_replicas(g, {"s": "n1", "a": "n1", "b": "n2"},
    ...                        {"n1": 1.0, "n2": 2.0}, budget=2.0, strategy="qod")
    >>> plan.replicas, plan.availability > plan.baseline_availability
    ({'s': ('n2',), 'a': ('n2',)}, True)

    Notes
    -----
    Importance is O(V·Q); the knapsack is branch and bound (exponential in the
    worst case, fast in practice for hundreds of tasks); colored bin packing
    tries colour bounds ``c = ⌈m / hosts⌉ …`` with O(m·n) first fit each, for
    ``m`` replicas and ``n`` hosts. Whatever budget is left after placement is
    spent on further tasks in decreasing importance (the seed's "simple
    selection"), including tasks of zero importance such as the heaviest one
    under LU. One replica per task (the seed's evaluation setting).

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Sections 3.2 (knapsack) and 3.3.2 (colored bin
    packing, after Dawande et al.); seed ``adaptive-selective-replication.txt``.
    """
    imp = importance(graph, strategy, seed=seed)
    if budget < 0:
        raise ValueError(f"replication budget {budget} must be >= 0")
    for n, c in spare.items():
        if not c >= 0:
            raise ValueError(f"node {n!r} has invalid spare CPU {c}")
    primary = {graph.index(t): n for t, n in assignment.items()}
    hosts = sorted(spare, key=lambda h: (-spare[h], h))
    limit = min(float(budget), sum(spare.values()))
    cands = [  # tasks that fit on some node other than their primary's
        v
        for v in sorted(primary)
        if any(h != primary[v] and spare[h] + _EPS >= graph.weight[v] for h in hosts)
    ]
    values = [imp[graph.tasks[v]] for v in cands]
    weights = [graph.weight[v] for v in cands]
    chosen = [cands[i] for i in _knapsack(values, weights, limit)]
    order = sorted(chosen, key=lambda v: (-imp[graph.tasks[v]], -graph.weight[v], v))
    placed: dict[int, str] = {}
    missed: list[int] = list(order)
    if order and hosts:
        lower = max(1, math.ceil(len(order) / len(hosts)))
        upper = len(order) if max_colors is None else min(max_colors, len(order))
        for c in range(lower, upper + 1):
            placed, missed = _first_fit(order, graph, primary, hosts, spare, c)
            if not missed:
                break
        if missed:
            placed, missed = _first_fit(order, graph, primary, hosts, spare, None)
    # spend what is left of the budget on further tasks, most important first
    used = sum(graph.weight[v] for v in placed)
    rem = {h: spare[h] - sum(graph.weight[v] for v, p in placed.items() if p == h) for h in hosts}
    rest = sorted(
        (v for v in cands if v not in placed and v not in missed),
        key=lambda v: (-imp[graph.tasks[v]], graph.weight[v], v),
    )
    for v in rest:
        w = graph.weight[v]
        if used + w > limit + _EPS:
            continue
        fits = [h for h in hosts if h != primary[v] and rem[h] + _EPS >= w]
        if fits:
            h = max(fits, key=lambda x: (rem[x], x))
            placed[v] = h
            rem[h] -= w
            used += w
    per_host: dict[str, int] = {}
    for h in placed.values():
        per_host[h] = per_host.get(h, 0) + 1
    colors = max(per_host.values(), default=None)
    replicas: dict[str, tuple[str, ...]] = {graph.tasks[v]: (placed[v],) for v in sorted(placed)}
    pool = frozenset(assignment.values()) | frozenset(spare)
    return ReplicationPlan(
        strategy=strategy,
        replicas=replicas,
        importance=imp,
        cpu=sum(graph.weight[v] for v in placed),
        unplaced=tuple(graph.tasks[v] for v in sorted(missed)),
        colors=colors,
        availability=availability(graph, assignment, replicas, pool),
        baseline_availability=availability(graph, assignment, {}, pool),
    )


def check_replication(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    plan: ReplicationPlan,
    *,
    budget: float,
) -> list[str]:
    """Every way ``plan`` breaks the replication invariants (empty if valid).

    Checks: replicated tasks exist and have a primary; no replica on its
    primary's node; no two copies of a task on one node; only nodes of
    ``spare``, never past a node's spare CPU; total CPU within the budget and
    equal to ``plan.cpu``; the availability figures recomputed.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "q"], [("s", "q")], latency={"s": 1, "q": 1})
    >>> bad = ReplicationPlan("qod", {"s": ("a", "a")}, {}, 2.0, (), None, 0.0, 0.0)
    >>> check_replication(g, {"s": "a", "q": "b"}, {"a": 1.0}, bad, budget=1.0)[:2]
    ['replica of s on its primary node a', 'two copies of s on node a']
    """
    problems: list[str] = []
    load: dict[str, float] = {}
    total = 0.0
    for t, nodes in plan.replicas.items():
        if t not in graph.tasks:
            problems.append(f"replicated task {t!r} is unknown")
            continue
        if t not in assignment:
            problems.append(f"replicated task {t} has no primary in the assignment")
        w = graph.weight[graph.index(t)]
        if assignment.get(t) in nodes:
            problems.append(f"replica of {t} on its primary node {assignment.get(t)}")
        for n in sorted({n for n in nodes if list(nodes).count(n) > 1}):
            problems.append(f"two copies of {t} on node {n}")
        for n in nodes:
            if n not in spare:
                problems.append(f"replica of {t} on node {n}, which has no spare CPU")
            load[n] = load.get(n, 0.0) + w
            total += w
    for n, used in sorted(load.items()):
        if n in spare and used > spare[n] + 1e-6:
            problems.append(f"node {n}: replicas use {used:g} of {spare[n]:g} spare cores")
    if total > budget + 1e-6:
        problems.append(f"replicas use {total:g} cores, over the budget {budget:g}")
    if abs(total - plan.cpu) > 1e-6:
        problems.append(f"cpu {plan.cpu:g} != {total:g}")
    if set(plan.unplaced) & set(plan.replicas):
        problems.append("a task is both replicated and unplaced")
    pool = frozenset(assignment.values()) | frozenset(spare)
    if problems:
        return problems
    want = availability(graph, assignment, plan.replicas, pool)
    if abs(want - plan.availability) > 1e-9:
        problems.append(f"availability {plan.availability} != {want}")
    base = availability(graph, assignment, {}, pool)
    if abs(base - plan.baseline_availability) > 1e-9:
        problems.append(f"baseline_availability {plan.baseline_availability} != {base}")
    return problems
