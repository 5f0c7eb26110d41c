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
from backstop.controller.tick import Tick, reserve_tasks, write_status
from backstop.domain.podfaults import lost_tasks
from backstop.domain.recovery import RECOVERY_TIME_LIMIT, plan_with_worst, usable_nodes
from backstop.domain.status import with_changes
from planners.recovery import fill_leftover, schedule_recovery


def lost_tick(t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None) -> bool:
    """Re-place the tasks whose pods are lost; whether anything was written.

    Runs only while no recovery session or restore is active (they own the plan then;
    a lost pod waits for them to finish).
    """
    now = time.time() if now is None else now
    plan = t.status.plan
    if plan is None or not plan.recorded_for(t.generation):
        return False
    if t.status.recovering() or t.status.restore_or_empty.active:
        return False
    assignment = dict(plan.assignment or {})
    lost = lost_tasks(indexed, assignment, t.nodes, now=now)
    if not lost:
        return False
    bad = {assignment[task] for task in lost}
    ready = [n for n in usable_nodes(t.model, t.nodes) if n not in bad]
    policy = t.model.recovery
    movable = sorted(lost, key=t.graph.index)
    with t.ledger.booking(urgent=True) as booking:
        capacity = step_capacity(booking, t.nodes, ready, t.model, cap=policy.utilization_cap)
        step = schedule_recovery(
            t.graph, movable, capacity, algorithm=policy.algorithm, time_limit=RECOVERY_TIME_LIMIT
        )
        step = fill_leftover(t.graph, movable, capacity, step)
        if not step.recover:
            return False  # no room elsewhere yet: tried again next round
        # held before the status write, so no other plan takes this room
        reserve_tasks(booking, t, plan, {**assignment, **step.recover}, step.recover)
    assignment.update(step.recover)
    new_plan = plan_with_worst(t.graph, plan, assignment, t.model.planning_bound)
    if not write_status(t, with_changes(t.status, plan=new_plan)):
        return False
    faults.point("after-status")
    for task, node in step.recover.items():
        t.emit("TaskLost", f"task {task} lost ({lost[task]}): restarts on {node}", True)
    return True
