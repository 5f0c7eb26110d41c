"""Restoring a broken bound when capacity returns: re-plan, then move a few pods at a time.

Why this module exists: a recovery brings every task back as soon as it fits,
even if the placement then breaks the bound (availability first). Before issue
19 nothing happened afterwards: a replacement node could turn Ready and the
guarantee stayed broken until someone edited the spec. Now, while a topology's
``status.plan.boundSatisfied`` is false, the supervisor re-plans on every change
of usable capacity (a node Ready or schedulable, other pods leaving) with the
minimum-migration planner (:func:`planners.restore.plan_restore`), and moves the
tasks in small batches, each no worse than the one before, through the same
write-ahead log as everything else:

1. the whole restore (its steps) is recorded in ``status.restore`` before the
   first pod moves;
2. each step updates ``status.plan.assignment`` (converge then moves the pods)
   and writes a ``RecoveryPlan`` with trigger ``Restore``;
3. the next step is issued only once the previous one runs where it was put;
4. after the last, ``BoundRestored``.

A restarted operator resumes from ``status.restore``. Decisions are pure
(:func:`next_action`, :func:`apply_step`) and unit-tested; :func:`restore_tick`
only reads, decides and writes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import plan_nodes
from backstop.controller.supervisor import Tick, planned_pods, pods_match, reserve_tasks
from backstop.domain.conditions import merge_patch
from backstop.domain.incidents import epoch_rfc3339
from backstop.domain.planning import per_node_worst
from backstop.domain.spec import ApplyMode
from backstop.k8s.ledger import Booking
from backstop.k8s.manifests import build_recoveryplan, recoveryplan_name
from planners import Infeasible, TaskGraph
from planners.consolidate import plan_consolidation
from planners.placement import Node
from planners.restore import RESTORE_BATCH, RestorePlan, plan_restore

RESTORE_TIME_LIMIT = 2.0
"""Planner budget of one restore attempt, in nominal seconds (a deterministic work limit)."""
POLL_SECONDS = 5.0
"""While the bound is broken and no node changed, look at the pods' free CPU this often."""
RESTORE = "Restore"
"""Purpose (and RecoveryPlan ``spec.trigger``) of moves that bring a broken bound back."""
CONSOLIDATE = "Consolidate"
"""Purpose (and trigger) of moves onto fewer nodes while the bound holds (``apply: auto``)."""

_EPS = 1e-9


def node_key(t: Tick) -> str:
    """The usable nodes as the node index sees them (cheap: no API call)."""
    usable = sorted(
        f"{n}={info.cpu:g}"
        for n, info in t.nodes.items()
        if info.schedulable and info.matches(t.model.node_selector)
    )
    return ",".join(usable)


def capacity_key(nodes: Sequence[Node]) -> str:
    """A short digest of the capacity a plan would see: node names and free CPU.

    Examples
    --------
    >>> capacity_key([Node("b", 2), Node("a", 1.5)]) == capacity_key([Node("a", 1.5), Node("b", 2)])
    True
    """
    text = ",".join(f"{n.name}={n.cpu:.3f}" for n in sorted(nodes, key=lambda n: n.name))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def next_action(
    plan: Mapping[str, Any],
    restore: Mapping[str, Any],
    generation: int,
    *,
    consolidate: bool = False,
) -> str:
    """What the restore does next, from the recorded facts alone.

    ``"supersede"`` (a spec change re-planned under a running restore),
    ``"issue"`` (the next step), ``"finish"`` (every step has landed),
    ``"plan"`` (the bound is broken and no restore runs), ``"consolidate"``
    (the bound holds and ``consolidate`` allows looking for fewer nodes), or
    ``"none"``. The caller issues or finishes only once the previous step's
    pods run.

    Examples
    --------
    >>> next_action({"boundSatisfied": False}, {}, 1)
    'plan'
    >>> next_action({"boundSatisfied": True}, {"active": True, "generation": 1,
    ...             "steps": [{}, {}], "issued": 1}, 1)
    'issue'
    >>> next_action({}, {"active": True, "generation": 1, "steps": [{}], "issued": 1}, 1)
    'finish'
    >>> next_action({}, {"active": True, "generation": 1}, 2)
    'supersede'
    >>> next_action({"boundSatisfied": True}, {}, 1, consolidate=True)
    'consolidate'
    """
    if restore.get("active"):
        if restore.get("generation") != generation:
            return "supersede"
        return "issue" if restore.get("issued", 0) < len(restore.get("steps") or []) else "finish"
    if not plan.get("boundSatisfied", True):
        return "plan"
    return "consolidate" if consolidate else "none"


