"""Recovery scheduling: every algorithm through ``check_recovery``, and only true comparisons.

The comparisons asserted are theorems: CP-SAT proven optimal dominates every
valid plan; the seed's DP solves the pooled problem, which equals the per-node
problem on one node; ``auto`` keeps BestDensity's plan unless it finds better;
with unit-weight tasks incremental recovery is never less available than blocking.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.recovery import (
    RECOVERY_ALGORITHMS,
    InvalidEvent,
    NodeBack,
    NodeReady,
    NodesLost,
    RecoverySession,
    RecoveryStep,
    check_recovery,
    failed_queries,
    fill_leftover,
    free_capacity,
    recover_best_density,
    recover_dp,
    recover_exact,
    recover_operator_centric,
    schedule_recovery,
    simulate_timeline,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw: st.DrawFn, *, max_tasks: int = 10, unit: bool = False) -> TaskGraph:
    n = draw(st.integers(2, max_tasks))
    tasks = [f"t-{i}" for i in range(n)]
    edges = [
        (tasks[u], tasks[v])
        for v in range(n)
        for u in range(v)
        if draw(st.booleans()) and draw(st.booleans())
    ]
    sinks = {t for t in tasks if not any(u == t for u, _ in edges)}
    extra = draw(st.sets(st.sampled_from(tasks), max_size=3))
    outputs = sorted(sinks | extra)
    weights = st.just(1.0) if unit else st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0])
    return TaskGraph.build(
        tasks,
        edges,
        latency={t: 1.0 for t in tasks},
        weight={t: draw(weights) for t in tasks},
        outputs=outputs,
        priority={t: float(draw(st.integers(1, 10))) for t in outputs},
    )


@st.composite
def cases(draw: st.DrawFn, *, max_nodes: int = 3) -> tuple[TaskGraph, list[str], dict[str, float]]:
    g = draw(graphs())
    failed = draw(st.lists(st.sampled_from(g.tasks), unique=True, min_size=1))
    k = draw(st.integers(1, max_nodes))
    cap = {f"n{i}": draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.5, 4.0])) for i in range(k)}
    return g, failed, cap


def fan() -> TaskGraph:
    """s-0 feeds q-0..q-3; s-1 feeds q-2, q-3; q-3 has the top priority."""
    tasks = ["s-0", "s-1", "q-0", "q-1", "q-2", "q-3"]
    edges = [("s-0", q) for q in tasks[2:]] + [("s-1", "q-2"), ("s-1", "q-3")]
    return TaskGraph.build(
        tasks,
        edges,
        latency={t: 1.0 for t in tasks},
        weight={"s-0": 1.0, "s-1": 2.0, "q-0": 1.0, "q-1": 1.0, "q-2": 1.0, "q-3": 1.0},
        priority={"q-0": 1, "q-1": 1, "q-2": 2, "q-3": 6},
    )


# --------------------------------------------------------------------------- algorithms


@SETTINGS
@given(cases())
def test_every_algorithm_passes_the_validator(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    g, failed, cap = case
    for name in RECOVERY_ALGORITHMS:
        step = schedule_recovery(g, failed, cap, algorithm=name, time_limit=2.0)
        assert check_recovery(g, failed, cap, step) == [], name
        assert step.algorithm == name


@SETTINGS
@given(cases())
def test_proven_exact_dominates_every_valid_plan(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    g, failed, cap = case
    ex = recover_exact(g, failed, cap, time_limit=5.0)
    assert ex.optimal  # these instances are tiny
    for name in RECOVERY_ALGORITHMS:
        other = schedule_recovery(g, failed, cap, algorithm=name, time_limit=2.0)
        assert other.recovered_priority <= ex.recovered_priority + 1e-9, name
        if other.upper_bound is not None:
            assert other.upper_bound >= ex.recovered_priority - 1e-9, name


@SETTINGS
@given(cases(max_nodes=1))
def test_dp_equals_exact_on_one_node(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    """The seed's DP solves the pooled problem; on one node that is the per-node problem."""
    g, failed, cap = case
    dp = recover_dp(g, failed, cap)
    ex = recover_exact(g, failed, cap)
    assert dp.optimal and ex.optimal
    assert math.isclose(dp.recovered_priority, ex.recovered_priority)


