"""The conditions of a StreamTopology, derived from its typed status and its pods.

Two writers touch a topology's status: the reconcile (which records the plan or the
problem *before* touching pods, so a restarted operator resumes instead of redoing
work) and the supervise daemon. To keep them from undoing each other, conditions are
never edited piecemeal: :func:`derive_conditions` computes all of them from the
recorded facts (``plan``, ``problem``, ``recovery``, ``restore``, ``suspend``,
``rollout``) and the pods, so whichever writer runs last writes the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from backstop.domain.status.boundtext import said
from backstop.domain.status.conditions import build_condition, merge_conditions
from backstop.domain.status.plan import expected_pods
from backstop.domain.status.pods import PodState, pod_key
from backstop.domain.status.types import (
    PlanStatus,
    RecoveryStatus,
    RestoreStatus,
    TopologyStatus,
    parse_status,
)

Conditions = list[dict[str, Any]]
"""Conditions as written (``metav1.Condition`` dicts, without their transition time)."""


def typed(status: TopologyStatus | Mapping[str, Any]) -> TopologyStatus:
    """``status`` as the typed model (a raw ``status`` dict is parsed here, at the edge)."""
    return status if isinstance(status, TopologyStatus) else parse_status(status).status


def derive_conditions(
    generation: int,
    status: TopologyStatus | Mapping[str, Any],
    pods: Iterable[PodState],
) -> Conditions:
    """All conditions, from the recorded facts and the pods (see the module docstring)."""
    st = typed(status)
    derived = _derive_conditions(generation, st, pods)
    return refused_ready(generation, st, lifecycle_conditions(generation, st, derived))


def refused_ready(generation: int, status: TopologyStatus, derived: Conditions) -> Conditions:
    """``derived`` with ``Ready=False`` reason ``PodsRefused`` while the API server refuses
    the task pods (``status.podsRefused``), its own message quoted: the pods' view
    ("0/4 pods running") does not say why (a suspend, which creates no pod, keeps its own).

    >>> st = TopologyStatus.model_validate({"podsRefused": {"code": 403,
    ...     "reason": "Forbidden", "message": "exceeded quota: q", "attempts": 2}})
    >>> refused_ready(1, st, [])[0]["reason"], refused_ready(1, st, [])[0]["message"]
    ('PodsRefused', 'the API server refuses the task pods (403 Forbidden, 2 attempts): \
exceeded quota: q')
    """
    rec = status.pods_refused
    if rec is None or status.suspended():
        return derived
    text = f"the API server refuses the task pods ({rec.code} {rec.reason}"
    text += f", {rec.attempts} attempts): {rec.message}"
    ready = build_condition("Ready", False, "PodsRefused", text, generation)
    return [c for c in derived if c["type"] != "Ready"] + [ready]


def conditions_patch(
    generation: int, status: TopologyStatus | Mapping[str, Any], pods: Iterable[PodState]
) -> Conditions:
    """The merged condition list to write (transition times kept where unchanged)."""
    st = typed(status)
    current = [c.dump() for c in st.conditions]
    return merge_conditions(current, derive_conditions(generation, st, pods))


def _worst_now(plan: PlanStatus) -> str:
    """The plan's worst single-node failure as ``BoundSatisfied`` says it: with the
    detection and restart terms the plan records, against ``recoveryLatencyBound``.

    >>> _worst_now(PlanStatus(worst_recovery_latency=2.1, bound=3, detection_seconds=1,
    ...                       restart_seconds=5))
    'worst single-node failure recovers in 8.1s (1s detection + 5s restart + 2.1s after it; \
bound 9s)'
    """
    worst = plan.worst_recovery_latency if plan.worst_recovery_latency is not None else 0.0
    bound = plan.bound if plan.bound is not None else 0.0
    d, c = plan.detection_seconds or 0.0, plan.restart_seconds or 0.0
    return "worst single-node failure recovers in " + said(
        worst, detection=d, restart=c, bound=bound + d + c
    )


def _last_recovery(recovery: RecoveryStatus, plan: PlanStatus) -> str:
    """``Recovering=False``: the last session's message is history, and says so.

    That message gives the worst recovery the session left behind ("9.5s ... bound 9s");
    while ``BoundSatisfied`` gives the value of now (a restore may have brought the bound
    back), so it is labelled as the last session's and followed by the current worst.

    >>> _last_recovery(RecoveryStatus(message="session s1 recovered 2 tasks in 1 steps; "
    ...     "worst single-node recovery at its end 9.5s (bound 9s)", completed_at="T"),
    ...     PlanStatus(worst_recovery_latency=4, bound=4))
    'no recovery in progress; last session (completed T): session s1 recovered 2 tasks \
in 1 steps; worst single-node recovery at its end 9.5s (bound 9s); now: worst single-node \
failure recovers in 4s (bound 4s)'
    """
    message = recovery.message
    if not message:
        return "nothing to recover"
    when = recovery.completed_at
    text = "no recovery in progress; last session" + (f" (completed {when})" if when else "")
    text += f": {message}"
    now = plan.worst_recovery_latency is not None
    return text + (f"; now: {_worst_now(plan)}" if now else "")


def _derive_conditions(
    generation: int, status: TopologyStatus, pods: Iterable[PodState]
) -> Conditions:
    """The conditions but ``Suspended`` and ``RollingOut`` (:func:`lifecycle_conditions`)."""
    plan, problem = status.plan, status.problem
    rejected = problem is not None and problem.generation == generation
    out: Conditions = []
    earlier = plan is not None and plan.assignment is not None and plan.generation != generation
    if rejected and earlier:
        # an edit is rejected; the pods keep following the last good plan (supervised)
        assert problem is not None and plan is not None
        message = (
            f"generation {generation} rejected ({problem.reason}): {problem.message}; "
            f"still running generation {plan.generation}'s plan"
        )
        out.append(build_condition("Planned", False, problem.reason, message, generation))
    elif rejected:
        assert problem is not None
        return _rejected(generation, problem.reason, problem.message)
    if plan is None:
        out.append(build_condition("Planned", False, "Pending", "not planned yet", generation))
        out.append(build_condition("Ready", False, "Pending", "not planned yet", generation))
        return out
    current = plan.generation == generation
    if not rejected:
        out.append(
            build_condition(
                "Planned",
                current,
                "PlanComputed" if current else "Replanning",
                f"{plan.tasks} tasks, {plan.backup_count} backups, "
                f"{plan.nodes_used} nodes ({plan.algorithm})",
                generation,
            )
        )
    out.append(_bound_satisfied(generation, status, plan))
    return out + _pod_conditions(generation, status, plan, current, pods)


def _rejected(generation: int, reason: str, message: str) -> Conditions:
    """The conditions of a generation rejected with no earlier plan to keep running."""
    return [
        build_condition("Planned", False, reason, message, generation),
        build_condition("Placed", False, reason, "nothing placed: " + message, generation),
        build_condition("BoundSatisfied", None, reason, "no plan", generation),
        build_condition("Ready", False, reason, message, generation),
    ]


def _bound_satisfied(generation: int, status: TopologyStatus, plan: PlanStatus) -> dict[str, Any]:
    """``BoundSatisfied``: unknown while recovering, false while a restore brings the bound
    back, else whether the recorded plan keeps it."""
    recovery, restore = status.recovery_or_empty, status.restore_or_empty
    if recovery.active:
        return build_condition(
            "BoundSatisfied",
            None,
            "Recovering",
            "recovery in progress; the bound is re-checked after",
            generation,
        )
    if _restoring(restore, generation):
        return build_condition(
            "BoundSatisfied",
            False,
            "Restoring",
            f"{_worst_now(plan)}; restore step {restore.issued}/{len(restore.steps)}: "
            f"{restore.message or ''}",
            generation,
        )
    ok = bool(plan.bound_satisfied)
    waiting = restore.message if restore.phase == "Waiting" and not ok else ""
    return build_condition(
        "BoundSatisfied",
        ok,
        "WithinBound" if ok else "BoundViolated",
        _worst_now(plan) + (f"; {waiting}" if waiting else ""),
        generation,
    )


def _restoring(restore: RestoreStatus, generation: int) -> bool:
    """Whether a restore (not a consolidation) of this generation is under way."""
    return restore.active and restore.generation == generation and restore.purpose == "Restore"


def _pod_conditions(
    generation: int,
    status: TopologyStatus,
    plan: PlanStatus,
    current: bool,
    pods: Iterable[PodState],
) -> Conditions:
    """``Placed``, ``Recovering``, ``RecommendationApproved`` and ``Ready``: the pods
    against the plan's, and the recovery and approval recorded."""
    recovery = status.recovery_or_empty
    want = expected_pods(plan)
    have: dict[str, PodState] = {}
    for p in pods:
        if not p.deleting:
            have[pod_key(p)] = p
    out = [_placed(generation, want, have)]
    if recovery.active:
        message = recovery.message if recovery.message is not None else "recovering"
        out.append(build_condition("Recovering", True, "RecoveryInProgress", message, generation))
    elif status.recovery is not None:
        message = _last_recovery(recovery, plan)
        out.append(build_condition("Recovering", False, "NoFailure", message, generation))
    reopt = status.reoptimization
    approval = (reopt.model_extra or {}).get("approval") if reopt is not None else None
    if approval and approval.get("result"):
        out.append(approval_condition(approval, generation))
    out.append(_ready(generation, want, have, current and not recovery.active))
    return out


