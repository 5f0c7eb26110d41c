"""Suspend, resume and rollouts, decided on the typed status (pure).

**Suspend** (``spec.suspend: true``, like Flink's ``job.state: suspended``, Spark's
``suspend`` and Strimzi's pause annotation). The status records the suspend
(``status.suspend``, phase ``Suspending``, with the placement) *before* any pod is
removed, so the removals are known as the operator's own: while a suspend is recorded no
recovery, lost-pod re-placement, drain or restore runs, and a node lost meanwhile opens
no session. Each pod is deleted gracefully: the kubelet sends SIGTERM and gives the
task ``spec.lifecycle.checkpointTimeoutSeconds``; the runtime takes a final checkpoint
and exits 0 with the termination message ``backstop-checkpoint round=<r> at=<t>``
(:data:`CHECKPOINT_PREFIX`), which the kubelet posts in the pod's status before the pod
goes. A pod still there after the timeout is removed without it, and the status names
the tasks that reported no checkpoint. Once no pod is left: ``Suspended``. The plan
(placement, backups, epochs) stays in ``status.plan``.

**Resume** (``spec.suspend: false``). The reconcile handler keeps the recorded plan when
every node it names is still usable, so every task restarts on the node it had; else it
re-plans with the fewest moves from it (only what cannot go back moves). The runtime
restores its newest checkpoint: the final one. ``status.suspend`` turns ``Resuming`` and
goes once the pods run.

**Rollouts** (a spec change that replaces running pods: a new image, resources, a new
node or role). Instead of deleting every changed pod at once, the reconcile records
``status.rollout`` (the old placement and backups, the tasks still pending) and the
supervisor replaces them in steps (:func:`planners.rollout.next_rollout_step`): each step
as large as keeps ``H(K_p ∪ D) ≤ R`` for every node ``p`` in the state it runs in, and
each pod stopped with SIGTERM, i.e. with a final checkpoint (Flink's ``upgradeMode:
savepoint``). A node lost meanwhile hands over to the recovery session; the rollout
waits for it and goes on with the tasks whose pods still run the old spec.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from backstop.domain.constants import ANN_HASH, LABEL_ROLE, LABEL_TASK
from backstop.domain.incidents import epoch_rfc3339
from backstop.domain.planning import PodDiff
from backstop.domain.status import (
    PlanStatus,
    RolloutStatus,
    RolloutStepRecord,
    SuspendStatus,
    TopologyStatus,
    said,
    with_changes,
)
from planners import TaskGraph
from planners.rollout import RolloutState, next_rollout_step

CHECKPOINT_PREFIX = "backstop-checkpoint"
"""How a task's termination message starts when it took a final checkpoint on SIGTERM."""
FORCE_AFTER_SECONDS = 5.0
"""Slack after the checkpoint timeout before a pod still stopping is removed at once (the
kubelet kills it at the timeout; this covers a node that stopped answering)."""


def checkpoint_report(pod: Mapping[str, Any]) -> str | None:
    """What the task of ``pod`` (a dict, as the API sends it) reported on its way out.

    >>> pod = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0,
    ...     "message": "backstop-checkpoint round=40 at=1764150000.5"}}}]}}
    >>> checkpoint_report(pod)
    'round=40 at=1764150000.5'
    >>> checkpoint_report({"status": {"containerStatuses": [{"state": {"running": {}}}]}})
    """
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (cs.get("state") or {}).get("terminated") or {}
        text = (ended.get("message") or "").strip()
        if ended.get("exitCode") == 0 and text.startswith(CHECKPOINT_PREFIX):
            return text.removeprefix(CHECKPOINT_PREFIX).strip() or "reported"
    return None


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def task_of(pod: Mapping[str, Any]) -> str:
    """The task label of a pod body ('' when absent)."""
    return str((_meta(pod).get("labels") or {}).get(LABEL_TASK) or "")


# ---- suspend -----------------------------------------------------------------------------


def begin_suspend(
    status: TopologyStatus, generation: int, now: float, timeout: float, running: Iterable[str]
) -> TopologyStatus:
    """The status that records a suspend before any pod is removed; ``running`` are the
    tasks that have a pod now (the ones asked for a final checkpoint)."""
    plan = status.plan_or_empty
    rec = SuspendStatus(
        phase="Suspending",
        generation=generation,
        requested_at=epoch_rfc3339(now),
        deadline=now + timeout,
        timeout=timeout,
        placement=dict(plan.assignment or {}),
        stopped=sorted(set(running)),
        message="asking every task for a final checkpoint",
    )
    return with_changes(status, suspend=rec, rollout=None)


