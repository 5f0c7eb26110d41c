"""BestDensity as the incremental-recovery seed writes it, pruned and strong, and Theorem 5.1.

Asserted facts: the pruned reading equals the seed's whenever at most 48
queries fail; the strong reading (every single seeded) never recovers less
than the seed's; on one node (the seed's pooled problem) Theorem 5.1's ratio
holds against the proven optimum whenever that optimum recovers two or more
queries, and fails for the seed's reading when it recovers one (hand-built);
recovered tasks plus running ones respect every node's capacity in the
failure-effect evaluator (``planners.evaluate.check_plan``).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop_testkit.support.strategies import task_dags
from planners.evaluate import check_plan
from planners.graph import TaskGraph
from planners.recovery import (
    RECOVERY_ALGORITHMS,
    approximation_bound,
    check_recovery,
    recover_best_density,
    recover_best_density_pruned,
    recover_best_density_strong,
    recover_exact,
    schedule_recovery,
)

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def shared_queries(draw: st.DrawFn) -> tuple[TaskGraph, list[str]]:
    """Sources shared by several output queries, as in the seed's generator; all failed."""
    n_src = draw(st.integers(1, 4))
    n_out = draw(st.integers(1, 7))
    srcs = [f"s-{i}" for i in range(n_src)]
    outs = [f"q-{i}" for i in range(n_out)]
    edges = [
        (s, q)
        for q in outs
        for s in draw(st.sets(st.sampled_from(srcs), min_size=1, max_size=min(3, n_src)))
    ]
    tasks = srcs + outs
    g = TaskGraph.build(
        tasks,
        edges,
        latency=dict.fromkeys(tasks, 1.0),
        weight={t: draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for t in tasks},
        outputs=outs,
        priority={q: float(draw(st.integers(1, 10))) for q in outs},
    )
    return g, tasks


@SETTINGS
@given(shared_queries(), st.sampled_from([1.0, 2.5, 4.0, 6.0, 9.0]))
def test_theorem_5_1_holds_when_the_optimum_has_two_queries(
    case: tuple[TaskGraph, list[str]], r: float
) -> None:
    g, failed = case
    pool = {"pool": r}  # one node: the seed's pooled problem
    opt = recover_exact(g, failed, pool, time_limit=5.0)
    assert opt.optimal
    bd = recover_best_density(g, failed, pool)
    assert check_recovery(g, failed, pool, bd) == []
    if len(opt.recovered_queries) >= 2:
        bound = approximation_bound(g, failed)
        assert bd.recovered_priority >= bound * opt.recovered_priority - 1e-9


def test_theorem_5_1_fails_for_the_seeds_single_candidate() -> None:
    # the densest single query is cheap and worth little; the optimum is one costly query
    g = TaskGraph.build(
        ["a-0", "b-0"],
        [],
        latency={"a-0": 1, "b-0": 1},
        weight={"a-0": 0.01, "b-0": 1.0},
        priority={"a-0": 1, "b-0": 50},
    )
    failed, pool = ["a-0", "b-0"], {"pool": 1.0}
    bound = approximation_bound(g, failed)  # d = 1: 1 - 1/e
    assert math.isclose(bound, 1 - math.exp(-1))
    seed = recover_best_density(g, failed, pool)
    assert seed.recovered_priority == 1.0 < bound * 50
    assert recover_best_density_strong(g, failed, pool).recovered_priority == 50.0


@SETTINGS
@given(shared_queries(), st.sampled_from([1.0, 2.5, 4.0]), st.integers(1, 3))
def test_pruned_equals_the_seed_up_to_48_queries_and_strong_dominates(
    case: tuple[TaskGraph, list[str]], cpu: float, nodes: int
) -> None:
    g, failed = case
    cap = {f"n{i}": cpu for i in range(nodes)}
    seed = recover_best_density(g, failed, cap)
    pruned = recover_best_density_pruned(g, failed, cap)
    strong = recover_best_density_strong(g, failed, cap)
    assert pruned.recover == seed.recover
    assert strong.recovered_priority >= seed.recovered_priority - 1e-9
    for step in (seed, pruned, strong):
        assert check_recovery(g, failed, cap, step) == []


def test_pruning_only_drops_pairs_past_48_queries() -> None:
    # 50 independent queries: the pruned reading still recovers a valid plan, never more
    outs = [f"q-{i}" for i in range(50)]
    g = TaskGraph.build(
        outs,
        [],
        latency=dict.fromkeys(outs, 1.0),
        weight={q: 0.5 + (i % 7) * 0.25 for i, q in enumerate(outs)},
        priority={q: float(1 + (i * 7) % 10) for i, q in enumerate(outs)},
    )
    cap = {"n0": 6.0, "n1": 5.0}
    full = recover_best_density(g, outs, cap, time_limit=20.0)
    pruned = recover_best_density_pruned(g, outs, cap, time_limit=20.0)
    assert check_recovery(g, outs, cap, pruned) == []
    assert pruned.recovered_priority <= full.recovered_priority + 1e-9


@SETTINGS
@given(task_dags(max_tasks=8), st.data())
def test_recovered_and_running_tasks_fit_in_the_evaluator(
    g: TaskGraph, data: st.DataObject
) -> None:
    nodes = ["n0", "n1", "n2"]
    assignment = {t: data.draw(st.sampled_from(nodes)) for t in g.tasks}
    lost = data.draw(st.sampled_from(nodes))
    failed = [t for t, n in assignment.items() if n == lost]
    running = {t: n for t, n in assignment.items() if n != lost}
    alive = [n for n in nodes if n != lost]
    used = {n: sum(g.weight[g.index(t)] for t, m in running.items() if m == n) for n in alive}
    cpu = data.draw(st.sampled_from([1.0, 2.0, 4.0]))
    free = {n: max(0.0, cpu - used[n]) for n in alive}
    for name in RECOVERY_ALGORITHMS:
        step = schedule_recovery(g, failed, free, algorithm=name, time_limit=1.0)
        assert check_recovery(g, failed, free, step) == []
        after = {**running, **step.recover, **{t: lost for t in step.pending}}
        capacity = {n: max(cpu, used[n]) for n in alive} | {lost: math.inf}
        violations = check_plan(
            g, bound=math.inf, backups=None, assignment=after, capacity=capacity
        )
        assert violations == [], (name, violations)