def restore_record(
    rp: RestorePlan,
    *,
    graph: TaskGraph,
    generation: int,
    attempts: int,
    key: str,
    now: float,
    purpose: str = RESTORE,
) -> dict[str, Any]:
    """``status.restore`` for a new restore: every step, recorded before any pod moves.

    ``purpose`` is :data:`RESTORE` (the bound is broken) or :data:`CONSOLIDATE`
    (it holds, and fewer nodes would keep it).
    """
    what = "restoring the bound" if purpose == RESTORE else "consolidating onto fewer nodes"
    return {
        "id": f"{'r' if purpose == RESTORE else 'c'}{int(now)}",
        "purpose": purpose,
        "active": True,
        "phase": "Moving",
        "generation": generation,
        "attempts": attempts,
        "capacityKey": key,
        "startedAt": epoch_rfc3339(now),
        "startedEpoch": now,
        "moved": len(rp.moved),
        "movedTasks": sorted(rp.moved, key=graph.index),
        "minimal": rp.proven,
        "worstBefore": round(rp.worst_before, 6),
        "worstTarget": round(rp.worst, 6),
        "steps": [{"moves": dict(s.moves), "worst": round(s.worst, 6)} for s in rp.steps],
        "issued": 0,
        "nodesTarget": len(set(rp.assignment.values())),
        "message": (
            f"{what}: {len(rp.moved)} pods move in {len(rp.steps)} steps, "
            f"worst single-node recovery {rp.worst_before:g}s -> {rp.worst:g}s"
        ),
    }


def apply_step(
    graph: TaskGraph, plan: Mapping[str, Any], moves: Mapping[str, str], bound: float
) -> dict[str, Any]:
    """``status.plan`` after one step's moves: assignment, per-node worst, replicas kept apart.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> p = apply_step(g, {"assignment": {"a": "n1", "b": "n1"}, "backups": ["a"]},
    ...                {"b": "n2"}, 1.0)
    >>> p["assignment"], p["worstRecoveryLatency"], p["boundSatisfied"], p["nodesUsed"]
    ({'a': 'n1', 'b': 'n2'}, 1.0, True, 2)
    """
    assignment = {**plan["assignment"], **moves}
    backups = list(plan.get("backups") or [])
    worst_by_node = per_node_worst(graph, backups, assignment)
    worst = max(worst_by_node.values(), default=0.0)
    new_plan = dict(
        plan,
        assignment=dict(sorted(assignment.items(), key=lambda kv: graph.index(kv[0]))),
        worstRecoveryLatency=round(worst, 6),
        boundSatisfied=worst <= bound + _EPS,
        nodesUsed=len(set(assignment.values())),
        worstByNode={k: round(v, 6) for k, v in worst_by_node.items()},
    )
    if plan.get("replicas"):  # a replica never shares its primary's node
        kept = {
            task: [n for n in nodes if n != assignment.get(task)]
            for task, nodes in plan["replicas"].items()
        }
        new_plan["replicas"] = {task: nodes for task, nodes in kept.items() if nodes}
        new_plan["replicated"] = sorted(new_plan["replicas"])
    return new_plan


def _landed(t: Tick, plan: Mapping[str, Any], indexed: list[Mapping[str, Any]]) -> bool:
    """Whether every pod runs where the recorded plan puts it (the last step has landed).

    The pods' spec hash covers the node, so matching hashes and phase Running
    mean every pod runs on its planned node.
    """
    desired = planned_pods(t, plan)
    running = all((b.get("status") or {}).get("phase") == "Running" for b in indexed)
    return running and pods_match(desired, indexed)


