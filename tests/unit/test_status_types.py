"""The typed status: parsed once, tolerant of other versions, one merge path."""

from __future__ import annotations

import copy
from typing import Any

from backstop.domain.status import (
    PlanStatus,
    Problem,
    RecoveryStatus,
    parse_status,
    status_patch,
    with_changes,
)

RECORDED: dict[str, Any] = {
    "observedGeneration": 3,
    "plan": {
        "generation": 3,
        "algorithm": "rtap",
        "tasks": 3,
        "backupCount": 1,
        "backups": ["a"],
        "nodesUsed": 2,
        "worstRecoveryLatency": 2.5,
        "bound": 4.0,
        "boundSatisfied": True,
        "optimal": False,
        "assignment": {"a": "n1", "b": "n2", "c": "n2"},
        "worstByNode": {"n1": 1.0, "n2": 2.5},
        "moved": 0,
        "specHash": "abc",
        "latencySource": "estimated",  # written by another writer: kept as it is
    },
    "recovery": {
        "session": "s100",
        "step": 1,
        "failed": ["c"],
        "lost": {"n3": 100.0},
        "active": True,
        "lastStep": {"step": 1, "trigger": "NodeLost", "recover": {"b": "n2"}, "pending": ["c"]},
    },
    "restore": {"phase": "Waiting", "attempts": 2, "message": "waiting for capacity"},
    "reoptimization": {"lastRun": "2026-01-01T00:00:00Z", "result": "NoMetrics", "x": [1]},
    "conditions": [{"type": "Ready", "status": "True", "reason": "AllTasksRunning"}],
    "fromTheFuture": {"anything": 1},
}


def test_a_recorded_status_round_trips_without_a_patch() -> None:
    parsed = parse_status(copy.deepcopy(RECORDED))
    assert parsed.dropped == ()
    s = parsed.status
    assert s.plan is not None and s.plan.assignment == {"a": "n1", "b": "n2", "c": "n2"}
    assert s.recovery is not None and s.recovery.last_step is not None
    assert s.recovery.last_step.recover == {"b": "n2"}
    assert status_patch(s, s) == {}
    dumped = s.dump()
    assert dumped["fromTheFuture"] == {"anything": 1}
    assert dumped["plan"]["latencySource"] == "estimated"


def test_a_value_of_the_wrong_type_is_dropped_not_a_wedge() -> None:
    raw = copy.deepcopy(RECORDED)
    raw["recovery"]["failed"] = "c"  # an older writer, or a hand edit
    raw["plan"]["worstByNode"] = {"n1": "slow"}
    parsed = parse_status(raw)
    assert set(parsed.dropped) == {"recovery.failed", "plan.worstByNode.n1"}
    assert parsed.status.recovery is not None and parsed.status.recovery.failed == []
    assert parsed.status.plan is not None and parsed.status.plan.worst_by_node == {}
    assert parse_status(None).status.plan is None


def test_the_merge_patch_removes_what_disappears_and_sets_observed_generation() -> None:
    s = parse_status(RECORDED).status
    assert s.plan is not None and s.recovery is not None
    new = with_changes(
        s,
        plan=s.plan.model_copy(update={"generation": 4, "assignment": {"a": "n1"}}),
        recovery=None,
    )
    patch = status_patch(s, new)
    assert patch["plan"]["assignment"] == {"b": None, "c": None}
    assert patch["recovery"] is None
    assert patch["observedGeneration"] == 4


def test_observed_generation_waits_for_the_generations_plan() -> None:
    s = parse_status({"plan": {"generation": 3, "assignment": {"a": "n1"}}}).status
    # a problem recorded for generation 4 does not make generation 4 observed
    new = with_changes(s, problem=Problem(reason="Infeasible", message="x", generation=4))
    patch = status_patch(s, new)
    assert patch["observedGeneration"] == 3
    empty = parse_status({}).status
    assert "observedGeneration" not in status_patch(empty, with_changes(empty, plan=PlanStatus()))
    assert RecoveryStatus().failed == []
