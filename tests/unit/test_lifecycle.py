"""Suspend and rollout decisions on the typed status (:mod:`backstop.domain.lifecycle`).

Pod bodies are written here the way the API server sends them; a kubelet that stopped a
container posts ``state.terminated`` with the exit code and the termination message.
"""

from __future__ import annotations

from typing import Any

from backstop.domain import lifecycle
from backstop.domain.status import TopologyStatus, derive_conditions, parse_status
from planners import TaskGraph

ASSIGNMENT = {"a-0": "n1", "b-0": "n2"}
PLAN: dict[str, Any] = {"generation": 2, "assignment": ASSIGNMENT, "backups": ["a-0"]}


def pod(task: str, *, deleting: bool = False, report: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"t--{task}",
        "labels": {"streams.backstop.dev/task": task, "streams.backstop.dev/role": "primary"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    state: dict[str, Any] = {"running": {}}
    if report is not None:
        state = {"terminated": {"exitCode": 0, "message": report}}
    return {
        "metadata": meta,
        "status": {"phase": "Running", "containerStatuses": [{"state": state}]},
    }


def suspending(now: float = 100.0) -> TopologyStatus:
    st = parse_status({"plan": PLAN}).status
    return lifecycle.begin_suspend(st, 3, now, timeout=10.0, running=["a-0", "b-0"])


def test_a_suspend_asks_every_pod_then_records_the_checkpoints_that_come() -> None:
    st = suspending()
    assert st.suspend is not None and st.suspend.placement == PLAN["assignment"]
    assert st.suspended()
    new, stop, force = lifecycle.suspend_progress(st, [pod("a-0"), pod("b-0")], now=101)
    assert (new, sorted(stop), force) == (None, ["t--a-0", "t--b-0"], [])
    # a-0 answered the SIGTERM with its checkpoint; b-0 is still stopping
    pods = [
        pod("a-0", deleting=True, report="backstop-checkpoint round=40 at=1.0"),
        pod("b-0", deleting=True),
    ]
    new, stop, force = lifecycle.suspend_progress(st, pods, now=102)
    assert new is not None and new.suspend is not None
    assert new.suspend.checkpoints == {"a-0": "round=40 at=1.0"} and stop == [] == force
    assert new.suspend.phase == "Suspending"
    # past the timeout (+ slack) the pod still there is removed at once
    _, _, force = lifecycle.suspend_progress(new, [pods[1]], now=100 + 10 + 6)
    assert force == ["t--b-0"]
    done, _, _ = lifecycle.suspend_progress(new, [], now=117)
    assert done is not None and done.suspend is not None
    assert done.suspend.phase == "Suspended" and done.suspend.missing == ["b-0"]
    assert "1 reported no final checkpoint within 10s" in (done.suspend.message or "")


def test_a_topology_created_suspended_misses_no_checkpoint() -> None:
    st = parse_status({"plan": PLAN}).status
    begun = lifecycle.begin_suspend(st, 1, 100.0, timeout=10.0, running=[])
    done, stop, _ = lifecycle.suspend_progress(begun, [], now=100.5)
    assert stop == [] and done is not None and done.suspend is not None
    assert (done.suspend.phase, done.suspend.missing) == ("Suspended", [])


def test_conditions_while_suspended_say_so_instead_of_missing_pods() -> None:
    done, _, _ = lifecycle.suspend_progress(suspending(), [], now=101)
    assert done is not None
    conds = {c["type"]: c for c in derive_conditions(3, done.dump(), [])}
    assert conds["Suspended"]["status"] == "True"
    assert conds["Suspended"]["reason"] == "CheckpointMissing"  # nobody reported one
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "Suspended")
    assert conds["Placed"]["reason"] == "Suspended"


def test_a_resume_is_done_when_every_task_runs_where_the_plan_puts_it() -> None:
    st = parse_status({"plan": PLAN}).status
    assert not lifecycle.resumed(st, 2, {"a-0": "n1"})
    assert lifecycle.resumed(st, 2, {"a-0": "n1", "b-0": "n2"})
    assert not lifecycle.resumed(st, 3, {"a-0": "n1", "b-0": "n2"})  # plan of gen 3 not yet
    rec = suspending().suspend
    assert rec is not None
    moved = st.plan_or_empty.model_copy(update={"assignment": {"a-0": "n1", "b-0": "n3"}})
    text = lifecycle.resume_summary(rec, moved)
    assert text.startswith("resumed: 1 of 2 tasks back on their node, 1 re-placed")


def test_rollout_steps_wait_for_the_step_in_flight_and_end() -> None:
    g = TaskGraph.build(["a-0", "b-0"], [("a-0", "b-0")], latency={"a-0": 1.0, "b-0": 1.0})
    st = parse_status({"plan": PLAN}).status
    st = lifecycle.begin_rollout(st, 2, ["a-0", "b-0"], ASSIGNMENT, ["a-0"], now=5)
    # a-0 down and n2 (b-0) failing: 2 s; both down: 2 s too, so both go at once with R = 2
    new, issued = lifecycle.rollout_next(st, g, set(), bound=2.0, limit=0, now=6)
    assert issued is not None and issued.tasks == ["a-0", "b-0"] and issued.worst == 2.0
    assert new is not None and new.rollout is not None and new.rollout.pending == []
    # R = 1.5: one task at a time, and the second waits until the first runs its new pod
    new, issued = lifecycle.rollout_next(st, g, set(), bound=1.5, limit=0, now=6)
    assert issued is not None and issued.tasks == ["a-0"]
    assert new is not None
    assert lifecycle.rollout_next(new, g, set(), bound=1.5, limit=0, now=7) == (None, None)
    new, issued = lifecycle.rollout_next(new, g, {"a-0"}, bound=1.5, limit=0, now=8)
    assert issued is not None and issued.tasks == ["b-0"]
    assert new is not None
    done, issued = lifecycle.rollout_next(new, g, {"a-0", "b-0"}, bound=1.5, limit=0, now=9)
    assert issued is None and done is not None and done.rollout is not None
    assert not done.rollout.active and done.rollout.message == (
        "rollout done: 2 pods replaced in 2 steps"
    )


def test_checkpoint_report_needs_exit_0_and_the_prefix() -> None:
    crashed = {
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "message": "backstop-checkpoint round=3"}}}
            ]
        }
    }
    assert lifecycle.checkpoint_report(crashed) is None
    assert lifecycle.checkpoint_report(pod("a-0", report="bye")) is None
    assert lifecycle.checkpoint_report(pod("a-0", report="backstop-checkpoint round=3")) == (
        "round=3"
    )


def test_not_ready_while_a_rollout_replaces_pods() -> None:
    """Ready means every pod runs this generation's spec: a pod the rollout has not
    replaced yet runs the old one (on the planned node, so the pods alone look fine)."""
    st = parse_status({"plan": PLAN}).status
    st = lifecycle.begin_rollout(st, 2, ["b-0"], ASSIGNMENT, ["a-0"], now=5)
    conds = {c["type"]: c for c in derive_conditions(2, st.dump(), [])}
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "RollingOut")
    assert conds["RollingOut"]["status"] == "True"
