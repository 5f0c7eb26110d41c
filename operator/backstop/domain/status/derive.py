"""The StreamTopology status: what is recorded, and the conditions derived from it.

Two writers touch a topology's status: the reconcile handler (which records the
plan or the problem *before* touching pods, so a restarted operator resumes
instead of redoing work) and the readiness timer. To keep them from undoing each
other, conditions are never edited piecemeal: :func:`derive_conditions` computes
all of them from the recorded facts (``plan``, ``problem``, ``recovery``) and the
pods, so whichever writer runs last writes the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from backstop.domain.status.conditions import build_condition, merge_conditions
from backstop.domain.status.plan import expected_pods
from backstop.domain.status.pods import PodState, pod_key


def derive_conditions(
    generation: int,
    status: Mapping[str, Any],
    pods: Iterable[PodState],
) -> list[dict[str, Any]]:
    """All conditions, from the recorded facts and the pods (see the module docstring)."""
    derived = _derive_conditions(generation, status, pods)
    return lifecycle_conditions(generation, status, derived)


def _worst_now(plan: Mapping[str, Any]) -> str:
    """The plan's worst single-node failure as ``BoundSatisfied`` says it."""
    worst, bound = plan.get("worstRecoveryLatency", 0.0), plan.get("bound", 0.0)
    return f"worst single-node failure recovers in {worst:g}s (bound {bound:g}s)"