def suspend_progress(
    status: TopologyStatus, pods: Iterable[Mapping[str, Any]], now: float
) -> tuple[TopologyStatus | None, list[str], list[str]]:
    """One step of a suspend: ``(new status or None, pods to stop, pods to remove now)``.

    Pods not stopping yet are asked (graceful delete); after the deadline plus
    :data:`FORCE_AFTER_SECONDS` the rest are removed at once. The checkpoints that pods
    report are recorded as they come; with no pod left the suspend is ``Suspended``.
    """
    rec = status.suspend
    assert rec is not None
    checkpoints = dict(rec.checkpoints)
    stop: list[str] = []
    force: list[str] = []
    left = 0
    for pod in pods:
        task, name = task_of(pod), str(_meta(pod).get("name"))
        report = checkpoint_report(pod)
        if report is not None and task and task not in checkpoints:
            checkpoints[task] = report
        left += 1
        if not _meta(pod).get("deletionTimestamp"):
            stop.append(name)
        elif now > (rec.deadline or now) + FORCE_AFTER_SECONDS:
            force.append(name)
    new = rec.model_copy(update={"checkpoints": checkpoints})
    if rec.phase == "Suspending" and left == 0:
        missing = sorted(t for t in rec.stopped if t not in checkpoints)
        message = (
            f"{len(rec.stopped)} tasks stopped, every one after its final checkpoint"
            if not missing
            else f"{len(rec.stopped)} tasks stopped; {len(missing)} reported no final "
            f"checkpoint within {rec.timeout or 0:g}s (they restore their last periodic one): "
            + ", ".join(missing[:8])
            + (", …" if len(missing) > 8 else "")
        )
        new = new.model_copy(
            update={
                "phase": "Suspended",
                "missing": missing,
                "message": message,
                "suspended_at": epoch_rfc3339(now),
            }
        )
    changed = new != rec
    return (with_changes(status, suspend=new) if changed else None), stop, force


def resumed(status: TopologyStatus, generation: int, running: Mapping[str, str]) -> bool:
    """Whether a resume is done: the plan of ``generation`` recorded and all its tasks
    Running where it puts them."""
    plan = status.plan
    if plan is None or not plan.recorded_for(generation):
        return False
    return all(running.get(t) == n for t, n in (plan.assignment or {}).items())


def resume_summary(rec: SuspendStatus, plan: PlanStatus) -> str:
    """How many tasks went back to their node and how many were re-placed."""
    now = plan.assignment or {}
    back = sum(1 for t, n in now.items() if rec.placement.get(t) == n)
    moved = sorted(t for t, n in now.items() if t in rec.placement and rec.placement[t] != n)
    text = f"resumed: {back} of {len(now)} tasks back on their node"
    if moved:
        text += f", {len(moved)} re-placed (node no longer usable): " + ", ".join(moved[:8])
    return text


# ---- rollouts ----------------------------------------------------------------------------


def replaced_tasks(
    desired: Mapping[str, Mapping[str, Any]],
    existing: Iterable[Mapping[str, Any]],
    delete: Iterable[str],
) -> dict[str, str]:
    """``{pod name: task}`` of the pods a diff deletes gracefully that come back under
    the same name (a running task's pod replaced: a rollout's business)."""
    names = set(delete) & set(desired)
    out: dict[str, str] = {}
    for pod in existing:
        name, task = _meta(pod).get("name"), task_of(pod)
        if name in names and task:
            out[name] = task
    return out


