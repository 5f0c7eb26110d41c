"""Moving tasks off cordoned nodes before anything fails (planned maintenance)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import step_capacity
from backstop.controller.tick import Tick, planned_pods, pods_match, reserve_tasks, write_status
from backstop.domain.constants import LABEL_TASK
from backstop.domain.planning import per_node_worst
from backstop.domain.podfaults import DRAIN_HOLD_SECONDS
from backstop.domain.recovery import ordered, plan_with_worst, usable_nodes
from backstop.domain.status import DrainStatus, PlanStatus, with_changes
from backstop.k8s.topologyobjects import build_pdb
from planners.recovery import fill_leftover, schedule_recovery

DRAIN_BATCH = 3
"""Tasks moved off a cordoned node per step: a few at a time, never all at once."""
BLOCKED_EVERY = 300.0
"""Seconds between two ``DrainBlocked`` Events about the same blocked drain."""


def drain_moves(
    t: Tick, plan: PlanStatus, assignment: Mapping[str, str], cordoned: set[str]
) -> dict[str, str]:
    """Up to :data:`DRAIN_BATCH` moves off ``cordoned`` nodes that keep the bound, reserved
    on the ledger. The cordoned nodes' tasks are treated like failed ones by the recovery
    planner, so the most valuable queries move first."""
    movable = ordered(t.graph, [task for task, n in assignment.items() if n in cordoned])
    ready = [n for n in usable_nodes(t.model, t.nodes) if n not in cordoned]
    moved: dict[str, str] = {}
    with t.ledger.booking() as booking:
        cap = t.model.recovery.utilization_cap
        capacity = step_capacity(booking, t.nodes, ready, t.model, cap=cap)
        step = schedule_recovery(
            t.graph, movable, capacity, algorithm=t.model.recovery.algorithm, time_limit=1.0
        )
        step = fill_leftover(t.graph, movable, capacity, step)
        for task in sorted(step.recover, key=movable.index):
            trial = {**assignment, **moved, task: step.recover[task]}
            worst = max(per_node_worst(t.graph, plan.backups, trial).values(), default=0.0)
            if worst <= t.model.planning_bound + 1e-9:
                moved[task] = step.recover[task]
            if len(moved) == DRAIN_BATCH:
                break
        if moved:
            reserve_tasks(booking, t, plan, {**assignment, **moved}, moved)
    return moved


def _settled(
    indexed: list[Mapping[str, Any]], assignment: Mapping[str, str], cordoned: set[str]
) -> bool:
    """Every pod runs, except those evicted onto their cordoned node (they wait there)."""
    for b in indexed:
        task = ((b.get("metadata") or {}).get("labels") or {}).get(LABEL_TASK, "")
        if (b.get("status") or {}).get("phase") != "Running" and assignment.get(
            task
        ) not in cordoned:
            return False
    return True


def blocked(t: Tick, cordoned: set[str], left: list[str], now: float | None = None) -> None:
    """Say why a drain does not go on: no task left on the cordoned nodes can move without
    breaking the bound, so ``kubectl drain`` (a node upgrade, the autoscaler) waits on the
    topology's PodDisruptionBudget. A Warning Event names the nodes, the tasks and the
    ways out; it is repeated only when they change or every :data:`BLOCKED_EVERY` s."""
    now = time.time() if now is None else now
    key = ",".join(sorted(cordoned)) + ":" + ",".join(sorted(left))
    told = t.memory.drain_blocked
    if told is not None and told[0] == key and now - told[1] < BLOCKED_EVERY:
        return
    t.memory.drain_blocked = (key, now)
    names = ", ".join(sorted(left)[:8]) + (", …" if len(left) > 8 else "")
    t.emit(
        "DrainBlocked",
        f"cordoned {', '.join(sorted(cordoned))}: {len(left)} tasks ({names}) cannot move "
        "off without breaking the recovery bound (no other node has room for them), so "
        f"evictions wait on the PodDisruptionBudget {t.owner.name}. Add capacity (or "
        "uncordon), or let the evictions through (spec.recovery.drainTimeoutSeconds, or "
        "delete that budget): the evicted tasks then stop until they run again, and the "
        "bound is broken meanwhile",
        True,
    )


def release_due(
    since: tuple[str, float] | None, nodes: str, now: float, timeout: float | None
) -> tuple[tuple[str, float], bool]:
    """When the drain of ``nodes`` has been blocked since (kept from tick to tick), and
    whether ``timeout`` (``spec.recovery.drainTimeoutSeconds``) has passed.

    >>> since, due = release_due(None, "n1", 100.0, 60.0)
    >>> since, due
    (('n1', 100.0), False)
    >>> release_due(since, "n1", 170.0, 60.0)[1], release_due(since, "n1", 170.0, None)[1]
    (True, False)
    >>> release_due(since, "n1,n2", 170.0, 60.0)  # other nodes: blocked from now on
    (('n1,n2', 170.0), False)
    """
    if since is None or since[0] != nodes:
        since = (nodes, now)
    return since, timeout is not None and now - since[1] >= timeout


def release(t: Tick, cordoned: set[str], left: list[str], now: float | None = None) -> None:
    """Let the evictions of a drain blocked for ``drainTimeoutSeconds`` through: the
    budget then counts every pod but those of the ``left`` tasks (on the cordoned nodes).
    Said once with a Warning Event; :func:`unrelease` puts the whole budget back."""
    now = time.time() if now is None else now
    nodes = ",".join(sorted(cordoned))
    since, due = release_due(
        t.memory.drain_blocked_since, nodes, now, t.model.recovery.drain_timeout_seconds
    )
    t.memory.drain_blocked_since = since
    if not due or t.memory.drain_released:
        return
    plan = t.status.plan_or_empty
    pods = planned_pods(t, plan)
    mine = [n for n, m in pods.items() if m["metadata"]["labels"].get(LABEL_TASK) in set(left)]
    t.kube.put_pdb(build_pdb(t.owner, len(pods) - len(mine)))
    t.memory.drain_released = True
    t.emit(
        "DrainReleased",
        f"cordoned {nodes}: blocked for {now - since[1]:.0f}s (drainTimeoutSeconds): the "
        f"PodDisruptionBudget {t.owner.name} lets the {len(mine)} pods of "
        f"{len(left)} tasks there be evicted; they stop until they run again",
        True,
    )


def unrelease(t: Tick) -> None:
    """The drain is over (or unblocked): the budget counts every pod again."""
    t.memory.drain_blocked_since = None
    if t.memory.drain_released:
        t.kube.put_pdb(build_pdb(t.owner, len(planned_pods(t, t.status.plan_or_empty))))
        t.memory.drain_released = False


def drain_tick(t: Tick, indexed: list[Mapping[str, Any]]) -> bool:
    """Move a batch of tasks off cordoned nodes; whether anything was written.

    Runs only when no recovery session or restore is active and every pod matches
    the recorded plan and runs (the previous batch has landed). The new
    assignment is recorded before any pod moves; converge then moves the pods
    (graceful delete, recreate on the new node after :data:`DRAIN_HOLD_SECONDS`).
    """
    plan = t.status.plan
    if plan is None or not plan.recorded_for(t.generation) or t.status.recovering():
        return False
    if t.status.restore_or_empty.active:
        return False
    assignment = dict(plan.assignment or {})
    cordoned = {n for n in set(assignment.values()) if n in t.nodes and t.nodes[n].cordoned}
    if not cordoned:
        unrelease(t)
    if not cordoned or not pods_match(planned_pods(t, plan), indexed):
        return False  # nothing to drain, or the previous batch is still moving
    if not _settled(indexed, assignment, cordoned):
        return False  # ... or still starting
    moved = drain_moves(t, plan, assignment, cordoned)
    if not moved:
        left = [task for task, n in assignment.items() if n in cordoned]
        blocked(t, cordoned, left)
        release(t, cordoned, left)
        return False
    t.memory.drain_blocked_since = None
    assignment.update(moved)
    new_plan = plan_with_worst(t.graph, plan, assignment, t.model.planning_bound)
    left = [task for task, n in assignment.items() if n in cordoned]
    drain = DrainStatus(
        nodes=sorted(cordoned),
        moved=len(moved),
        remaining=len(left),
        moving=sorted(moved),
        hold_until=round(time.time() + DRAIN_HOLD_SECONDS, 3),
    )
    if not write_status(t, with_changes(t.status, plan=new_plan, drain=drain)):
        return False
    faults.point("after-status")
    t.emit(
        "NodeDraining",
        f"cordoned {', '.join(sorted(cordoned))}: moving "
        + ", ".join(f"{task}->{node}" for task, node in moved.items())
        + f"; {len(left)} tasks left there",
        False,
    )
    return True