def _placed(
    generation: int, want: Mapping[str, str], have: Mapping[str, PodState]
) -> dict[str, Any]:
    """``Placed``: every pod of the plan exists and is bound to its planned node."""
    missing = [k for k in want if k not in have]
    misplaced = [k for k, n in want.items() if k in have and have[k].node not in (None, n)]
    unbound = [k for k in want if k in have and have[k].node is None]
    if missing or misplaced:
        text = f"{len(missing)} pods missing, {len(misplaced)} misplaced"
        return build_condition("Placed", False, "Placing", text, generation)
    if unbound:
        text = f"{len(unbound)} pods not bound yet"
        return build_condition("Placed", False, "Scheduling", text, generation)
    text = f"{len(want)} pods on their planned nodes"
    return build_condition("Placed", True, "AllPodsBound", text, generation)


def _ready(
    generation: int, want: Mapping[str, str], have: Mapping[str, PodState], may_be: bool
) -> dict[str, Any]:
    """``Ready``: every pod of the plan runs on its node and no task fails (``may_be``:
    the plan is this generation's and no recovery runs)."""
    running = [
        k for k in want if k in have and have[k].phase == "Running" and have[k].node == want[k]
    ]
    failing = sorted(
        f"{have[k].name}: {have[k].failure}" for k in want if k in have and have[k].failure
    )
    running = [k for k in running if not have[k].failure]
    ready = may_be and len(running) == len(want)
    return build_condition(
        "Ready",
        ready,
        "AllTasksRunning" if ready else ("TaskFailing" if failing else "TasksStarting"),
        f"{len(running)}/{len(want)} pods running"
        + (f"; {len(failing)} failing: " + "; ".join(failing) if failing else ""),
        generation,
    )