def pod_backups(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """Tasks whose running primary pod (a dict) keeps upstream backups, read from its
    ``BACKSTOP_UPSTREAM_BACKUP``: the flags of the pods a rollout starts from."""
    out: set[str] = set()
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        if labels.get(LABEL_ROLE, "primary") != "primary" or not labels.get(LABEL_TASK):
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            for e in c.get("env") or []:
                if e.get("name") == "BACKSTOP_UPSTREAM_BACKUP" and e.get("value") == "true":
                    out.add(labels[LABEL_TASK])
    return out


def hold_pending(
    diff: PodDiff,
    existing: Iterable[Mapping[str, Any]],
    held: Collection[str],
    live: Collection[str],
) -> PodDiff:
    """``diff`` without the graceful replacement of the pods of ``held`` tasks (a rollout's
    pending ones keep running their old spec until their step). Only pods on ``live``
    nodes (present and Ready) are held: a pod on a lost or deleted node is the recovery's
    and goes (ended pods and pods on dead nodes are removed at once anyway)."""
    if not held:
        return diff
    deleted = set(diff.delete)
    names = {
        str(_meta(pod).get("name"))
        for pod in existing
        if task_of(pod) in held
        and _meta(pod).get("name") in deleted
        and (pod.get("spec") or {}).get("nodeName") in live
    }
    if not names:
        return diff
    return replace(
        diff,
        delete=[n for n in diff.delete if n not in names],
        create=[m for m in diff.create if m["metadata"]["name"] not in names],
    )


def begin_rollout(
    status: TopologyStatus,
    generation: int,
    pending: Iterable[str],
    old: Mapping[str, str],
    old_backups: Iterable[str],
    now: float,
) -> TopologyStatus:
    """The status that records a rollout before any of its pods is replaced."""
    rec = RolloutStatus(
        generation=generation,
        active=True,
        pending=sorted(set(pending)),
        old_assignment=dict(old),
        old_backups=sorted(old_backups),
        started_at=epoch_rfc3339(now),
        message=f"{len(set(pending))} pods to replace in steps that keep the bound",
    )
    return with_changes(status, rollout=rec)


def new_pods(
    desired: Mapping[str, Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> set[str]:
    """Tasks whose primary pod runs the desired spec (same hash, Running, not stopping)."""
    want = {
        m["metadata"]["labels"].get(LABEL_TASK): m["metadata"]["annotations"][ANN_HASH]
        for m in desired.values()
        if m["metadata"]["labels"].get(LABEL_ROLE, "primary") == "primary"
    }
    out: set[str] = set()
    for pod in pods:
        meta, task = _meta(pod), task_of(pod)
        if (
            task in want
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
            and (meta.get("annotations") or {}).get(ANN_HASH) == want[task]
        ):
            out.add(task)
    return out


def rollout_next(
    status: TopologyStatus,
    graph: TaskGraph,
    fresh: set[str],
    *,
    bound: float,
    limit: int,
    now: float,
    restart: float = 0.0,
    detection: float = 0.0,
) -> tuple[TopologyStatus | None, RolloutStepRecord | None]:
    """Advance a rollout: ``(new status or None, the step issued now or None)``.

    ``fresh`` are the tasks whose pod runs the new spec. The step in flight must have
    landed before the next is issued; tasks renewed another way (a recovery) leave
    ``pending``. The next step is planned on the state the pods are in now. ``bound`` is the
    planning bound, ``detection`` and ``restart`` what the user's bound adds to it (said in
    the message).
    """
    rec, plan = status.rollout, status.plan_or_empty
    assert rec is not None
    pending = [t for t in rec.pending if t not in fresh and t in graph._index]
    if any(t not in fresh for t in rec.batch if t in graph._index):
        if pending != rec.pending:
            return with_changes(status, rollout=rec.model_copy(update={"pending": pending})), None
        return None, None
    if not pending:
        done = rec.model_copy(
            update={
                "active": False,
                "pending": [],
                "batch": [],
                "completed_at": epoch_rfc3339(now),
                "message": f"rollout done: {sum(len(h.tasks) for h in rec.history)} pods "
                f"replaced in {rec.step} steps",
            }
        )
        return with_changes(status, rollout=done), None
    new_assignment = plan.assignment or {}
    assignment = {
        t: (new_assignment.get(t, n) if t not in pending else rec.old_assignment.get(t, n))
        for t, n in new_assignment.items()
    }
    backups = {t for t in plan.backups if t not in pending}
    backups |= {t for t in rec.old_backups if t in pending and t in graph._index}
    state = RolloutState(assignment, frozenset(backups))
    tasks, worst = next_rollout_step(graph, state, pending, bound=bound, limit=limit)
    issued = RolloutStepRecord(tasks=tasks, worst=round(worst, 6))
    rest = [t for t in pending if t not in tasks]
    new = rec.model_copy(
        update={
            "pending": rest,
            "batch": tasks,
            "step": rec.step + 1,
            "history": [*rec.history, issued],
            "message": f"step {rec.step + 1}: {len(tasks)} pods replaced, {len(rest)} left; "
            "worst single-node recovery meanwhile "
            + said(worst, detection=detection, restart=restart, bound=bound + detection + restart),
        }
    )
    return with_changes(status, rollout=new), issued
