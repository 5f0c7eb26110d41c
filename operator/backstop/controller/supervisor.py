"""The per-topology supervision loop: node-loss recovery sessions and pod convergence.

One Kopf daemon per StreamTopology calls :func:`recovery_tick` and
:func:`converge` about once a second. A tick detects lost nodes (NotReady past
the grace period, or deleted), nodes that came back and new Ready nodes; on
each such trigger it asks the recovery planner for the next query-centric step
over the capacity available now, and records the step in the topology's status
*before* touching any pod (the write-ahead log). :func:`converge` then makes the
pods match the recorded plan, force-removing pods stuck on dead nodes. Because
every decision is recorded first, an operator killed at any point resumes the
session from the status without losing or duplicating a pod or a step.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import owner_key, reserve, step_capacity
from backstop.controller.fencing import publish_epochs
from backstop.controller.memo import TopologyMemo
from backstop.domain.conditions import merge_patch
from backstop.domain.constants import ANN_HASH, LABEL_TASK
from backstop.domain.fencing import fenced_tasks
from backstop.domain.incidents import (
    NodeInfo,
    detect_lost,
    epoch_rfc3339,
    session_mode,
    step_record,
)
from backstop.domain.planning import diff_pods, per_node_worst
from backstop.domain.podfaults import DRAIN_HOLD_SECONDS, drain_held, is_terminal
from backstop.domain.spec import StreamTopologySpec
from backstop.domain.status import PodState, conditions_patch, pod_failure
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import Booking, CapacityLedger, manifest_holds
from backstop.k8s.manifests import (
    Owner,
    build_recoveryplan,
    build_session_configmap,
    desired_pods,
    recoveryplan_name,
)
from planners import TaskGraph
from planners.recovery import fill_leftover, schedule_recovery

RETRY_SECONDS = 10.0
"""While tasks stay failed, re-plan at least this often (capacity may free up)."""
RECOVERY_TIME_LIMIT = 1.0
"""Planner budget per step: a plan must be out within ~2 s of its trigger."""

Emit = Callable[[str, str, bool], None]
"""``emit(reason, message, warning)`` posts an Event on the topology."""


@dataclass
class Tick:
    """Everything one supervision round works with."""

    kube: Kube
    owner: Owner
    model: StreamTopologySpec
    graph: TaskGraph
    generation: int
    status: dict[str, Any]
    nodes: dict[str, NodeInfo]
    emit: Emit
    ledger: CapacityLedger
    """The process's capacity ledger: every step plans on it and reserves before writing."""
    memory: TopologyMemo = field(default_factory=TopologyMemo)
    """The topology's memory between ticks (Kopf's per-object memo)."""


def _ordered(graph: TaskGraph, tasks: set[str] | list[str]) -> list[str]:
    return sorted(set(tasks), key=graph.index)


