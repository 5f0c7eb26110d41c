"""Restoring a broken bound when capacity returns: re-plan, then move a few pods at a time.

A recovery brings every task back as soon as it fits, even if the placement then
breaks the bound (availability first); a replacement node may turn Ready later. While a
topology's ``status.plan.boundSatisfied`` is false, the supervisor re-plans on every change
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

Nothing starts moving before the bound R has passed since the last node loss
(:func:`settling`): the recovered tasks are still catching up then, and a moved task
they replay from would make them wait on it again.

A restarted operator resumes from ``status.restore``, and the RecoveryPlan of the
step in progress is derived from it on every tick (:func:`restore_recoveryplan`), so
a crash between the status write and the RecoveryPlan loses nothing. Decisions are
pure (:func:`next_action`, :func:`apply_step`) on the typed status and unit-tested;
:func:`restore_tick` only reads, decides and writes through the supervisor's one
status write (resourceVersion-checked).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import plan_nodes, topology_view
from backstop.controller.tick import Tick, planned_pods, pods_match, reserve_tasks, write_status
from backstop.domain.constants import EventReason
from backstop.domain.incidents import epoch_rfc3339
from backstop.domain.recovery import plan_with_worst
from backstop.domain.spec import ApplyMode
from backstop.domain.status import (
    PlanStatus,
    RecoveryStatus,
    RestoreStatus,
    RestoreStepRecord,
    with_changes,
    worst_vs_bound,
)
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
FINISHED = frozenset({"Restored", "Consolidated", "Incomplete"})
"""Phases of a restore whose last step has landed."""


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
    plan: PlanStatus,
    restore: RestoreStatus,
    generation: int,
    *,
    consolidate: bool = False,
    settling: bool = False,
) -> str:
    """What the restore does next, from the recorded facts alone.

    ``"supersede"`` (a spec change re-planned under a running restore),
    ``"issue"`` (the next step), ``"finish"`` (every step has landed),
    ``"plan"`` (the bound is broken and no restore runs), ``"consolidate"``
    (the bound holds and ``consolidate`` allows looking for fewer nodes), or
    ``"none"`` (also while the last recovery's tasks are ``settling``: see
    :func:`settling`). The caller issues or finishes only once the previous step's
    pods run.

    Examples
    --------
    >>> P, R = PlanStatus.model_validate, RestoreStatus.model_validate
    >>> next_action(P({"boundSatisfied": False}), R({}), 1)
    'plan'
    >>> next_action(P({"boundSatisfied": True}), R({"active": True, "generation": 1,
    ...             "steps": [{}, {}], "issued": 1}), 1)
    'issue'
    >>> next_action(P({}), R({"active": True, "generation": 1, "steps": [{}], "issued": 1}), 1)
    'finish'
    >>> next_action(P({}), R({"active": True, "generation": 1}), 2)
    'supersede'
    >>> next_action(P({"boundSatisfied": True}), R({}), 1, consolidate=True)
    'consolidate'
    >>> next_action(P({"boundSatisfied": False}), R({}), 1, settling=True)
    'none'
    """
    if restore.active:
        if restore.generation != generation:
            return "supersede"
        return "issue" if restore.issued < len(restore.steps) else "finish"
    if settling:
        return "none"
    if plan.bound_satisfied is False:
        return "plan"
    return "consolidate" if consolidate else "none"


def settling(recovery: RecoveryStatus | None, bound: float, now: float) -> bool:
    """Whether the tasks of the last recovery may still be catching up: less than the
    bound R has passed since its newest node loss.

    A restore or consolidation moves running tasks, and each one moved restarts from its
    checkpoint and replays. Moving a task that recovered tasks read from while they
    catch up makes them wait on it again; the bound promises every lost task back
    within R of the failure, so nothing starts moving before R has passed.

    >>> rec = RecoveryStatus(lost_history={"n1": 100.0, "n2": 110.0})
    >>> settling(rec, 34.0, 143.9), settling(rec, 34.0, 144.0), settling(None, 34.0, 0.0)
    (True, False, False)
    """
    if recovery is None or not recovery.lost_history:
        return False
    return now - max(recovery.lost_history.values()) < bound


def restore_record(
    rp: RestorePlan,
    *,
    graph: TaskGraph,
    generation: int,
    attempts: int,
    key: str,
    now: float,
    purpose: str = RESTORE,
) -> RestoreStatus:
    """``status.restore`` for a new restore: every step, recorded before any pod moves.

    ``purpose`` is :data:`RESTORE` (the bound is broken) or :data:`CONSOLIDATE`
    (it holds, and fewer nodes would keep it).
    """
    what = "restoring the bound" if purpose == RESTORE else "consolidating onto fewer nodes"
    return RestoreStatus(
        id=f"{'r' if purpose == RESTORE else 'c'}{int(now)}",
        purpose=purpose,
        active=True,
        phase="Moving",
        generation=generation,
        attempts=attempts,
        capacity_key=key,
        started_at=epoch_rfc3339(now),
        started_epoch=now,
        moved=len(rp.moved),
        moved_tasks=sorted(rp.moved, key=graph.index),
        minimal=rp.proven,
        worst_before=round(rp.worst_before, 6),
        worst_target=round(rp.worst, 6),
        steps=[RestoreStepRecord(moves=dict(s.moves), worst=round(s.worst, 6)) for s in rp.steps],
        issued=0,
        nodes_target=len(set(rp.assignment.values())),
        message=(
            f"{what}: {len(rp.moved)} pods move in {len(rp.steps)} steps, "
            f"worst single-node recovery {rp.worst_before:g}s -> {rp.worst:g}s"
        ),
    )


def apply_step(
    graph: TaskGraph, plan: PlanStatus, moves: Mapping[str, str], bound: float
) -> PlanStatus:
    """``status.plan`` after one step's moves: assignment, per-node worst, replicas kept apart.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> p = apply_step(g, PlanStatus(assignment={"a": "n1", "b": "n1"}, backups=["a"]),
    ...                {"b": "n2"}, 1.0)
    >>> p.assignment, p.worst_recovery_latency, p.bound_satisfied, p.nodes_used
    ({'a': 'n1', 'b': 'n2'}, 1.0, True, 2)
    """
    assignment = {**(plan.assignment or {}), **moves}
    new_plan = plan_with_worst(graph, plan, assignment, bound)
    if plan.replicas:  # a replica never shares its primary's node
        kept = {
            task: [n for n in nodes if n != assignment.get(task)]
            for task, nodes in plan.replicas.items()
        }
        replicas = {task: nodes for task, nodes in kept.items() if nodes}
        new_plan = new_plan.model_copy(
            update={"replicas": replicas, "replicated": sorted(replicas)}
        )
    return new_plan


def _landed(t: Tick, plan: PlanStatus, indexed: list[Mapping[str, Any]]) -> bool:
    """Whether every pod runs where the recorded plan puts it (the last step has landed).

    The pods' spec hash covers the node, so matching hashes and phase Running
    mean every pod runs on its planned node.
    """
    desired = planned_pods(t, plan)
    running = all((b.get("status") or {}).get("phase") == "Running" for b in indexed)
    return running and pods_match(desired, indexed)


def restore_tick(t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None) -> bool:
    """Advance the restore by at most one step (see the module docstring); whether it wrote."""
    now = time.time() if now is None else now
    plan, rst = t.status.plan, t.status.restore_or_empty
    if plan is None or not plan.recorded_for(t.generation):
        return False
    if t.status.recovering() or not t.model.recovery.replan_on_violation:
        return False
    policy = t.model.reoptimization
    consolidate = policy is not None and policy.apply is ApplyMode.auto
    calm = settling(t.status.recovery, t.model.recovery_latency_bound, now)
    action = next_action(plan, rst, t.generation, consolidate=consolidate, settling=calm)
    if action == "supersede":
        update = {"active": False, "phase": "Superseded"}
        done = rst.model_copy(update={**update, "message": "a new plan replaced this restore"})
        return _write(t, plan, done)
    if action == "none" or not _landed(t, plan, indexed):
        return False
    if action == "finish":
        return _finish(t, plan, rst, now)
    with t.ledger.booking() as booking:  # plan and reserve before the status write
        if action == "issue":
            return _issue(t, booking, plan, rst)
        return _attempt(t, booking, plan, rst, now, RESTORE if action == "plan" else CONSOLIDATE)


def _write(t: Tick, new_plan: PlanStatus, rst: RestoreStatus) -> bool:
    if not write_status(t, with_changes(t.status, plan=new_plan, restore=rst)):
        return False
    faults.point("after-replan")
    return True


def _plan(t: Tick, plan: PlanStatus, purpose: str, nodes: list[Node]) -> RestorePlan | None:
    """The restore or consolidation planner on ``nodes``; ``None`` if it gains nothing.

    Raises
    ------
    Infeasible
        When no placement on this capacity restores the bound.
    """
    fn = plan_consolidation if purpose == CONSOLIDATE else plan_restore
    rp = fn(
        t.graph,
        nodes,
        plan.assignment or {},
        bound=t.model.planning_bound,
        backups=list(plan.backups),
        time_limit=RESTORE_TIME_LIMIT,
        batch=RESTORE_BATCH,
    )
    return rp if rp is not None and rp.steps else None


def _attempt(
    t: Tick, booking: Booking, plan: PlanStatus, rst: RestoreStatus, now: float, purpose: str
) -> bool:
    """Re-plan if usable capacity changed since the last attempt; start moving if it can."""
    nkey = node_key(t)
    seen = t.memory.restore_looked
    if seen is not None and seen[0] == nkey and now - seen[1] < POLL_SECONDS:
        return False
    t.memory.restore_looked = (nkey, now)
    # the node index (as the topology sees it) and the ledger: no LIST of nodes or pods
    view = topology_view(t.ledger, t.nodes, t.model, t.owner, [])
    nodes = plan_nodes(booking, t.nodes, view.nodes, t.model, t.owner)
    key = capacity_key(nodes)
    # the same capacity gives the same answer (the planners are deterministic)
    if key == (rst.capacity_key if purpose == RESTORE else t.memory.restore_no_gain):
        return False
    attempts = rst.attempts + 1
    started = time.perf_counter()
    try:
        rp = _plan(t, plan, purpose, nodes)
    except Infeasible as err:
        return _wait(t, plan, attempts, key, str(err), len(nodes))
    if rp is None and purpose == CONSOLIDATE:
        t.memory.restore_no_gain = key  # nothing to gain here: quiet, no status write
        return False
    if rp is None:  # nothing to move can restore it (the bound check disagrees): wait
        return _wait(t, plan, attempts, key, "no move restores the bound", len(nodes))
    record = restore_record(
        rp, graph=t.graph, generation=t.generation, attempts=attempts, key=key, now=now,
        purpose=purpose,
    )  # fmt: skip
    record = record.model_copy(update={"plan_seconds": round(time.perf_counter() - started, 3)})
    t.emit(
        "RestorePlanned",
        f"capacity changed: {record.message} (planned in {record.plan_seconds:g}s)"
        + ("" if rp.proven else " (fewest moves not proven within the budget)"),
        False,
    )
    return _issue(t, booking, plan, record)


def _wait(t: Tick, plan: PlanStatus, attempts: int, key: str, why: str, usable: int) -> bool:
    """Record that no placement on this capacity restores the bound; say so once per capacity."""
    waiting = RestoreStatus(
        active=False,
        phase="Waiting",
        attempts=attempts,
        capacity_key=key,
        message=f"waiting for capacity: {why}",
    )
    if not _write(t, plan, waiting):
        return False
    t.emit(
        "BoundViolated",
        f"worst single-node recovery {worst_vs_bound(plan.worst_recovery_latency or 0, t.model)}"
        f"; no placement on the {usable} usable nodes "
        "restores it yet: waiting for capacity",
        True,
    )
    return True


def restore_recoveryplan(t: Tick) -> tuple[dict[str, Any], str] | None:
    """The RecoveryPlan (and its phase) of the restore step the status records as issued.

    Derived from the status on every tick: ``worstBefore`` is the previous step's
    worst (the restore's ``worstBefore`` for the first).
    """
    rst = t.status.restore
    if rst is None or rst.id is None or not 0 < rst.issued <= len(rst.steps):
        return None
    number = rst.issued
    step = rst.steps[number - 1]
    before = rst.worst_before if number == 1 else rst.steps[number - 2].worst
    record = build_recoveryplan(
        t.owner,
        session=rst.id,
        step_no=number,
        trigger=rst.purpose,
        lost=[],
        step={
            "algorithm": "min-migration",
            "recover": step.moves,
            "pending": [task for s in rst.steps[number:] for task in s.moves],
            "recoveredQueries": [],
            "recoveredPriority": 0,
            "failedPriority": 0,
        },
    )
    record["spec"]["worstBefore"] = before
    record["spec"]["worstAfter"] = step.worst
    return record, "Applied" if rst.phase in FINISHED else "Issued"


def _issue(t: Tick, booking: Booking, plan: PlanStatus, rst: RestoreStatus) -> bool:
    """Record the next step (plan and restore state); its RecoveryPlan follows from the status."""
    number = rst.issued + 1
    step = rst.steps[number - 1]
    new_plan = apply_step(t.graph, plan, step.moves, t.model.planning_bound)
    reserve_tasks(booking, t, plan, new_plan.assignment or {}, step.moves)
    if not _write(t, new_plan, rst.model_copy(update={"issued": number})):
        return False
    if number > 1:
        _set_phase(t, rst, number - 1, "Applied")
    t.emit(
        "RestoreStep",
        f"restore step {number}/{len(rst.steps)}: "
        + ", ".join(f"{task}->{node}" for task, node in step.moves.items())
        + f"; worst single-node recovery {plan.worst_recovery_latency or 0:g}s -> "
        f"{step.worst:g}s",
        False,
    )
    return True


def _set_phase(t: Tick, rst: RestoreStatus, number: int, phase: str) -> None:
    assert rst.id is not None
    t.kube.set_recoveryplan_phase(
        t.owner.namespace, recoveryplan_name(t.owner.name, rst.id, number), phase
    )
    faults.point("after-recoveryplan")


def _finish(t: Tick, plan: PlanStatus, rst: RestoreStatus, now: float) -> bool:
    """Every step has landed: the bound holds again (the target keeps it by construction)."""
    took = now - (rst.started_epoch if rst.started_epoch is not None else now)
    worst = plan.worst_recovery_latency or 0.0
    ok = bool(plan.bound_satisfied)
    said = worst_vs_bound(worst, t.model)
    consolidated = rst.purpose == CONSOLIDATE
    moves = f"moving {rst.moved or 0} pods in {len(rst.steps)} steps"
    if not ok:
        message = f"restore ended with worst single-node recovery {said}: re-planning"
    elif consolidated:
        message = (
            f"consolidated onto {plan.nodes_used} nodes after {moves} ({took:.1f}s); "
            f"worst single-node recovery {said} at every step"
        )
    else:
        message = f"bound restored: worst single-node recovery {said} after {moves} ({took:.1f}s)"
    done = rst.model_copy(
        update={
            "active": False,
            "phase": ("Consolidated" if consolidated else "Restored") if ok else "Incomplete",
            "completed_at": epoch_rfc3339(now),
            "duration_seconds": round(took, 3),
            "message": message,
            "capacity_key": None,  # a later violation is looked at at once, whatever the capacity
        }
    )
    if not _write(t, plan, done):
        return False
    reason: EventReason = (
        ("Consolidated" if consolidated else "BoundRestored") if ok else "BoundViolated"
    )
    t.emit(reason, message, not ok)
    return True