def restore_tick(
    t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None
) -> dict[str, Any] | None:
    """Advance the restore by at most one step (see the module docstring).

    Returns
    -------
    dict or None
        The topology as written, or ``None`` when nothing was written.
    """
    now = time.time() if now is None else now
    plan = t.status.get("plan") or {}
    rst = dict(t.status.get("restore") or {})
    if plan.get("generation") != t.generation or "assignment" not in plan:
        return None
    if (t.status.get("recovery") or {}).get("active") or not t.model.recovery.replan_on_violation:
        return None
    policy = t.model.reoptimization
    consolidate = policy is not None and policy.apply is ApplyMode.auto
    action = next_action(plan, rst, t.generation, consolidate=consolidate)
    if action == "supersede":
        rst.update(active=False, phase="Superseded", message="a new plan replaced this restore")
        return _write(t, plan, plan, rst)
    if action == "none" or not _landed(t, plan, indexed):
        return None
    if action == "finish":
        return _finish(t, plan, rst, now)
    with t.ledger.booking() as booking:  # plan and reserve before the status write
        if action == "issue":
            return _issue(t, booking, plan, rst)
        return _attempt(t, booking, plan, rst, now, RESTORE if action == "plan" else CONSOLIDATE)


def _write(
    t: Tick, old_plan: Mapping[str, Any], new_plan: Mapping[str, Any], rst: Mapping[str, Any]
) -> dict[str, Any]:
    old = t.status.get("restore") or {}
    obj = t.kube.patch_status_returning(
        t.owner.namespace,
        t.owner.name,
        {"plan": merge_patch(old_plan, new_plan), "restore": merge_patch(old, rst)},
    )
    faults.point("after-replan")
    return obj


def _attempt(
    t: Tick,
    booking: Booking,
    plan: Mapping[str, Any],
    rst: dict[str, Any],
    now: float,
    purpose: str,
) -> dict[str, Any] | None:
    """Re-plan if usable capacity changed since the last attempt; start moving if it can."""
    nkey = node_key(t)
    seen = t.memory.restore_looked
    if seen is not None and seen[0] == nkey and now - seen[1] < POLL_SECONDS:
        return None
    t.memory.restore_looked = (nkey, now)
    view = t.kube.view(t.owner.namespace, t.owner.name, t.model.topology_key, t.model.node_selector)
    nodes = plan_nodes(booking, t.nodes, view.nodes, t.model, t.owner)
    key = capacity_key(nodes)
    # the same capacity gives the same answer (the planners are deterministic)
    if key == (rst.get("capacityKey") if purpose == RESTORE else t.memory.restore_no_gain):
        return None
    bound = t.model.planning_bound
    backups = list(plan.get("backups") or [])
    attempts = int(rst.get("attempts", 0)) + 1
    started = time.perf_counter()
    if purpose == CONSOLIDATE:
        rp = plan_consolidation(
            t.graph,
            nodes,
            plan["assignment"],
            bound=bound,
            backups=backups,
            time_limit=RESTORE_TIME_LIMIT,
            batch=RESTORE_BATCH,
        )
        if rp is None or not rp.steps:
            t.memory.restore_no_gain = key  # nothing to gain here: quiet, no status write
            return None
    else:
        try:
            rp = plan_restore(
                t.graph,
                nodes,
                plan["assignment"],
                bound=bound,
                backups=backups,
                time_limit=RESTORE_TIME_LIMIT,
                batch=RESTORE_BATCH,
            )
        except Infeasible as err:
            return _wait(t, plan, attempts, key, str(err), len(nodes))
        if not rp.steps:  # nothing to move can restore it (the bound check disagrees): wait
            return _wait(t, plan, attempts, key, "no move restores the bound", len(nodes))
    record = restore_record(
        rp,
        graph=t.graph,
        generation=t.generation,
        attempts=attempts,
        key=key,
        now=now,
        purpose=purpose,
    )
    record["planSeconds"] = round(time.perf_counter() - started, 3)
    t.emit(
        "RestorePlanned",
        f"capacity changed: {record['message']} (planned in {record['planSeconds']:g}s)"
        + ("" if rp.proven else " (fewest moves not proven within the budget)"),
        False,
    )
    return _issue(t, booking, plan, record)


