"""Suspend, resume and rollout steps in the supervision round (decisions:
:mod:`backstop.domain.lifecycle`).

Each function writes the status first (with the resourceVersion it read, through
:func:`backstop.controller.tick.write_status`) and only then touches pods, like the
recovery: a restarted operator finds what it was doing in the status and goes on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from backstop.controller import faults
from backstop.controller.tick import (
    Tick,
    planned_pods,
    pod_states,
    running_primaries,
    with_conditions,
    write_status,
)
from backstop.domain import lifecycle
from backstop.domain.planning import current_assignment, diff_pods
from backstop.domain.status import (
    RolloutStatus,
    TopologyStatus,
    with_changes,
    worst_vs_bound,
)


def _write(t: Tick, new: TopologyStatus, indexed: list[Mapping[str, Any]]) -> bool:
    if not write_status(t, with_conditions(t, new, pod_states(indexed))):
        return False
    faults.point("after-status")
    return True


def suspend_tick(t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None) -> bool:
    """Drive a suspend (or notice a resume); ``True`` while a suspend holds the pods, so
    the round does nothing else: no recovery, no re-placement, no convergence."""
    now = time.time() if now is None else now
    rec = t.status.suspend
    if not t.model.suspend:
        if rec is not None:
            _resume_tick(t, indexed)
        return False
    timeout = t.model.lifecycle.checkpoint_timeout_seconds
    if rec is None or rec.phase == "Resuming":
        running = {lifecycle.task_of(p) for p in indexed} - {""}
        begun = lifecycle.begin_suspend(t.status, t.observed or t.generation, now, timeout, running)
        if not _write(t, begun, indexed):
            return True
        t.emit("Suspending", f"{len(indexed)} task pods asked for a final checkpoint", False)
    before = t.status.suspend.phase if t.status.suspend is not None else None
    new, stop, force = lifecycle.suspend_progress(t.status, indexed, now)
    try:
        t.kube.stop_pods(t.owner.namespace, stop, timeout)
        t.kube.force_delete(t.owner.namespace, force)
    except ApiException as err:
        if err.status != 404:
            raise
    if new is not None and _write(t, new, indexed):
        done = t.status.suspend
        if done is not None and done.phase == "Suspended" and before == "Suspending":
            t.emit("Suspended", done.message or "suspended", bool(done.missing))
    return True


def _resume_tick(t: Tick, indexed: list[Mapping[str, Any]]) -> None:
    """``spec.suspend`` is false again: the reconcile handler re-creates the pods from
    the plan; here the phase says so, and the record goes once they all run."""
    rec = t.status.suspend
    assert rec is not None
    if rec.phase != "Resuming":
        text = "re-creating every task on its recorded node"
        resuming = rec.model_copy(update={"phase": "Resuming", "message": text})
        _write(t, with_changes(t.status, suspend=resuming), indexed)
        return
    if lifecycle.resumed(t.status, t.observed or t.generation, running_primaries(indexed)):
        message = lifecycle.resume_summary(rec, t.status.plan_or_empty)
        if _write(t, with_changes(t.status, suspend=None), indexed):
            t.emit("Resumed", message, False)


def rollout_tick(t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None) -> bool:
    """Issue the next rollout step once the previous one runs; whether anything was written.

    Waits while a recovery session runs or its last step has not landed (a node lost
    mid-rollout is the recovery's), and
    while the recorded rollout is of another generation than the plan the pods follow
    (the reconcile records the new one).
    """
    now = time.time() if now is None else now
    rec, plan = t.status.rollout, t.status.plan
    if rec is None or not rec.active or plan is None or not plan.recorded_for(t.generation):
        return False
    if rec.generation != t.generation or _recovery_unsettled(t):
        return False
    fresh = lifecycle.new_pods(planned_pods(t, plan), indexed)
    policy = t.model.lifecycle
    new, issued = lifecycle.rollout_next(
        t.status,
        t.graph,
        fresh,
        bound=t.model.planning_bound,
        limit=policy.max_unavailable,
        now=now,
        restart=t.model.recovery.restart_seconds,
        detection=t.model.recovery.detection_seconds,
    )
    if new is None or not _write(t, new, indexed):
        return False
    if issued is not None:
        done = t.status.rollout
        step = done.step if done is not None else 0
        t.emit(
            "RolloutStep",
            f"step {step}: replacing {', '.join(issued.tasks)}; worst single-node recovery "
            f"meanwhile {worst_vs_bound(issued.worst, t.model)}",
            issued.worst > t.model.planning_bound + 1e-9,
        )
    elif new.rollout is not None and not new.rollout.active:
        t.emit("RolloutComplete", new.rollout.message or "rollout done", False)
    return True


def _recovery_unsettled(t: Tick) -> bool:
    """A recovery session runs, or its last step's pods do not run yet (its tasks are
    renewed by the recovery, not by the rollout: they leave the pending list once up)."""
    rec = t.status.recovery
    if rec is None:
        return False
    last = rec.last_step
    return rec.active or (last is not None and rec.applied_step != last.step)


def held_tasks(t: Tick) -> set[str]:
    """Tasks whose old pod a rollout keeps until their step (converge must not replace them)."""
    return pending_of(t.status.rollout)


def rolling(t: Tick) -> bool:
    """Whether a rollout is under way (drains and restores wait for it)."""
    return t.status.rollout is not None and t.status.rollout.active


def rollout_with_plan(
    status: TopologyStatus,
    generation: int,
    desired: Mapping[str, Mapping[str, Any]],
    own_pods: list[Mapping[str, Any]],
    dead: set[str],
) -> RolloutStatus | None:
    """The ``status.rollout`` to record in the same write as the plan of ``generation``.

    Pods the plan would delete gracefully and create again under the same name (a new
    image, resources, node or role) become the rollout's pending tasks, with the
    placement and backup flags the running pods have; the supervisor replaces them in
    steps (:func:`rollout_tick`) and the reconcile leaves them alone
    (:func:`backstop.domain.lifecycle.hold_pending`). One write for both: a supervisor
    that saw the new plan without its rollout would replace every changed pod at once.
    """
    rec = status.rollout
    diff = diff_pods(desired, own_pods, dead)
    replaced = lifecycle.replaced_tasks(desired, own_pods, diff.delete)
    if not replaced:
        if rec is not None and rec.active and rec.generation != generation:
            return rec.model_copy(
                update={"active": False, "message": "superseded by a spec change"}
            )
        return rec
    if rec is not None and rec.active and rec.generation == generation:
        return rec
    running = [p for p in own_pods if (p.get("metadata") or {}).get("deletionTimestamp") is None]
    begun = lifecycle.begin_rollout(
        status,
        generation,
        replaced.values(),
        current_assignment(running),
        lifecycle.pod_backups(running),
        time.time(),
    )
    return begun.rollout


def pending_of(rollout: RolloutStatus | None) -> set[str]:
    """The tasks an active rollout has not replaced yet."""
    return set(rollout.pending) if rollout is not None and rollout.active else set()