def _last_recovery(recovery: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    """``Recovering=False``: the last session's message is history, and says so.

    That message gives the worst recovery the session left behind ("9.5s ... bound 9s");
    after a restore brought the bound back, ``BoundSatisfied`` gave the restored value
    and the same figure under ``Recovering`` read as a current violation. So it is
    labelled as the last session's and followed by the current worst.

    >>> _last_recovery({"message": "session s1 recovered 2 tasks in 1 steps; worst "
    ...     "single-node recovery at its end 9.5s (bound 9s)", "completedAt": "T"},
    ...     {"worstRecoveryLatency": 4, "bound": 4})
    'no recovery in progress; last session (completed T): session s1 recovered 2 tasks \
in 1 steps; worst single-node recovery at its end 9.5s (bound 9s); now: worst single-node \
failure recovers in 4s (bound 4s)'
    """
    message = recovery.get("message")
    if not message:
        return "nothing to recover"
    when = recovery.get("completedAt")
    text = "no recovery in progress; last session" + (f" (completed {when})" if when else "")
    text += f": {message}"
    return text + (f"; now: {_worst_now(plan)}" if "worstRecoveryLatency" in plan else "")


def _derive_conditions(
    generation: int,
    status: Mapping[str, Any],
    pods: Iterable[PodState],
) -> list[dict[str, Any]]:
    plan = status.get("plan") or {}
    problem = status.get("problem")
    recovery = status.get("recovery") or {}
    restore = status.get("restore") or {}
    out: list[dict[str, Any]] = []
    rejected = bool(problem and problem.get("generation") == generation)
    if rejected and plan.get("assignment") is not None and plan.get("generation") != generation:
        # an edit is rejected; the pods keep following the last good plan (supervised)
        assert problem is not None
        message = (
            f"generation {generation} rejected ({problem['reason']}): {problem['message']}; "
            f"still running generation {plan.get('generation')}'s plan"
        )
        out.append(build_condition("Planned", False, problem["reason"], message, generation))
    elif rejected:
        assert problem is not None
        reason, message = problem["reason"], problem["message"]
        out.append(build_condition("Planned", False, reason, message, generation))
        out.append(
            build_condition("Placed", False, reason, "nothing placed: " + message, generation)
        )
        out.append(build_condition("BoundSatisfied", None, reason, "no plan", generation))
        out.append(build_condition("Ready", False, reason, message, generation))
        return out
    if not plan:
        out.append(build_condition("Planned", False, "Pending", "not planned yet", generation))
        out.append(build_condition("Ready", False, "Pending", "not planned yet", generation))
        return out
    current = plan.get("generation") == generation
    if not rejected:
        out.append(
            build_condition(
                "Planned",
                current,
                "PlanComputed" if current else "Replanning",
                f"{plan.get('tasks')} tasks, {plan.get('backupCount')} backups, "
                f"{plan.get('nodesUsed')} nodes ({plan.get('algorithm')})",
                generation,
            )
        )
    if recovery.get("active"):
        out.append(
            build_condition(
                "BoundSatisfied",
                None,
                "Recovering",
                "recovery in progress; the bound is re-checked after",
                generation,
            )
        )
    elif (
        restore.get("active")
        and restore.get("generation") == generation
        and restore.get("purpose", "Restore") == "Restore"
    ):
        steps = len(restore.get("steps") or [])
        out.append(
            build_condition(
                "BoundSatisfied",
                False,
                "Restoring",
                f"{_worst_now(plan)}; restore step {restore.get('issued', 0)}/{steps}: "
                f"{restore.get('message', '')}",
                generation,
            )
        )
    else:
        ok = bool(plan.get("boundSatisfied"))
        waiting = restore.get("message") if restore.get("phase") == "Waiting" and not ok else ""
        out.append(
            build_condition(
                "BoundSatisfied",
                ok,
                "WithinBound" if ok else "BoundViolated",
                _worst_now(plan) + (f"; {waiting}" if waiting else ""),
                generation,
            )
        )
    want = expected_pods(plan)
    have: dict[str, PodState] = {}
    for p in pods:
        if not p.deleting:
            have[pod_key(p)] = p
    missing = [k for k in want if k not in have]
    misplaced = [k for k, n in want.items() if k in have and have[k].node not in (None, n)]
    unbound = [k for k in want if k in have and have[k].node is None]
    running = [
        k for k in want if k in have and have[k].phase == "Running" and have[k].node == want[k]
    ]
    if missing or misplaced:
        out.append(
            build_condition(
                "Placed",
                False,
                "Placing",
                f"{len(missing)} pods missing, {len(misplaced)} misplaced",
                generation,
            )
        )
    elif unbound:
        out.append(
            build_condition(
                "Placed", False, "Scheduling", f"{len(unbound)} pods not bound yet", generation
            )
        )
    else:
        out.append(
            build_condition(
                "Placed",
                True,
                "AllPodsBound",
                f"{len(want)} pods on their planned nodes",
                generation,
            )
        )
    if recovery.get("active"):
        out.append(
            build_condition(
                "Recovering",
                True,
                "RecoveryInProgress",
                recovery.get("message", "recovering"),
                generation,
            )
        )
    elif "recovery" in status:
        out.append(
            build_condition(
                "Recovering", False, "NoFailure", _last_recovery(recovery, plan), generation
            )
        )
    failing = sorted(
        f"{have[k].name}: {have[k].failure}" for k in want if k in have and have[k].failure
    )
    running = [k for k in running if not have[k].failure]
    approval = (status.get("reoptimization") or {}).get("approval")
    if approval and approval.get("result"):
        out.append(approval_condition(approval, generation))
    ready = current and len(running) == len(want) and not recovery.get("active")
    out.append(
        build_condition(
            "Ready",
            ready,
            "AllTasksRunning" if ready else ("TaskFailing" if failing else "TasksStarting"),
            f"{len(running)}/{len(want)} pods running"
            + (f"; {len(failing)} failing: " + "; ".join(failing) if failing else ""),
            generation,
        )
    )
    return out


def conditions_patch(
    generation: int, status: Mapping[str, Any], pods: Iterable[PodState]
) -> list[dict[str, Any]]:
    """The merged condition list to write (transition times kept where unchanged)."""
    return merge_conditions(status.get("conditions"), derive_conditions(generation, status, pods))


def lifecycle_conditions(
    generation: int, status: Mapping[str, Any], derived: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``derived`` (the other conditions) with the ``Suspended`` and ``RollingOut`` ones;
    while a suspend holds, its ``Placed`` and ``Ready`` replace the pods' view (no pod
    is meant to run)."""
    if "suspend" not in status:
        rollout = status.get("rollout") or {}
        if rollout.get("active"):  # not every pod runs this generation's spec yet
            text = f"rolling out: {rollout.get('message') or ''}"
            ready = build_condition("Ready", False, "RollingOut", text, generation)
            derived = [c for c in derived if c["type"] != "Ready"] + [ready]
        return derived + rollout_condition(generation, status)
    mine = suspend_conditions(generation, status)
    types = {c["type"] for c in mine}
    kept = [c for c in derived if c["type"] not in types]
    return kept + mine + rollout_condition(generation, status)


def suspend_conditions(generation: int, status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``Suspended``, ``Placed`` and ``Ready`` conditions while a suspend holds."""
    rec = status.get("suspend") or {}
    phase = rec.get("phase")
    message = rec.get("message") or phase or ""
    if phase not in ("Suspending", "Suspended"):
        resuming = phase == "Resuming"
        reason = "Resuming" if resuming else "Running"
        text = message if resuming else "not suspended"
        return [build_condition("Suspended", False, reason, text, generation)]
    reason = "CheckpointMissing" if rec.get("missing") else phase
    return [
        build_condition("Suspended", phase == "Suspended", reason, message, generation),
        build_condition("Placed", False, "Suspended", f"suspend: {message}", generation),
        build_condition("Ready", False, "Suspended", f"suspend: {message}", generation),
    ]


def rollout_condition(generation: int, status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``RollingOut`` condition, when a rollout was ever recorded."""
    rec = status.get("rollout")
    if not rec:
        return []
    active = bool(rec.get("active"))
    reason = "RollingOut" if active else "RolloutComplete"
    return [build_condition("RollingOut", active, reason, rec.get("message") or "", generation)]


def approval_condition(approval: Mapping[str, Any], generation: int) -> dict[str, Any]:
    """The ``RecommendationApproved`` condition of a decided approval
    (``status.reoptimization.approval``): ``True`` applied, ``False`` refused, with why.

    >>> c = approval_condition({"id": "r1", "result": "Refused", "reason": "SpecChanged",
    ...                         "message": "the spec changed"}, 2)
    >>> c["status"], c["reason"], c["message"]
    ('False', 'SpecChanged', 'recommendation r1: the spec changed')
    """
    return build_condition(
        "RecommendationApproved",
        approval.get("result") == "Applied",
        str(approval.get("reason", "")),
        f"recommendation {approval.get('id')}: {approval.get('message', '')}",
        generation,
    )