@SETTINGS
@given(cases())
def test_auto_is_never_below_best_density(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    g, failed, cap = case
    bd = recover_best_density(g, failed, cap)
    auto = schedule_recovery(g, failed, cap)
    assert auto.recovered_priority >= bd.recovered_priority - 1e-9


@SETTINGS
@given(cases())
def test_everything_fits_means_everything_recovered(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    g, failed, _ = case
    roomy = {"big": sum(g.weight) + 1.0}
    for name in RECOVERY_ALGORITHMS:
        step = schedule_recovery(g, failed, roomy, algorithm=name)
        assert step.pending == (), name
        assert step.recovered_priority == step.failed_priority


def test_query_centric_beats_operator_centric_on_the_fan() -> None:
    g = fan()
    failed = list(g.tasks)
    cap = {"n1": 2.0, "n2": 2.0}
    oc = recover_operator_centric(g, failed, cap)
    bd = recover_best_density(g, failed, cap)
    ex = recover_exact(g, failed, cap)
    # OC spends 4 cores on s-0, s-1 and one output; the optimum is s-0, s-1, q-3.
    assert oc.recovered_priority < ex.recovered_priority
    assert ex.recovered_priority == 6.0 and ex.optimal
    assert bd.recovered_priority == 6.0
    assert set(ex.recover) == {"s-0", "s-1", "q-3"}
    for step in (oc, bd, ex):
        assert check_recovery(g, failed, cap, step) == []


def test_plans_fit_node_by_node_not_only_in_aggregate() -> None:
    # 2 cores free in total, but split 1 + 1: the 2-core task cannot come back.
    g = TaskGraph.build(["a-0"], [], latency={"a-0": 1}, weight={"a-0": 2.0})
    for name in RECOVERY_ALGORITHMS:
        step = schedule_recovery(g, ["a-0"], {"n1": 1.0, "n2": 1.0}, algorithm=name)
        assert step.recover == {}, name
        assert step.pending == ("a-0",)


def test_validator_catches_each_kind_of_error() -> None:
    g = fan()
    failed = ["s-0", "q-0"]
    good = recover_exact(g, failed, {"n": 2.0})
    assert check_recovery(g, failed, {"n": 2.0}, good) == []
    over = check_recovery(g, failed, {"n": 1.0}, good)
    assert any("free" in p for p in over)
    ghost = RecoveryStep("x", {"q-1": "n"}, ("s-0", "q-0"), (), 0.0, 2.0, None)
    assert any("was not failed" in p for p in check_recovery(g, failed, {"n": 9}, ghost))
    lying = RecoveryStep("x", {"s-0": "n"}, ("q-0",), ("q-0",), 1.0, 10.0, None)
    assert len(check_recovery(g, failed, {"n": 9}, lying)) == 2
    nowhere = RecoveryStep("x", {"s-0": "m"}, ("q-0",), (), 0.0, 4.0, None)
    assert any("unknown" in p for p in check_recovery(g, failed, {"n": 9}, nowhere))


def test_failed_queries_and_capacity_helpers() -> None:
    g = fan()
    fq = failed_queries(g, ["s-1"])
    assert fq == {"q-2": frozenset({"s-1"}), "q-3": frozenset({"s-1"})}
    assert free_capacity({"a": 10}, {"a": 9}) == {"a": 0.0}
    with pytest.raises(ValueError):
        free_capacity({"a": 1}, {}, cap=1.5)


def test_unknown_algorithm_lists_the_names() -> None:
    with pytest.raises(UnknownAlgorithm, match="best-density"):
        schedule_recovery(fan(), ["s-0"], {"n": 1.0}, algorithm="greedy")


def test_exact_under_a_tiny_budget_still_returns_a_valid_plan() -> None:
    g = fan()
    step = recover_exact(g, list(g.tasks), {"n1": 2.0, "n2": 2.0}, time_limit=0.001)
    assert check_recovery(g, list(g.tasks), {"n1": 2.0, "n2": 2.0}, step) == []


# --------------------------------------------------------------------------- session


def test_repeated_failure_fails_recovered_tasks_again() -> None:
    g = fan()
    assignment = {"s-0": "a", "s-1": "a", "q-0": "b", "q-1": "b", "q-2": "c", "q-3": "c"}
    s = RecoverySession.start(g, assignment, {"a": 10, "b": 10, "c": 10}, algorithm="exact")
    s, step = s.handle(NodesLost(("c",)))
    assert step is not None and set(step.recover) == {"q-2", "q-3"}
    assert all(n in {"a", "b"} for n in step.recover.values())
    moved_to_b = {t for t, n in step.recover.items() if n == "b"}
    s, step2 = s.handle(NodesLost(("b",)))
    # b's own tasks and whatever the first plan put on b fail again
    assert step2 is not None
    assert {"q-0", "q-1"} | moved_to_b <= set(step2.recover)
    assert s.done and s.assignment.keys() == set(g.tasks)
    assert set(s.assignment.values()) == {"a"}


def test_session_waits_then_recovers_as_nodes_arrive() -> None:
    g = fan()
    assignment = {t: "x" for t in g.tasks}
    s = RecoverySession.start(g, assignment, {"x": 10, "y": 1.0})
    s, step = s.handle(NodesLost(("x",)))
    assert step is None or step.recovered_priority == 0.0
    s, step = s.handle(NodeReady("r1", 5.0))  # 4 cores free: s-0, s-1, q-3 (priority 6)
    assert step is not None and step.recovered_queries == ("q-3",)
    assert not s.done
    s, step = s.handle(NodeBack("x"))
    assert step is not None and s.done
    assert s.available_queries() == frozenset({"q-0", "q-1", "q-2", "q-3"})


def test_blocking_mode_waits_until_everything_fits() -> None:
    g = fan()
    s = RecoverySession.start(g, {t: "x" for t in g.tasks}, {"x": 10}, mode="blocking")
    s, step = s.handle(NodesLost(("x",)))
    assert step is None
    s, step = s.handle(NodeReady("r1", 5.0))
    assert step is None and len(s.failed) == 6
    s, step = s.handle(NodeReady("r2", 5.0))
    assert step is not None and s.done and step.algorithm == "blocking"


def test_session_rejects_bad_events() -> None:
    g = fan()
    s = RecoverySession.start(g, {t: "x" for t in g.tasks}, {"x": 10})
    with pytest.raises(InvalidEvent):
        s.apply(NodesLost(("nope",)))
    with pytest.raises(InvalidEvent):
        s.apply(NodeBack("x"))
    with pytest.raises(UnknownAlgorithm):
        RecoverySession.start(g, {}, {"x": 1}, algorithm="nope")


events = st.lists(
    st.one_of(
        st.builds(lambda i: ("lose", i), st.integers(0, 5)),
        st.builds(lambda c: ("ready", c), st.sampled_from([1.0, 2.0, 4.0])),
        st.builds(lambda i: ("back", i), st.integers(0, 5)),
    ),
    max_size=8,
)


@SETTINGS
@given(graphs(max_tasks=8), events, st.sampled_from(["incremental", "operator-centric"]))
def test_session_steps_are_valid_and_it_finishes(g: TaskGraph, evs: list, mode: str) -> None:  # type: ignore[type-arg]
    nodes = ["a", "b", "c"]
    assignment = {t: nodes[i % 3] for i, t in enumerate(g.tasks)}
    s = RecoverySession.start(
        g,
        assignment,
        {"a": 8.0, "b": 8.0, "c": 8.0},
        mode=mode,  # type: ignore[arg-type]
        algorithm="best-density",
    )
    fresh = 0

    def run(session: RecoverySession, ev: NodesLost | NodeReady | NodeBack) -> RecoverySession:
        after = session.apply(ev)
        cap = after.capacity()
        failed = set(after.failed)
        nxt, step = after.plan()
        if step is not None:
            assert check_recovery(g, failed, cap, step) == []
            assert nxt.failed == failed - set(step.recover)
        assert not (nxt.failed & set(nxt.assignment))
        assert nxt.failed | set(nxt.assignment) == set(g.tasks)
        return nxt

    for kind, arg in evs:
        present = sorted(s.node_cpu)
        if kind == "lose" and present:
            s = run(s, NodesLost((present[int(arg) % len(present)],)))
        elif kind == "back" and s.down:
            s = run(s, NodeBack(sorted(s.down)[int(arg) % len(s.down)]))
        elif kind == "ready":
            fresh += 1
            s = run(s, NodeReady(f"r{fresh}", float(arg)))
    s = run(s, NodeReady("rescue", sum(g.weight) / 0.8 + 1.0))
    assert s.done


# --------------------------------------------------------------------------- timeline


@SETTINGS
@given(
    graphs(max_tasks=10, unit=True),
    st.integers(1, 2),
    st.lists(st.tuples(st.integers(1, 600), st.integers(1, 4)), min_size=1, max_size=4),
)
def test_incremental_is_never_less_available_than_blocking_with_unit_tasks(
    g: TaskGraph, lost: int, arrivals: list[tuple[int, int]]
) -> None:
    """With unit CPU requests and whole-core nodes, a plan fits iff the count fits in the
    sum of whole free cores, so when blocking can recover everything the incremental
    session can too; before that it has recovered at least as much."""
    nodes = ["a", "b", "c"]
    assignment = {t: nodes[i % 3] for i, t in enumerate(g.tasks)}
    cpu = {n: 5.0 for n in nodes}
    arr = {}
    for i, (t, c) in enumerate(arrivals):
        cpu[f"r{i}"] = float(c)
        arr[f"r{i}"] = float(t)
    lost_at = {n: 0.0 for n in nodes[:lost]}
    runs = {
        mode: simulate_timeline(
            g, assignment, cpu, lost_at, arr, mode=mode, algorithm="best-density", horizon=1000
        )
        for mode in ("incremental", "blocking", "operator-centric")
    }
    inc, blk = runs["incremental"], runs["blocking"]
    assert inc.unavailability <= blk.unavailability + 1e-9
    for q, d in inc.downtime.items():
        assert d <= blk.downtime.get(q, 0.0) + 1e-9
    if blk.complete:
        assert inc.complete and inc.finished_at is not None and blk.finished_at is not None
        assert inc.finished_at <= blk.finished_at
    for run in runs.values():
        for timed in run.steps:
            assert timed.step.recover


def test_timeline_counts_priority_times_downtime() -> None:
    g = fan()
    assignment = {t: "x" for t in g.tasks}
    cpu = {"x": 10.0, "r1": 5.0, "r2": 5.0}
    tl = {
        mode: simulate_timeline(
            g, assignment, cpu, {"x": 0.0}, {"r1": 100.0, "r2": 300.0}, mode=mode
        )
        for mode in ("incremental", "blocking", "operator-centric")
    }
    # incremental: q-3 (priority 6) back at 100, the rest at 300
    assert tl["incremental"].back_at["q-3"] == 100.0
    assert tl["incremental"].unavailability == 6 * 100 + (1 + 1 + 2) * 300
    assert tl["blocking"].unavailability == 10 * 300
    assert tl["incremental"].finished_at == tl["blocking"].finished_at == 300.0
    assert tl["operator-centric"].unavailability >= tl["incremental"].unavailability


@SETTINGS
@given(cases())
def test_filling_leftover_capacity_keeps_the_plan_valid_and_never_loses_priority(
    case: tuple[TaskGraph, list[str], dict[str, float]],
) -> None:
    g, failed, cap = case
    base = schedule_recovery(g, failed, cap, algorithm="best-density")
    filled = fill_leftover(g, failed, cap, base)
    assert check_recovery(g, failed, cap, filled) == []
    assert set(base.recover) <= set(filled.recover)
    assert filled.recovered_priority >= base.recovered_priority - 1e-9
    # nothing that still fits is left idle
    left = dict(cap)
    for t, n in filled.recover.items():
        left[n] -= g.weight[g.index(t)]
    for t in filled.pending:
        assert all(c + 1e-9 < g.weight[g.index(t)] for c in left.values())
