"""The selective-replication seed as written: its crash model and its sort-and-fill selection.

Asserted facts: the crash model's three evaluation paths (inclusion–exclusion,
enumerating crash states, seeded Monte Carlo) agree with a brute force over
every host's fate; a replica never lowers it; every selection passes the
validator with levels, host orders and network limits; the primaries stay
placed (``planners.evaluate.check_plan``); and the seed's Fig. 4 ordering on a
small workload of the benchmark's generator.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop_testkit.cases.replication import spare_for, spread, workload
from backstop_testkit.support.strategies import task_dags
from planners.errors import UnknownAlgorithm
from planners.evaluate import check_plan
from planners.graph import TaskGraph
from planners.replication import (
    HOST_ORDERS,
    SELECTIONS,
    STRATEGIES,
    check_replication,
    crash_availability,
    query_survival,
    replicate_sort_fill,
    select_replicas,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def brute_survival(copies: list[frozenset[str]], p: float) -> float:
    """Σ over every crash pattern of the involved hosts where each operator keeps a copy."""
    hosts = sorted({h for s in copies for h in s})
    total = 0.0
    for fate in itertools.product([False, True], repeat=len(hosts)):
        down = {h for h, d in zip(hosts, fate, strict=True) if d}
        if all(s - down for s in copies):
            k = len(down)
            total += p**k * (1 - p) ** (len(hosts) - k)
    return total


copy_sets = st.lists(
    st.frozensets(st.sampled_from("abcdefg"), min_size=1, max_size=3), min_size=1, max_size=6
)


@SETTINGS
@given(copy_sets, st.sampled_from([0.0, 0.02, 0.3, 0.5, 1.0]))
def test_every_exact_path_equals_brute_force(copies: list[frozenset[str]], p: float) -> None:
    want = brute_survival(copies, p)
    by_sets = query_survival(copies, p)
    by_hosts = query_survival(copies, p, exact_sets=0)
    assert by_sets == pytest.approx(want, abs=1e-12)
    assert by_hosts == pytest.approx(want, abs=1e-12)


def test_monte_carlo_is_seeded_and_close() -> None:
    copies = [frozenset({f"h{i}", f"h{i + 1}"}) for i in range(0, 24, 2)]
    copies += [frozenset({f"h{i}", f"h{i + 3}"}) for i in range(0, 20, 2)]
    want = query_survival(copies, 0.3)  # inclusion–exclusion is out (22 sets): host enumeration
    mc = query_survival(copies, 0.3, exact_sets=0, exact_hosts=0, samples=20_000, seed=7)
    assert mc == query_survival(copies, 0.3, exact_sets=0, exact_hosts=0, samples=20_000, seed=7)
    assert mc == pytest.approx(want, abs=0.02)


def test_crash_availability_by_hand() -> None:
    # s feeds q1, q2; q1 has priority 1, q2 priority 3; s and q1 on a, q2 on b
    g = TaskGraph.build(
        ["s", "q1", "q2"],
        [("s", "q1"), ("s", "q2")],
        latency={"s": 1, "q1": 1, "q2": 1},
        priority={"q1": 1, "q2": 3},
    )
    a = {"s": "a", "q1": "a", "q2": "b"}
    p = 0.1
    # q1 needs a (0.9); q2 needs a and b (0.81)
    assert crash_availability(g, a, {}, p) == pytest.approx((0.9 + 3 * 0.81) / 4)
    # s also on c: q2 needs b and (a or c) = 0.9 * 0.99
    assert crash_availability(g, a, {"s": ("c",)}, p) == pytest.approx((0.9 + 3 * 0.891) / 4)
    with pytest.raises(ValueError, match="probability"):
        crash_availability(g, a, {}, 1.5)


@SETTINGS
@given(task_dags(max_tasks=8), st.data())
def test_a_replica_never_lowers_crash_availability(g: TaskGraph, data: st.DataObject) -> None:
    hosts = ["h0", "h1", "h2", "h3"]
    a = {t: data.draw(st.sampled_from(hosts)) for t in g.tasks}
    t = data.draw(st.sampled_from(g.tasks))
    h = data.draw(st.sampled_from([x for x in hosts if x != a[t]]))
    p = data.draw(st.sampled_from([0.01, 0.2, 0.7]))
    assert crash_availability(g, a, {t: (h,)}, p) >= crash_availability(g, a, {}, p) - 1e-12


@st.composite
def clusters(draw: st.DrawFn) -> tuple[TaskGraph, dict[str, str], dict[str, float], float]:
    g = draw(task_dags(max_tasks=9))
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
    assignment = {t: draw(st.sampled_from(nodes)) for t in g.tasks}
    spare = {h: draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) for h in nodes}
    return g, assignment, spare, draw(st.sampled_from([0.0, 0.5, 1.5, 100.0]))


@SETTINGS
@given(
    clusters(),
    st.sampled_from(sorted(SELECTIONS)),
    st.sampled_from(STRATEGIES),
    st.integers(1, 3),
    st.sampled_from(HOST_ORDERS),
    st.booleans(),
)
def test_every_selection_passes_the_validator(
    case: tuple[TaskGraph, dict[str, str], dict[str, float], float],
    selection: str,
    strategy: str,
    level: int,
    order: str,
    limit_net: bool,
) -> None:
    g, assignment, spare, budget = case
    net = dict.fromkeys(g.tasks, 1.0) if limit_net else None
    netcap = dict.fromkeys(spare, 2.0) if limit_net else None
    plan = select_replicas(
        g,
        assignment,
        spare,
        budget=budget,
        strategy=strategy,
        selection=selection,
        level=level,
        host_order=order,
        net=net,
        net_capacity=netcap,
        host_failure_prob=0.05,
    )
    problems = check_replication(
        g, assignment, spare, plan, budget=budget, net=net, net_capacity=netcap
    )
    assert problems == []
    assert plan.crash_availability is not None and plan.baseline_crash_availability is not None
    assert plan.crash_availability >= plan.baseline_crash_availability - 1e-12
    # replication never moves a primary: the placement stays whole for the evaluator
    assert check_plan(g, bound=math.inf, backups=None, assignment=assignment) == []


def test_levels_fill_round_by_round() -> None:
    # the seed's procedure 1: everything once before anything twice
    tasks = ["a-0", "b-0"]
    g = TaskGraph.build(tasks, [], latency=dict.fromkeys(tasks, 1), weight={"a-0": 1, "b-0": 1})
    spare = {f"h{i}": 5.0 for i in range(4)}
    plan = replicate_sort_fill(g, {"a-0": "h0", "b-0": "h0"}, spare, budget=3.0, level=3)
    assert sorted(len(hs) for hs in plan.replicas.values()) == [1, 2]
    full = replicate_sort_fill(g, {"a-0": "h0", "b-0": "h0"}, spare, budget=10.0, level=3)
    assert [len(hs) for hs in full.replicas.values()] == [3, 3]  # h1..h3: all but the primary's
    assert all("h0" not in hs and len(set(hs)) == 3 for hs in full.replicas.values())
    with pytest.raises(ValueError, match="level"):
        replicate_sort_fill(g, {"a-0": "h0", "b-0": "h0"}, spare, budget=1.0, level=0)


def test_network_capacity_and_neighbour_order() -> None:
    # a -> b -> c; b's neighbours a and c run on h2, so the seed's order tries h2 first
    g = TaskGraph.build(
        ["a", "b", "c"],
        [("a", "b"), ("b", "c")],
        latency=dict.fromkeys("abc", 1),
        weight={"a": 2.0, "b": 1.0, "c": 2.0},  # only b fits the budget of 1
    )
    assignment = {"a": "h2", "b": "h0", "c": "h2"}
    spare = {"h1": 5.0, "h2": 1.0, "h3": 1.0}
    only_b = {"a": 0.0, "b": 1.0, "c": 0.0}
    plan = replicate_sort_fill(g, assignment, spare, budget=1.0, strategy="qod", net=only_b)
    assert plan.replicas == {"b": ("h2",)}
    by_spare = replicate_sort_fill(
        g, assignment, spare, budget=1.0, strategy="qod", net=only_b, host_order="spare"
    )
    assert by_spare.replicas == {"b": ("h1",)}
    # h2's network is full: the next host in the neighbour order (most spare CPU: h1)
    netcap = {"h1": 5.0, "h2": 0.5, "h3": 5.0}
    limited = replicate_sort_fill(
        g, assignment, spare, budget=1.0, strategy="qod", net=only_b, net_capacity=netcap
    )
    assert limited.replicas == {"b": ("h1",)}
    bad = replicate_sort_fill(g, assignment, spare, budget=1.0, strategy="qod")
    assert check_replication(
        g, assignment, spare, bad, budget=1.0, net=only_b, net_capacity=netcap
    ) == ["node h2: replicas use 1 of 0.5 spare network"]
    with pytest.raises(UnknownAlgorithm, match="neighbour"):
        replicate_sort_fill(g, assignment, spare, budget=1.0, host_order="nearest")


def test_random_selection_is_a_random_order_filled() -> None:
    # equal weights: random fills the budget with some 3 of the 6 tasks, seed-dependent
    tasks = [f"t-{i}" for i in range(6)]
    g = TaskGraph.build(tasks, [], latency=dict.fromkeys(tasks, 1))
    assignment = dict.fromkeys(tasks, "p")
    spare = {"h": 10.0}
    picks = {
        frozenset(
            replicate_sort_fill(
                g, assignment, spare, budget=3.0, strategy="random", seed=s
            ).replicas
        )
        for s in range(8)
    }
    assert all(len(x) == 3 for x in picks) and len(picks) > 1


def test_unknown_selection_lists_the_names() -> None:
    g = TaskGraph.build(["a"], [], latency={"a": 1})
    with pytest.raises(UnknownAlgorithm, match="sort-fill"):
        select_replicas(g, {"a": "n"}, {"m": 1.0}, budget=1.0, selection="greedy")


def test_seed_fig4_ordering_on_a_small_workload() -> None:
    # the seed's claim (Section 3.4, Fig. 4): LU and QOD beat a random selection, QOD·LU at least
    # matches QOD, at every p; a workload of the benchmark's generator, 60 queries
    g = workload(random.Random(3), queries=60, sources=10)
    assignment = spread(g, 20)
    spare = spare_for(g, assignment, 20, 15.0)

    def crash(strategy: str, p: float, seed: int = 0) -> float:
        plan = replicate_sort_fill(
            g, assignment, spare, budget=15.0, strategy=strategy, seed=seed, host_failure_prob=p
        )
        assert check_replication(g, assignment, spare, plan, budget=15.0) == []
        assert plan.crash_availability is not None
        return plan.crash_availability

    for p in (0.005, 0.02, 0.03):
        rnd = sum(crash("random", p, s) for s in range(5)) / 5
        assert crash("lu", p) > rnd
        assert crash("qod-lu", p) >= crash("qod", p)
