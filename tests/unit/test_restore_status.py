"""The restore's pure decisions and what the status says about it, without a cluster."""

from __future__ import annotations

from typing import Any

from backstop.controller.restore import apply_step, next_action, restore_record, settling
from backstop.domain.status import PlanStatus, RecoveryStatus, RestoreStatus, derive_conditions
from planners import TaskGraph
from planners.evaluate import worst_node_failure
from planners.placement import Node
from planners.restore import plan_restore

CHAIN = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")], latency={"a": 1, "b": 1, "c": 1})


def _bound(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in derive_conditions(1, status, []) if c["type"] == "BoundSatisfied")


def test_next_action_follows_the_recorded_facts() -> None:
    steps: list[dict[str, Any]] = [{"moves": {}}, {"moves": {}}]
    ok, broken = PlanStatus(bound_satisfied=True), PlanStatus(bound_satisfied=False)
    assert next_action(ok, RestoreStatus(), 1) == "none"
    assert next_action(broken, RestoreStatus(phase="Waiting"), 1) == "plan"
    running = {"active": True, "generation": 1, "steps": steps, "issued": 1}
    assert next_action(broken, RestoreStatus.model_validate(running), 1) == "issue"
    finished = RestoreStatus.model_validate({**running, "issued": 2})
    assert next_action(broken, finished, 1) == "finish"
    assert next_action(broken, RestoreStatus.model_validate(running), 2) == "supersede"


def test_a_step_updates_the_plan_through_the_evaluator_and_keeps_replicas_apart() -> None:
    plan: dict[str, Any] = {
        "assignment": {"a": "n1", "b": "n1", "c": "n1"},
        "backups": ["a", "b"],
        "replicas": {"c": ["n2"], "a": ["n2"]},
        "boundSatisfied": False,
    }
    typed = PlanStatus.model_validate(plan)
    new = apply_step(CHAIN, typed, {"c": "n2"}, 2.0)
    assert new.assignment is not None
    want = worst_node_failure(CHAIN, ["a", "b"], new.assignment)[0]
    assert new.worst_recovery_latency == want
    assert new.bound_satisfied == (want <= 2.0)
    assert new.replicas == {"a": ["n2"]}  # c's replica would share c's new node
    assert typed.assignment is not None and typed.assignment["c"] == "n1"  # input unchanged


def test_status_says_restoring_then_waiting() -> None:
    current = {"a": "n1", "b": "n1", "c": "n1"}
    rp = plan_restore(CHAIN, [Node("n1", 3), Node("n2", 3)], current, bound=2, backups=["a", "b"])
    typed = restore_record(rp, graph=CHAIN, generation=1, attempts=1, key="k", now=100.0)
    assert typed.moved == len(rp.moved) and typed.steps
    record = typed.dump()
    plan = {"generation": 1, "worstRecoveryLatency": 3.0, "bound": 2.0, "boundSatisfied": False}
    moving = _bound({"plan": plan, "restore": {**record, "issued": 1}})
    assert (moving["status"], moving["reason"]) == ("False", "Restoring")
    assert "step 1/" in moving["message"]
    waiting = _bound(
        {"plan": plan, "restore": {"phase": "Waiting", "message": "waiting for capacity: x"}}
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "BoundViolated")
    assert "waiting for capacity" in waiting["message"]
    done = _bound(
        {
            "plan": {**plan, "worstRecoveryLatency": 2.0, "boundSatisfied": True},
            "restore": {**record, "active": False, "phase": "Restored"},
        }
    )
    assert (done["status"], done["reason"]) == ("True", "WithinBound")


def test_after_a_restore_the_last_recovery_reads_as_history_next_to_the_current_worst() -> None:
    """The session's message keeps the worst recovery it left behind (9.5 s against a bound
    of 9 s); once a restore brought the bound back, ``BoundSatisfied`` gave the restored
    worst while ``Recovering`` repeated the session's figure alone, which read as a
    violation now. The message below is one a session wrote before this change."""
    session = (
        "session s1 recovered 3 tasks in 1 steps; worst single-node recovery now 9.5s "
        "(5s restart + 4.5s after it; bound 9s)"
    )
    plan = {"generation": 1, "worstRecoveryLatency": 4.0, "bound": 4.0, "boundSatisfied": True}
    status = {
        "plan": plan,
        "recovery": {"active": False, "message": session, "completedAt": "2026-11-26T20:00:00Z"},
        "restore": {"active": False, "phase": "Restored"},
    }
    conditions = {c["type"]: c for c in derive_conditions(1, status, [])}
    bound, recovering = conditions["BoundSatisfied"], conditions["Recovering"]
    assert (bound["status"], recovering["status"]) == ("True", "False")
    assert bound["message"] == "worst single-node failure recovers in 4s (bound 4s)"
    assert recovering["message"] == (
        f"no recovery in progress; last session (completed 2026-11-26T20:00:00Z): {session}; "
        "now: worst single-node failure recovers in 4s (bound 4s)"
    )
    # with nothing recorded there is no history to label
    idle = {"plan": plan, "recovery": {"active": False}}
    assert {c["type"]: c for c in derive_conditions(1, idle, [])}["Recovering"]["message"] == (
        "nothing to recover"
    )


def test_no_restore_starts_while_the_last_recovery_may_still_be_catching_up() -> None:
    """The bound is broken after a recovery, but its tasks are owed R from the failure:
    a restore that moved a task they replay from would delay them, so none starts before."""
    broken = PlanStatus.model_validate({"boundSatisfied": False})
    rec = RecoveryStatus(lost_history={"n1": 1000.0})
    for now, expected in [(1000.0, "none"), (1033.9, "none"), (1034.0, "plan")]:
        calm = settling(rec, 34.0, now)
        assert next_action(broken, RestoreStatus(), 1, settling=calm) == expected, now
    running = RestoreStatus.model_validate({"active": True, "generation": 1, "steps": [{}]})
    assert next_action(broken, running, 1, settling=True) == "issue", "a running one goes on"