def recovery_tick(t: Tick, now: float | None = None) -> dict[str, Any] | None:
    """Advance the node-loss recovery session by at most one step.

    Returns
    -------
    dict or None
        The topology object as written (its new status), or ``None`` when
        nothing triggered a step.
    """
    now = time.time() if now is None else now
    plan = t.status.get("plan") or {}
    if plan.get("generation") != t.generation or "assignment" not in plan:
        return None  # the reconcile handler has not recorded a plan for this spec yet
    policy = t.model.recovery
    old_rec = t.status.get("recovery") or {}
    rec: dict[str, Any] = copy.deepcopy(dict(old_rec))
    assignment: dict[str, str] = dict(plan["assignment"])
    lost: dict[str, float] = dict(rec.get("lost") or {})
    active = bool(rec.get("active"))

    newly = detect_lost(
        set(assignment.values()), t.nodes, grace=policy.grace_period_seconds, now=now
    ) - set(lost)
    back = {n for n in lost if n in t.nodes and t.nodes[n].schedulable}
    ready = sorted(
        n for n, info in t.nodes.items() if info.schedulable and info.matches(t.model.node_selector)
    )
    if newly:
        trigger = "NodeLost"
    elif back:
        trigger = "NodeBack"
    elif active and set(ready) - set(rec.get("seenReady") or []):
        trigger = "NodeReady"
    elif active and now - float(rec.get("lastAttempt", 0)) >= RETRY_SECONDS:
        trigger = "Retry"
    else:
        return None

    if newly and not active:
        rec = {
            "session": f"s{int(now)}",
            "startedAt": epoch_rfc3339(now),
            "step": 0,
            "failed": [],
            "sessionFailed": [],
            "recovered": [],
            "lostHistory": {},
        }
    failed = set(rec.get("failed") or [])
    for node in sorted(newly):
        gone = {task for task, n in assignment.items() if n == node}
        for task in gone:
            del assignment[task]
        failed |= gone
        lost[node] = now
        rec.setdefault("lostHistory", {})[node] = now
        t.emit(
            "NodeLost",
            f"node {node} lost: {len(gone)} tasks failed ({', '.join(_ordered(t.graph, gone)[:8])}"
            f"{', …' if len(gone) > 8 else ''})",
            True,
        )
    for node in back:
        del lost[node]
    rec["sessionFailed"] = _ordered(t.graph, set(rec.get("sessionFailed") or []) | failed)

    mode = session_mode(policy, rec.get("lostHistory") or {})
    issued: dict[str, Any] | None = None
    if failed:
        with t.ledger.booking() as booking:
            usable = [n for n in ready if n not in lost]
            capacity = step_capacity(booking, t.nodes, usable, t.model, cap=policy.utilization_cap)
            step = schedule_recovery(
                t.graph,
                _ordered(t.graph, failed),
                capacity,
                algorithm=policy.algorithm,
                time_limit=RECOVERY_TIME_LIMIT,
            )
            if mode != "blocking":
                step = fill_leftover(t.graph, _ordered(t.graph, failed), capacity, step)
            go = bool(step.recover) and not (mode == "blocking" and step.pending)
            if go:  # held before the status write, so no other plan takes this room
                reserve_tasks(booking, t, plan, {**assignment, **step.recover}, step.recover)
        if go:
            rec["step"] = int(rec.get("step", 0)) + 1
            assignment.update(step.recover)
            failed -= set(step.recover)
            rec["recovered"] = _ordered(
                t.graph, set(rec.get("recovered") or []) | set(step.recover)
            )
            issued = step_record(step, number=rec["step"], trigger=trigger, at=now)
            rec["lastStep"] = issued
    rec.update(
        failed=_ordered(t.graph, failed),
        lost=lost,
        mode=mode,
        seenReady=ready,
        lastAttempt=now,
        active=bool(failed),
    )
    new_plan = dict(
        plan, assignment=dict(sorted(assignment.items(), key=lambda kv: t.graph.index(kv[0])))
    )
    completed = active or newly
    if failed:
        done = len(rec.get("recovered") or [])
        rec["message"] = (
            f"step {rec.get('step', 0)} ({mode}): {done} tasks recovered, {len(failed)} pending"
            + ("; waiting for capacity" if issued is None else "")
        )
    elif completed and rec.get("session"):
        backups = list(plan.get("backups") or [])
        worst_by_node = per_node_worst(t.graph, backups, assignment)
        worst = max(worst_by_node.values(), default=0.0)
        new_plan.update(
            worstRecoveryLatency=round(worst, 6),
            boundSatisfied=worst <= t.model.planning_bound + 1e-9,
            nodesUsed=len(set(assignment.values())),
            worstByNode={k: round(v, 6) for k, v in worst_by_node.items()},
        )
        rec["completedAt"] = epoch_rfc3339(now)
        rec["message"] = (
            f"session {rec['session']} recovered {len(rec.get('recovered') or [])} tasks in "
            f"{rec.get('step', 0)} steps; worst single-node recovery now {worst:g}s "
            f"(bound {t.model.planning_bound:g}s)"
        )
    new_status = {**t.status, "plan": new_plan, "recovery": rec}
    write = {
        "plan": merge_patch(plan, new_plan),
        "recovery": merge_patch(old_rec, rec),
        "conditions": conditions_patch(t.generation, new_status, []),
    }
    obj = t.kube.patch_status_returning(t.owner.namespace, t.owner.name, write)
    faults.point("after-status")
    if issued is not None:
        t.kube.put_recoveryplan(
            build_recoveryplan(
                t.owner,
                session=rec["session"],
                step_no=rec["step"],
                trigger=trigger,
                lost=list(lost) + list(newly - set(lost)),
                step=issued,
            ),
            "Issued",
        )
        faults.point("after-recoveryplan")
        queries = issued["recoveredQueries"]
        t.emit(
            "RecoveryPlanIssued",
            f"step {rec['step']} ({trigger}, {mode}): {len(issued['recover'])} tasks, "
            f"queries back: {', '.join(queries) or 'none yet'}; priority "
            f"{issued['recoveredPriority']:g}/{issued['failedPriority']:g}",
            False,
        )
        for task, node in list(issued["recover"].items())[:20]:
            t.emit("TaskRecovered", f"task {task} restarts on {node}", False)
    backups = list(plan.get("backups") or [])
    t.kube.put_configmap(
        build_session_configmap(t.owner, t.graph, backups, rec, epochs=plan.get("epochs"))
    )
    faults.point("after-configmap")
    if not failed and completed and rec.get("session"):
        t.emit("Recovered", rec["message"], False)
        if not new_plan.get("boundSatisfied", True):
            t.emit(
                "BoundViolated",
                f"after recovery the worst single-node failure recovers in "
                f"{new_plan['worstRecoveryLatency']:g}s > bound "
                f"{t.model.planning_bound:g}s",
                True,
            )
            # backstop.controller.restore takes over: it re-plans with the fewest moves whenever
            # usable capacity changes, and moves a few pods at a time
    return obj


