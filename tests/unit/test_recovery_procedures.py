"""The seed's Algorithm 2 (with the first plan's global rollback) and Section 6, as written.

Asserted facts: Algorithm 2 installs exactly the plan's tasks, rolls every running task back
only with the rollback flag, flags installed and rolled-back tasks, and replays every edge
into a recovered task from a task that runs after the plan (computed here edge by edge,
independently of the node loop); over an incident only the first plan rolls back. Section 6
restores from the latest global checkpoint, puts the coordinator on the first node to
arrive, recovers incrementally at each arrival where blocking recovery waits, and ends with
a placement the failure-effect evaluator accepts.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop_testkit.support.strategies import task_dags
from planners.evaluate import check_plan
from planners.graph import TaskGraph
from planners.recovery import (
    RECOVERY_PROCEDURES,
    RecoveryStep,
    execute_recovery_plan,
    execute_recovery_plans,
    recover_complete_failure,
)


def _step(recover: dict[str, str], pending: tuple[str, ...] = ()) -> RecoveryStep:
    return RecoveryStep("test", recover, pending, (), 0.0, 0.0, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_dags(max_tasks=9), st.data())
def test_algorithm_2_edge_by_edge(g: TaskGraph, data: st.DataObject) -> None:
    nodes = ["n0", "n1", "n2"]
    fate = {t: data.draw(st.sampled_from(["run", "recover", "pending"])) for t in g.tasks}
    where = {t: data.draw(st.sampled_from(nodes)) for t in g.tasks}
    running = {t: where[t] for t in g.tasks if fate[t] == "run"}
    recover = {t: where[t] for t in g.tasks if fate[t] == "recover"}
    rollback = data.draw(st.booleans())
    ex = execute_recovery_plan(g, _step(recover), running, checkpoint=9, global_rollback=rollback)
    assert ex.install == recover and ex.checkpoint == 9
    assert ex.rollback == (running if rollback else {})
    assert ex.flagged == set(recover) | (set(running) if rollback else set())
    after = {**running, **recover}
    edges = [(g.tasks[u], g.tasks[v]) for u, v in g.edges]
    want = {(u, v, recover[v]) for u, v in edges if v in recover and u in after}
    assert set(ex.resend) == want and len(ex.resend) == len(want)


def test_only_the_first_plan_rolls_back_and_earlier_recoveries_replay() -> None:
    g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("a", "b")], latency={"s": 1, "a": 1, "b": 1})
    plans = [_step({"a": "n2"}, ("b",)), _step({"b": "n3"})]
    first, second = execute_recovery_plans(g, {"s": "n1"}, plans, checkpoint=5)
    assert first.global_rollback and first.rollback == {"s": "n1"}
    assert first.resend == (("s", "a", "n2"),)
    assert not second.global_rollback and second.rollback == {}
    # a, recovered by the first plan, buffered for b: it replays to b's node
    assert second.resend == (("a", "b", "n3"),)
    assert second.flagged == {"b"}


def test_a_plan_may_not_recover_a_running_task() -> None:
    g = TaskGraph.build(["a"], [], latency={"a": 1})
    with pytest.raises(ValueError, match="running task"):
        execute_recovery_plan(g, _step({"a": "n"}), {"a": "n"}, checkpoint=1, global_rollback=True)


def _shared() -> tuple[TaskGraph, dict[str, str], dict[str, float]]:
    """A source shared by three queries; all of it on two nodes that are lost together."""
    tasks = ["s-0", "a-0", "b-0", "c-0"]
    g = TaskGraph.build(
        tasks,
        [("s-0", "a-0"), ("s-0", "b-0"), ("s-0", "c-0")],
        latency=dict.fromkeys(tasks, 1.0),
        weight={"s-0": 1.0, "a-0": 1.0, "b-0": 1.0, "c-0": 2.0},
        priority={"a-0": 2, "b-0": 3, "c-0": 10},
    )
    return g, {"s-0": "x", "a-0": "x", "b-0": "y", "c-0": "y"}, {"x": 4.0, "y": 4.0}


def test_complete_failure_recovers_incrementally_from_the_latest_checkpoint() -> None:
    g, placed, cpu = _shared()
    # 4 cores at the 80 % cap: 3.2 free per arriving node
    r = recover_complete_failure(g, placed, cpu, [("m1", 4.0), ("m2", 4.0)], checkpoints=[2, 7, 5])
    assert r.checkpoint == 7 and r.coordinator == "m1"
    (n1, first), (n2, second) = r.plans
    assert n1 == "m1" and n2 == "m2" and first is not None and second is not None
    # on 3.2 cores: s (1) + c (2) recovers priority 10; s + a + b (3) only 5
    assert set(first.recover) == {"s-0", "c-0"} and first.recovered_priority == 10
    assert set(second.recover) == {"a-0", "b-0"}
    assert [e.global_rollback for e in r.executions] == [True, False]
    assert r.executions[0].rollback == {}  # nothing was running to roll back
    assert {(u, v) for u, v, _ in r.executions[1].resend} == {("s-0", "a-0"), ("s-0", "b-0")}
    assert not r.session.failed
    capacity = {"m1": 4.0, "m2": 4.0}
    assert check_plan(g, bound=math.inf, backups=None, assignment=r.session.assignment,
                      capacity=capacity) == []  # fmt: skip


def test_blocking_waits_for_every_node_where_incremental_does_not() -> None:
    g, placed, cpu = _shared()
    arrivals = [("m1", 4.0), ("m2", 4.0)]
    blocking = recover_complete_failure(g, placed, cpu, arrivals, checkpoints=[1], mode="blocking")
    assert blocking.plans[0][1] is None  # 5 cores of tasks do not fit in 3.2
    second = blocking.plans[1][1]
    assert second is not None and set(second.recover) == set(g.tasks)
    assert len(blocking.executions) == 1 and blocking.executions[0].global_rollback


def test_complete_failure_needs_a_checkpoint_and_is_registered() -> None:
    g, placed, cpu = _shared()
    with pytest.raises(ValueError, match="no complete global checkpoint"):
        recover_complete_failure(g, placed, cpu, [("m1", 4.0)], checkpoints=[])
    assert RECOVERY_PROCEDURES["complete-failure"] is recover_complete_failure
    assert RECOVERY_PROCEDURES["execute-plan"] is execute_recovery_plan
