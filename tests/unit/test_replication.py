"""Selective replication: every strategy through ``check_replication``, plus its theorems.

Asserted facts: replicas never lower availability; replicating every task makes
every query survive any single node failure; the knapsack is optimal (checked
against brute force); colored bin packing spreads replicas one per host when it can.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication import (
    STRATEGIES,
    _knapsack,
    availability,
    check_replication,
    importance,
    select_replicas,
)

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[TaskGraph, dict[str, str], dict[str, float], float]:
    n = draw(st.integers(1, 12))
    tasks = [f"t-{i}" for i in range(n)]
    edges = [(tasks[u], tasks[v]) for v in range(n) for u in range(v) if draw(st.booleans())]
    g = TaskGraph.build(
        tasks,
        edges,
        latency={t: 1.0 for t in tasks},
        weight={t: draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])) for t in tasks},
        priority={t: float(draw(st.integers(1, 5))) for t in tasks},
    )
    k = draw(st.integers(1, 4))
    nodes = [f"n{i}" for i in range(k)]
    assignment = {t: draw(st.sampled_from(nodes)) for t in tasks}
    spare = {h: draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0])) for h in nodes}
    budget = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 100.0]))
    return g, assignment, spare, budget


@SETTINGS
@given(clusters(), st.sampled_from(STRATEGIES), st.integers(0, 3))
def test_every_strategy_passes_the_validator(
    case: tuple[TaskGraph, dict[str, str], dict[str, float], float], strategy: str, seed: int
) -> None:
    g, assignment, spare, budget = case
    plan = select_replicas(g, assignment, spare, budget=budget, strategy=strategy, seed=seed)
    assert check_replication(g, assignment, spare, plan, budget=budget) == []
    assert plan.availability >= plan.baseline_availability - 1e-12
    assert all(0.0 <= v <= 1.0 for v in plan.importance.values())


@SETTINGS
@given(clusters())
def test_replicating_everything_survives_any_single_node(
    case: tuple[TaskGraph, dict[str, str], dict[str, float], float],
) -> None:
    g, assignment, _, _ = case
    spare = {"r1": 100.0, "r2": 100.0}
    plan = select_replicas(g, assignment, spare, budget=1000.0)
    assert set(plan.replicas) == set(g.tasks)
    assert plan.availability == 1.0


@SETTINGS
@given(
    st.lists(st.floats(0, 1), min_size=1, max_size=9),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5]), min_size=9, max_size=9),
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]),
)
def test_knapsack_is_optimal(values: list[float], weights: list[float], budget: float) -> None:
    weights = weights[: len(values)]
    got = _knapsack(values, weights, budget)
    assert sum(weights[i] for i in got) <= budget + 1e-9
    best = max(
        sum(values[i] for i in s)
        for r in range(len(values) + 1)
        for s in itertools.combinations(range(len(values)), r)
        if sum(weights[i] for i in s) <= budget + 1e-9
    )
    # values are scaled to integers in micro-units before solving
    assert sum(values[i] for i in got) >= best - len(values) * 1e-6


def test_importance_follows_the_seed() -> None:
    g = TaskGraph.build(
        ["s-0", "f-0", "q-0", "q-1"],
        [("s-0", "f-0"), ("f-0", "q-0"), ("s-0", "q-1")],
        latency={t: 1 for t in ["s-0", "f-0", "q-0", "q-1"]},
        weight={"s-0": 2.0, "f-0": 1.0, "q-0": 0.5, "q-1": 1.0},
    )
    qod = importance(g, "qod")
    assert qod == {"s-0": 1.0, "f-0": 0.5, "q-0": 0.5, "q-1": 0.5}
    lu = importance(g, "lu")
    assert lu == {"s-0": 0.0, "f-0": 0.5, "q-0": 0.75, "q-1": 0.5}
    both = importance(g, "qod-lu")
    assert both == {t: qod[t] * lu[t] for t in g.tasks}
    assert importance(g, "random", seed=1) == importance(g, "random", seed=1)
    assert importance(g, "random", seed=1) != importance(g, "random", seed=2)
    with pytest.raises(UnknownAlgorithm, match="qod-lu"):
        importance(g, "fancy")


def test_colored_bin_packing_spreads_replicas() -> None:
    tasks = [f"t-{i}" for i in range(4)]
    g = TaskGraph.build(tasks, [], latency={t: 1 for t in tasks})
    assignment = dict.fromkeys(tasks, "p")
    spare = {f"h{i}": 4.0 for i in range(4)}
    plan = select_replicas(g, assignment, spare, budget=4.0, strategy="qod")
    assert plan.colors == 1
    assert sorted(n for (n,) in plan.replicas.values()) == ["h0", "h1", "h2", "h3"]
    # plain first fit would have stacked all four on h0
    assert check_replication(g, assignment, spare, plan, budget=4.0) == []


def test_never_on_the_primary_node() -> None:
    g = TaskGraph.build(["a-0"], [], latency={"a-0": 1})
    plan = select_replicas(g, {"a-0": "n1"}, {"n1": 10.0}, budget=10.0)
    assert plan.replicas == {}
    bad = type(plan)("qod", {"a-0": ("n1",)}, {}, 1.0, (), None, 1.0, 0.0)
    assert any(
        "primary" in p for p in check_replication(g, {"a-0": "n1"}, {"n1": 10}, bad, budget=5)
    )


def test_validator_catches_overload_and_budget() -> None:
    g = TaskGraph.build(["a-0", "b-0"], [], latency={"a-0": 1, "b-0": 1})
    assignment = {"a-0": "n1", "b-0": "n1"}
    plan = select_replicas(g, assignment, {"n2": 2.0}, budget=2.0)
    assert set(plan.replicas) == {"a-0", "b-0"}
    assert any("spare" in p for p in check_replication(g, assignment, {"n2": 1.0}, plan, budget=2))
    assert any("budget" in p for p in check_replication(g, assignment, {"n2": 2.0}, plan, budget=1))


def test_availability_counts_priority() -> None:
    g = TaskGraph.build(
        ["s", "q1", "q2"],
        [("s", "q1"), ("s", "q2")],
        latency={"s": 1, "q1": 1, "q2": 1},
        priority={"q1": 1, "q2": 3},
    )
    assignment = {"s": "a", "q1": "a", "q2": "b"}
    # lose a: nothing survives; lose b: q1 survives (1 of 4)
    assert availability(g, assignment, {}) == pytest.approx(1 / 8)
    # with s and q1 copied to b: lose a, all survive (4); lose b, only q1 (1)
    assert availability(g, assignment, {"s": ("b",), "q1": ("b",)}) == pytest.approx(5 / 8)