def planned_pods(t: Tick, plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The pods a recorded plan (``status.plan``) asks for: one builder for converging
    to it and for checking that a restore step has landed."""
    return desired_pods(
        t.owner,
        t.model,
        t.graph,
        frozenset(plan.get("backups") or []),
        plan["assignment"],
        plan.get("replicas"),
        plan.get("epochs"),
    )


def pods_match(desired: Mapping[str, Mapping[str, Any]], bodies: list[Mapping[str, Any]]) -> bool:
    """Whether the indexed pods are exactly the desired ones (same hash, none deleting
    and none ended: a Failed or evicted pod is replaced)."""
    have: dict[str, str | None] = {}
    for b in bodies:
        meta = b.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_terminal(b):
            return False
        have[meta["name"]] = (meta.get("annotations") or {}).get(ANN_HASH)
    if set(have) != set(desired):
        return False
    return all(have[name] == m["metadata"]["annotations"][ANN_HASH] for name, m in desired.items())


def converge(
    t: Tick, indexed: list[Mapping[str, Any]], *, force_nodes: set[str]
) -> tuple[int, int, int]:
    """Make the pods match the recorded plan. Returns (deleted, created, still waiting)."""
    plan = t.status.get("plan") or {}
    if plan.get("generation") != t.generation or "assignment" not in plan:
        return 0, 0, 0
    desired = planned_pods(t, plan)
    # the recorded plan's pods count as soon as it is recorded, also after a restart
    t.ledger.hold(owner_key(t.owner), manifest_holds(desired, t.owner.namespace))
    if pods_match(desired, indexed):
        return 0, 0, 0
    existing = t.kube.own_pods(t.owner.namespace, t.owner.name)
    fenced = fenced_tasks(existing, desired, force_nodes)
    if fenced:
        plan = fence(t, plan, fenced)
        desired = planned_pods(t, plan)
    diff = diff_pods(desired, existing, force_nodes)
    held = drain_held(t.status.get("drain") or {}, time.time())
    diff.create = [m for m in diff.create if m["metadata"]["labels"].get(LABEL_TASK) not in held]
    deleted, created = t.kube.apply_pod_diff(t.owner.namespace, diff)
    return deleted, created, diff.waiting


def fence(t: Tick, plan: Mapping[str, Any], tasks: set[str]) -> dict[str, Any]:
    """:func:`publish_epochs` within a supervision round (the round sees the new status)."""
    rec = t.status.get("recovery") or {}
    new_plan, obj = publish_epochs(t.kube, t.owner, t.graph, plan, rec, tasks)
    t.status = dict(obj.get("status") or {})
    t.memory.written = (int(obj["metadata"]["resourceVersion"]), t.status)
    return new_plan


def mark_applied(t: Tick, indexed: list[Mapping[str, Any]]) -> bool:
    """Once the last step's pods run where it put them, mark its RecoveryPlan Applied."""
    rec = t.status.get("recovery") or {}
    last = rec.get("lastStep") or {}
    if not last or rec.get("appliedStep") == last.get("step"):
        return False
    running = {
        (b.get("metadata") or {}).get("labels", {}).get("streams.backstop.dev/task"): (
            b.get("spec") or {}
        ).get("nodeName")
        for b in indexed
        if (b.get("status") or {}).get("phase") == "Running"
        and (b.get("metadata") or {}).get("labels", {}).get("streams.backstop.dev/role")
        == "primary"
    }
    if any(running.get(task) != node for task, node in last["recover"].items()):
        return False
    name = recoveryplan_name(t.owner.name, rec["session"], last["step"])
    t.kube.set_recoveryplan_phase(t.owner.namespace, name, "Applied")
    faults.point("after-recoveryplan")
    t.kube.patch_status(
        t.owner.namespace, t.owner.name, {"recovery": {"appliedStep": last["step"]}}
    )
    faults.point("after-status")
    return True


def pod_states(bodies: list[Mapping[str, Any]]) -> list[PodState]:
    """:class:`PodState` of indexed pod bodies."""
    out = []
    for b in bodies:
        meta = b.get("metadata") or {}
        labels = meta.get("labels") or {}
        out.append(
            PodState(
                name=meta["name"],
                task=labels.get("streams.backstop.dev/task", ""),
                role=labels.get("streams.backstop.dev/role", "primary"),
                phase=(b.get("status") or {}).get("phase"),
                node=(b.get("spec") or {}).get("nodeName"),
                deleting=meta.get("deletionTimestamp") is not None,
                failure=pod_failure(b.get("status")),
            )
        )
    return out


DRAIN_BATCH = 3
"""Tasks moved off a cordoned node per step: a few at a time, never all at once."""


def _drain_moves(
    t: Tick,
    plan: Mapping[str, Any],
    assignment: dict[str, str],
    movable: list[str],
    ready: list[str],
) -> dict[str, str]:
    """Up to :data:`DRAIN_BATCH` moves that keep the bound, reserved on the ledger."""
    backups = list(plan.get("backups") or [])
    bound = t.model.planning_bound
    moved: dict[str, str] = {}
    with t.ledger.booking() as booking:
        cap = t.model.recovery.utilization_cap
        capacity = step_capacity(booking, t.nodes, ready, t.model, cap=cap)
        step = schedule_recovery(
            t.graph, movable, capacity, algorithm=t.model.recovery.algorithm, time_limit=1.0
        )
        step = fill_leftover(t.graph, movable, capacity, step)
        for task in sorted(step.recover, key=lambda x: movable.index(x)):
            trial = {**assignment, **moved, task: step.recover[task]}
            worst = max(per_node_worst(t.graph, backups, trial).values(), default=0.0)
            if worst <= bound + 1e-9:
                moved[task] = step.recover[task]
            if len(moved) == DRAIN_BATCH:
                break
        if moved:
            reserve_tasks(booking, t, plan, {**assignment, **moved}, moved)
    return moved


def reserve_tasks(
    booking: Booking,
    t: Tick,
    plan: Mapping[str, Any],
    assignment: Mapping[str, str],
    tasks: Collection[str],
) -> None:
    """Reserve the pods of ``tasks`` where ``assignment`` puts them (before the status write)."""
    pods = planned_pods(t, {**plan, "assignment": dict(assignment)})
    mine = {n: m for n, m in pods.items() if m["metadata"]["labels"].get(LABEL_TASK) in tasks}
    reserve(booking, t.owner, mine, t.nodes)


def drain_tick(t: Tick, indexed: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Move tasks off cordoned nodes before anything fails (planned maintenance).

    Runs only when no recovery session is active and every pod matches the
    recorded plan (the previous batch has landed). It treats the cordoned
    node's tasks like failed ones for the recovery planner, so the most
    valuable queries move first, takes at most :data:`DRAIN_BATCH` of them, and
    keeps a move only if every single-node failure still keeps the bound with
    it. The new assignment is recorded before any pod moves; converge then
    moves the pods (graceful delete, recreate on the new node).

    Returns
    -------
    dict or None
        The written object, or ``None`` when nothing is to be drained (or nothing
        can move now without breaking the bound or the capacity).
    """
    plan = t.status.get("plan") or {}
    rec = t.status.get("recovery") or {}
    restoring = (t.status.get("restore") or {}).get("active")
    if plan.get("generation") != t.generation or rec.get("active") or restoring:
        return None
    assignment: dict[str, str] = dict(plan.get("assignment") or {})
    cordoned = {n for n in set(assignment.values()) if n in t.nodes and t.nodes[n].cordoned}
    if not cordoned:
        return None
    if not pods_match(planned_pods(t, plan), indexed):
        return None  # the previous batch is still moving
    if any(
        (b.get("status") or {}).get("phase") != "Running"
        and assignment.get((b.get("metadata") or {}).get("labels", {}).get(LABEL_TASK, ""))
        not in cordoned
        for b in indexed
    ):
        return None  # ... or still starting (a pod evicted onto its cordoned node waits)
    movable = _ordered(t.graph, {task for task, n in assignment.items() if n in cordoned})
    ready = [
        n
        for n, info in t.nodes.items()
        if info.schedulable and info.matches(t.model.node_selector) and n not in cordoned
    ]
    backups = list(plan.get("backups") or [])
    bound = t.model.planning_bound
    moved = _drain_moves(t, plan, assignment, movable, ready)
    if not moved:
        return None
    assignment.update(moved)
    worst_by_node = per_node_worst(t.graph, backups, assignment)
    worst = max(worst_by_node.values(), default=0.0)
    new_plan = dict(
        plan,
        assignment=dict(sorted(assignment.items(), key=lambda kv: t.graph.index(kv[0]))),
        worstRecoveryLatency=round(worst, 6),
        boundSatisfied=worst <= bound + 1e-9,
        nodesUsed=len(set(assignment.values())),
        worstByNode={k: round(v, 6) for k, v in worst_by_node.items()},
    )
    left = [task for task, n in assignment.items() if n in cordoned]
    obj = t.kube.patch_status_returning(
        t.owner.namespace,
        t.owner.name,
        {
            "plan": merge_patch(plan, new_plan),
            "drain": {
                "nodes": sorted(cordoned),
                "moved": len(moved),
                "remaining": len(left),
                "moving": sorted(moved),
                "holdUntil": round(time.time() + DRAIN_HOLD_SECONDS, 3),
            },
        },
    )
    faults.point("after-status")
    t.emit(
        "NodeDraining",
        f"cordoned {', '.join(sorted(cordoned))}: moving "
        + ", ".join(f"{task}->{node}" for task, node in moved.items())
        + f"; {len(left)} tasks left there",
        False,
    )
    return obj