def lifecycle_conditions(
    generation: int, status: TopologyStatus, derived: Conditions
) -> Conditions:
    """``derived`` (the other conditions) with the ``Suspended`` and ``RollingOut`` ones;
    while a suspend holds, its ``Placed`` and ``Ready`` replace the pods' view (no pod
    is meant to run)."""
    if status.suspend is None:
        rollout = status.rollout
        if rollout is not None and rollout.active:  # not every pod runs this spec yet
            text = f"rolling out: {rollout.message or ''}"
            ready = build_condition("Ready", False, "RollingOut", text, generation)
            derived = [c for c in derived if c["type"] != "Ready"] + [ready]
        return derived + rollout_condition(generation, status)
    mine = suspend_conditions(generation, status)
    types = {c["type"] for c in mine}
    kept = [c for c in derived if c["type"] not in types]
    return kept + mine + rollout_condition(generation, status)


def suspend_conditions(generation: int, status: TopologyStatus) -> Conditions:
    """The ``Suspended``, ``Placed`` and ``Ready`` conditions while a suspend holds."""
    rec = status.suspend
    phase = rec.phase if rec is not None else None
    message = (rec.message if rec is not None else None) or phase or ""
    if rec is None or phase not in ("Suspending", "Suspended"):
        resuming = phase == "Resuming"
        reason = "Resuming" if resuming else "Running"
        text = message if resuming else "not suspended"
        return [build_condition("Suspended", False, reason, text, generation)]
    reason = "CheckpointMissing" if rec.missing else rec.phase
    return [
        build_condition("Suspended", phase == "Suspended", reason, message, generation),
        build_condition("Placed", False, "Suspended", f"suspend: {message}", generation),
        build_condition("Ready", False, "Suspended", f"suspend: {message}", generation),
    ]


def rollout_condition(generation: int, status: TopologyStatus) -> Conditions:
    """The ``RollingOut`` condition, when a rollout was ever recorded."""
    rec = status.rollout
    if rec is None:
        return []
    active = rec.active
    reason = "RollingOut" if active else "RolloutComplete"
    return [build_condition("RollingOut", active, reason, rec.message or "", generation)]


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
