"""Replication plans, the seed's importance heuristics, availability, and the validator.

Every selection algorithm (``planners.replication.select``) returns a
:class:`ReplicationPlan` and answers to :func:`check_replication`, so the seed's
sort-and-fill heuristics, its random selection and our knapsack are compared on equal
terms. Two availability figures are kept: the single-node model (:func:`availability`,
one node lost, uniform) and the seed's own model, every host crashing independently with
probability ``p`` (:func:`planners.replication.crash.crash_availability`).

Placement always respects two rules: a replica is never on its primary's node,
and no two copies of a task share a node. :func:`check_replication` verifies
both, plus per-node spare capacity, network capacity and the budget.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication.crash import crash_availability

__all__ = [
    "STRATEGIES",
    "ReplicationPlan",
    "availability",
    "check_replication",
    "importance",
]

STRATEGIES = ("qod", "lu", "qod-lu", "random")
"""Importance heuristics by name; ``qod-lu`` is the default (the seed's best)."""

_EPS = 1e-9


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
        Tasks selected for a replica that no node could host (spare CPU or
        network too small, or only nodes with a copy left).
    colors:
        The most replicas on one node (the ``c`` of colored bin packing, where
        each replicated task is one colour); ``None`` without replicas.
    availability:
        Expected priority-weighted fraction of queries that survive one node
        failure without waiting for recovery, the node uniform over the cluster.
    baseline_availability:
        The same without any replica.
    selection:
        The selection algorithm (a key of ``SELECTIONS``).
    level:
        The largest replication level allowed (replicas per task).
    host_failure_prob:
        The host crash probability ``p`` the crash figures use, if given.
    crash_availability:
        Expected priority-weighted share of queries still running when every
        host crashes independently with probability ``p`` (the seed's model).
    baseline_crash_availability:
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
    selection: str = "knapsack"
    level: int = 1
    host_failure_prob: float | None = None
    crash_availability: float | None = None
    baseline_crash_availability: float | None = None


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
    Event Processing Systems*, Sections 3.1 and 3.2.2.
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


def check_replication(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    plan: ReplicationPlan,
    *,
    budget: float,
    net: Mapping[str, float] | None = None,
    net_capacity: Mapping[str, float] | None = None,
) -> list[str]:
    """Every way ``plan`` breaks the replication invariants (empty if valid).

    Checks: replicated tasks exist and have a primary; no replica on its
    primary's node; no two copies of a task on one node; at most ``plan.level``
    replicas of a task; only nodes of ``spare``, never past a node's spare CPU
    (nor, given ``net`` and ``net_capacity``, its spare network); total CPU
    within the budget and equal to ``plan.cpu``; the availability figures
    recomputed (the crash figures with the plan's ``host_failure_prob``).

    Examples
    --------
    >>> g = TaskGraph.build(["s", "q"], [("s", "q")], latency={"s": 1, "q": 1})
    >>> bad = ReplicationPlan("qod", {"s": ("a", "a")}, {}, 2.0, (), None, 0.0, 0.0)
    >>> check_replication(g, {"s": "a", "q": "b"}, {"a": 1.0}, bad, budget=1.0)[:2]
    ['replica of s on its primary node a', 'two copies of s on node a']
    """
    problems: list[str] = []
    load: dict[str, float] = {}
    traffic: dict[str, float] = {}
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
        if len(nodes) > plan.level:
            problems.append(f"{t} has {len(nodes)} replicas, over the level {plan.level}")
        for n in nodes:
            if n not in spare:
                problems.append(f"replica of {t} on node {n}, which has no spare CPU")
            load[n] = load.get(n, 0.0) + w
            if net is not None:
                traffic[n] = traffic.get(n, 0.0) + float(net.get(t, 0.0))
            total += w
    for n, used in sorted(load.items()):
        if n in spare and used > spare[n] + 1e-6:
            problems.append(f"node {n}: replicas use {used:g} of {spare[n]:g} spare cores")
    if net_capacity is not None:
        for n, used in sorted(traffic.items()):
            if used > net_capacity.get(n, 0.0) + 1e-6:
                problems.append(
                    f"node {n}: replicas use {used:g} of {net_capacity.get(n, 0.0):g} spare network"
                )
    if total > budget + 1e-6:
        problems.append(f"replicas use {total:g} cores, over the budget {budget:g}")
    if abs(total - plan.cpu) > 1e-6:
        problems.append(f"cpu {plan.cpu:g} != {total:g}")
    if set(plan.unplaced) & set(plan.replicas):
        problems.append("a task is both replicated and unplaced")
    if problems:
        return problems
    return _figure_problems(graph, assignment, spare, plan)


def _figure_problems(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    plan: ReplicationPlan,
) -> list[str]:
    """The availability figures of ``plan`` that differ from their recomputed values."""
    problems: list[str] = []
    pool = frozenset(assignment.values()) | frozenset(spare)
    want = availability(graph, assignment, plan.replicas, pool)
    if abs(want - plan.availability) > 1e-9:
        problems.append(f"availability {plan.availability} != {want}")
    base = availability(graph, assignment, {}, pool)
    if abs(base - plan.baseline_availability) > 1e-9:
        problems.append(f"baseline_availability {plan.baseline_availability} != {base}")
    p = plan.host_failure_prob
    if p is not None:
        crash = crash_availability(graph, assignment, plan.replicas, p)
        if plan.crash_availability is None or abs(crash - plan.crash_availability) > 1e-9:
            problems.append(f"crash_availability {plan.crash_availability} != {crash}")
        base_crash = crash_availability(graph, assignment, {}, p)
        got = plan.baseline_crash_availability
        if got is None or abs(base_crash - got) > 1e-9:
            problems.append(f"baseline_crash_availability {got} != {base_crash}")
    return problems
