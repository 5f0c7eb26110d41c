"""Lost task pods: evicted by a node that takes no pods any more, or never scheduled.

The node-loss recovery (:func:`backstop.controller.supervisor.recovery_tick`) reacts to
nodes; this tick reacts to single pods whose task cannot run where the plan puts it
(:func:`backstop.domain.podfaults.lost_tasks`): the kubelet evicted it for node
pressure, or the scheduler has found no room for it for longer than a short grace.
Such a task is lost like a failed one: the recovery planner puts it on the capacity
left on the *other* nodes (most valuable queries first), the new assignment is recorded
in ``status.plan`` before any pod moves, and converge then replaces the pod. A task
that fits nowhere yet stays lost (its pod is not counted as running) and is tried again
next round. Terminal pods on healthy nodes are simply recreated in place by converge.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import step_capacity
from backstop.controller.supervisor import RECOVERY_TIME_LIMIT, Tick, reserve_tasks
from backstop.domain.conditions import merge_patch
from backstop.domain.planning import per_node_worst
from backstop.domain.podfaults import lost_tasks
from planners.recovery import fill_leftover, schedule_recovery


def plan_summary(t: Tick, plan: Mapping[str, Any], assignment: dict[str, str]) -> dict[str, Any]:
    """``plan`` with a new assignment and its per-node worst recovery re-evaluated."""
    worst_by_node = per_node_worst(t.graph, list(plan.get("backups") or []), assignment)
    worst = max(worst_by_node.values(), default=0.0)
    return dict(
        plan,
        assignment=dict(sorted(assignment.items(), key=lambda kv: t.graph.index(kv[0]))),
        worstRecoveryLatency=round(worst, 6),
        boundSatisfied=worst <= t.model.planning_bound + 1e-9,
        nodesUsed=len(set(assignment.values())),
        worstByNode={k: round(v, 6) for k, v in worst_by_node.items()},
    )


def lost_tick(
    t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None
) -> dict[str, Any] | None:
    """Re-place the tasks whose pods are lost; returns the written object or ``None``.

    Runs only while no recovery session or restore is active (they own the plan then;
    a lost pod waits for them to finish).
    """
    now = time.time() if now is None else now
    plan = t.status.get("plan") or {}
    if plan.get("generation") != t.generation or "assignment" not in plan:
        return None
    if (t.status.get("recovery") or {}).get("active") or (t.status.get("restore") or {}).get(
        "active"
    ):
        return None
    assignment: dict[str, str] = dict(plan["assignment"])
    lost = lost_tasks(indexed, assignment, t.nodes, now=now)
    if not lost:
        return None
    bad = {assignment[task] for task in lost}
    ready = [
        n
        for n, info in t.nodes.items()
        if info.schedulable and info.matches(t.model.node_selector) and n not in bad
    ]
    policy = t.model.recovery
    movable = sorted(lost, key=t.graph.index)
    with t.ledger.booking() as booking:
        capacity = step_capacity(booking, t.nodes, ready, t.model, cap=policy.utilization_cap)
        step = schedule_recovery(
            t.graph, movable, capacity, algorithm=policy.algorithm, time_limit=RECOVERY_TIME_LIMIT
        )
        step = fill_leftover(t.graph, movable, capacity, step)
        if not step.recover:
            return None  # no room elsewhere yet: tried again next round
        # held before the status write, so no other plan takes this room
        reserve_tasks(booking, t, plan, {**assignment, **step.recover}, step.recover)
    assignment.update(step.recover)
    new_plan = plan_summary(t, plan, assignment)
    obj = t.kube.patch_status_returning(
        t.owner.namespace, t.owner.name, {"plan": merge_patch(plan, new_plan)}
    )
    faults.point("after-status")
    for task, node in step.recover.items():
        t.emit("TaskLost", f"task {task} lost ({lost[task]}): restarts on {node}", True)
    return obj