def _wait(
    t: Tick, plan: Mapping[str, Any], attempts: int, key: str, why: str, usable: int
) -> dict[str, Any]:
    """Record that no placement on this capacity restores the bound; say so once per capacity."""
    waiting = {
        "active": False,
        "phase": "Waiting",
        "attempts": attempts,
        "capacityKey": key,
        "message": f"waiting for capacity: {why}",
    }
    obj = _write(t, plan, plan, waiting)
    t.emit(
        "BoundViolated",
        f"worst single-node recovery {plan.get('worstRecoveryLatency', 0):g}s > bound "
        f"{t.model.planning_bound:g}s; no placement on the {usable} usable nodes "
        "restores it yet: waiting for capacity",
        True,
    )
    return obj


def _issue(
    t: Tick, booking: Booking, plan: Mapping[str, Any], rst: dict[str, Any]
) -> dict[str, Any]:
    """Record the next step (plan and restore state), then write its RecoveryPlan and Event."""
    number = int(rst.get("issued", 0)) + 1
    step = rst["steps"][number - 1]
    if number > 1:
        _set_phase(t, rst, number - 1, "Applied")
    new_plan = apply_step(t.graph, plan, step["moves"], t.model.planning_bound)
    reserve_tasks(booking, t, plan, new_plan["assignment"], step["moves"])
    rst = {**rst, "issued": number}
    obj = _write(t, plan, new_plan, rst)
    pending = [task for s in rst["steps"][number:] for task in s["moves"]]
    record = build_recoveryplan(
        t.owner,
        session=rst["id"],
        step_no=number,
        trigger=rst.get("purpose", RESTORE),
        lost=[],
        step={
            "algorithm": "min-migration",
            "recover": step["moves"],
            "pending": pending,
            "recoveredQueries": [],
            "recoveredPriority": 0,
            "failedPriority": 0,
        },
    )
    record["spec"]["worstBefore"] = plan.get("worstRecoveryLatency")
    record["spec"]["worstAfter"] = step["worst"]
    t.kube.put_recoveryplan(record, "Issued")
    faults.point("after-recoveryplan")
    t.emit(
        "RestoreStep",
        f"restore step {number}/{len(rst['steps'])}: "
        + ", ".join(f"{task}->{node}" for task, node in step["moves"].items())
        + f"; worst single-node recovery {plan.get('worstRecoveryLatency', 0):g}s -> "
        f"{step['worst']:g}s",
        False,
    )
    return obj


def _set_phase(t: Tick, rst: Mapping[str, Any], number: int, phase: str) -> None:
    t.kube.set_recoveryplan_phase(
        t.owner.namespace, recoveryplan_name(t.owner.name, rst["id"], number), phase
    )
    faults.point("after-recoveryplan")


def _finish(t: Tick, plan: Mapping[str, Any], rst: dict[str, Any], now: float) -> dict[str, Any]:
    """Every step has landed: the bound holds again (the target keeps it by construction)."""
    if rst.get("issued"):
        _set_phase(t, rst, int(rst["issued"]), "Applied")
    took = now - float(rst.get("startedEpoch", now))
    worst = float(plan.get("worstRecoveryLatency", 0.0))
    ok = bool(plan.get("boundSatisfied"))
    bound = t.model.planning_bound
    consolidated = rst.get("purpose") == CONSOLIDATE
    moves = f"moving {rst.get('moved', 0)} pods in {len(rst.get('steps') or [])} steps"
    if not ok:
        message = f"restore ended with worst single-node recovery {worst:g}s: re-planning"
    elif consolidated:
        message = (
            f"consolidated onto {plan.get('nodesUsed')} nodes after {moves} ({took:.1f}s); "
            f"worst single-node recovery {worst:g}s <= {bound:g}s at every step"
        )
    else:
        message = (
            f"bound restored: worst single-node recovery {worst:g}s <= {bound:g}s "
            f"after {moves} ({took:.1f}s)"
        )
    done = {
        **rst,
        "active": False,
        "phase": ("Consolidated" if consolidated else "Restored") if ok else "Incomplete",
        "completedAt": epoch_rfc3339(now),
        "durationSeconds": round(took, 3),
        "message": message,
        "capacityKey": None,  # a later violation is looked at at once, whatever the capacity
    }
    obj = _write(t, plan, plan, done)
    reason = ("Consolidated" if consolidated else "BoundRestored") if ok else "BoundViolated"
    t.emit(reason, message, not ok)
    return obj
