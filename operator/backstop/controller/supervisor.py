"""The per-topology supervision round: apply recovery Decisions, re-derive, converge.

One worker per StreamTopology (:mod:`backstop.controller.workers`) calls
:func:`supervise_once` about once a second.
The recovery state machine is pure (:func:`backstop.domain.recovery.decide`); this
module only applies what it decides, always in the same order:

1. the new status (plan and ``status.recovery``), with the resourceVersion it was
   computed from (:func:`backstop.controller.tick.write_status`); on a conflict the
   object is re-read and the decision made again;
2. the step's RecoveryPlan and the session ConfigMap, both *derived from the status*
   (:func:`ensure_session_objects`), on this tick and on every later one: a crash
   after 1. and before 2. leaves nothing lost, the next operator writes them;
3. the pods (:func:`converge`), from the recorded plan.

:mod:`backstop.controller.faults` can kill the process at each of these points; the
fault-injection tests restart it there and check that it converges.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from backstop.controller import faults
from backstop.controller.capacity import capacity_grew, owner_key, step_capacity
from backstop.controller.drain import drain_tick
from backstop.controller.lifecycle import held_tasks, rolling, rollout_tick, suspend_tick
from backstop.controller.lostpods import lost_tick
from backstop.controller.replicas import replica_tick
from backstop.controller.restore import next_action, restore_recoveryplan, restore_tick
from backstop.controller.tick import (
    Tick,
    planned_pods,
    pod_states,
    pods_match,
    reserve_tasks,
    running_primaries,
    status_wire,
    unready_reasons,
    with_conditions,
    write_status,
)
from backstop.domain import lifecycle, recovery
from backstop.domain.constants import LABEL_TASK
from backstop.domain.fencing import bump_epochs, fenced_tasks
from backstop.domain.planning import diff_pods
from backstop.domain.podfaults import drain_held
from backstop.domain.promotion import relabels
from backstop.domain.status import (
    PlanStatus,
    PodState,
    StepRecord,
    conditions_changed,
    recoveryplans,
    with_changes,
)
from backstop.k8s.apierrors import PodRefused, refusal_record
from backstop.k8s.ledger import Reading, manifest_holds
from backstop.k8s.manifests import build_recoveryplan, replica_name
from backstop.k8s.sessionmap import build_session_configmap
from planners.recovery import failed_queries

log = logging.getLogger(__name__)

Pods = Callable[[], list[Mapping[str, Any]]]
"""The topology's pods as the index holds them now."""


def recovery_tick(t: Tick, indexed: list[Mapping[str, Any]], now: float | None = None) -> bool:
    """Advance the recovery session by at most one step; whether anything was written."""
    now = time.time() if now is None else now
    clock = [time.perf_counter()]
    for _ in range(2):  # once more if the status changed under us (409)
        before = t.status
        decision = _decide(t, now)
        if decision is None:
            return False
        clock.append(time.perf_counter())
        if write_status(
            t,
            with_conditions(
                t, decision.status, pod_states(indexed, unready_reasons(t.memory, indexed))
            ),
        ):
            break
    else:
        return False
    clock.append(time.perf_counter())
    faults.point("after-status")
    ensure_session_objects(t)  # the step's RecoveryPlan first: metrics and Events can wait
    clock.append(time.perf_counter())
    grace = t.model.recovery.grace_period_seconds
    t.metrics.observe_decision(*_labels(t), before, decision, t.nodes, grace, now)
    for n in decision.notices:
        t.emit(n.reason, n.message, n.warning)
    rec = decision.status.recovery
    if decision.issued is not None:
        _log_step(t, decision.issued, now, clock)
    elif rec is not None and rec.failed:  # what it waits for, in the log as in the status
        free = ", ".join(f"{n} {c:g}" for n, c in sorted((t.memory.recovery_free or {}).items()))
        log.info("recovery of %s/%s (%s): %s wait for capacity; free CPU under the cap: %s",
                 *_labels(t), decision.trigger, ", ".join(rec.failed), free or "none")  # fmt: skip
    return True


def _log_step(t: Tick, step: StepRecord, now: float, clock: Sequence[float]) -> None:
    """Where the time of an issued step went: from the end of the grace period of the
    newest lost node (its Ready transition is stamped in whole seconds) to the tick,
    then the decision, the status write, and the RecoveryPlan and ConfigMap writes."""
    grace = t.model.recovery.grace_period_seconds
    down = [
        i.since
        for n in step.lost_nodes or []
        if (i := t.nodes.get(n)) and not i.ready and i.confirmed_lost is None
    ]
    late = f"{now - (max(down) + grace):.3f}s" if down and max(down) > 0 else "-"
    log.info(
        "recovery step %d (%s) of %s/%s: tick %s after grace, decided in %.3fs, "
        "status written in %.3fs, RecoveryPlan and ConfigMap in %.3fs",
        step.step,
        step.trigger,
        t.owner.namespace,
        t.owner.name,
        late,
        clock[-3] - clock[0],
        clock[-2] - clock[-3],
        clock[-1] - clock[-2],
    )


class _NeedsCapacity(Exception):
    """The decision reads free capacity: it is made again inside the booking."""


def _decide(t: Tick, now: float) -> recovery.Decision | None:
    """:func:`backstop.domain.recovery.decide` on the ledger's capacity; the issued step's
    pods are reserved before the status is written, so no other plan takes their room.

    The booking is taken only when the decision reads capacity or issues a step: every
    topology's daemon decides about once a second, and an urgent booking for each (100
    a second in a fleet) kept the reconciles waiting (``decide`` is pure, so a decision
    made again inside the booking is the same one, on the capacity read there).
    """

    def no_capacity(usable: Sequence[str]) -> dict[str, float]:
        raise _NeedsCapacity

    freed = _freed(t)
    try:
        quick = recovery.decide(
            t.status, t.model, t.graph, t.nodes, now, no_capacity, generation=t.generation,
            freed=freed,
        )  # fmt: skip
    except _NeedsCapacity:
        pass
    else:
        if quick is None or quick.issued is None:
            return quick
    cap = t.model.recovery.utilization_cap
    with t.ledger.booking(urgent=True) as booking:

        def capacity(usable: Sequence[str]) -> dict[str, float]:
            free = t.memory.recovery_free = step_capacity(
                booking, t.nodes, usable, t.model, cap=cap
            )
            return free

        decision = recovery.decide(
            t.status, t.model, t.graph, t.nodes, now, capacity, generation=t.generation,
            freed=freed,
        )  # fmt: skip
        if decision is not None and decision.issued is not None and t.status.plan is not None:
            assignment = decision.status.plan_or_empty.assignment or {}
            reserve_tasks(booking, t, t.status.plan, assignment, decision.issued.recover)
    return decision


def _freed(t: Tick) -> bool:
    """Whether a session waiting for capacity has more of it on its usable nodes than it
    last planned on (the ledger read without a booking), another topology's pods gone,
    say: it then tries again on this tick, not only every
    :data:`~backstop.domain.recovery.RETRY_SECONDS`."""
    rec = t.status.recovery
    if rec is None or not rec.active:
        t.memory.recovery_free = None
        return False
    usable = [n for n in recovery.usable_nodes(t.model, t.nodes) if n not in rec.lost]
    cap = t.model.recovery.utilization_cap
    free = step_capacity(Reading(t.ledger), t.nodes, usable, t.model, cap=cap)
    return capacity_grew(t.memory.recovery_free, free)


def _fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _ensure(t: Tick, key: str, obj: Any, put: Callable[[], None]) -> bool:
    """Write ``obj`` unless this process already wrote exactly it (a restart writes again)."""
    fp = _fingerprint(obj)
    if t.memory.ensured.get(key) == fp:
        return False
    put()
    t.memory.ensured[key] = fp
    return True


def _put_plan(t: Tick, manifest: dict[str, Any], phase: str) -> Callable[[], None]:
    return lambda: t.kube.put_recoveryplan(manifest, phase)


def ensure_session_objects(t: Tick) -> None:
    """Make the RecoveryPlans and the session ConfigMap what the status says they are.

    Idempotent and re-derived on every tick from the status alone, so whatever
    step a killed operator recorded, its RecoveryPlan and ConfigMap exist once the
    next one has run a tick.
    """
    rec = t.status.recovery
    wanted: list[tuple[dict[str, Any], str]] = []
    for w in recoveryplans.wanted_recovery_plans(t.status):
        lost = (
            w.step.lost_nodes if w.step.lost_nodes is not None else sorted(rec.lost if rec else {})
        )
        manifest = build_recoveryplan(
            t.owner,
            session=w.session,
            step_no=w.step.step,
            trigger=w.step.trigger,
            lost=lost,
            step=w.step.dump(),
        )
        wanted.append((manifest, w.phase))
    restoring = restore_recoveryplan(t)
    if restoring is not None:
        wanted.append(restoring)
    for manifest, phase in wanted:
        name = manifest["metadata"]["name"]
        if _ensure(t, f"rp/{name}", [manifest, phase], _put_plan(t, manifest, phase)):
            faults.point("after-recoveryplan")
    plan = t.status.plan_or_empty
    if (rec is not None and rec.session is not None) or plan.epochs:
        session = rec.dump() if rec is not None else {}
        cm = build_session_configmap(t.owner, t.graph, plan.backups, session, plan.epochs)
        if _ensure(t, "configmap", cm, lambda: t.kube.put_configmap(cm)):
            faults.point("after-configmap")


def converge(
    t: Tick, indexed: list[Mapping[str, Any]], *, force_nodes: set[str]
) -> tuple[int, int, int]:
    """Make the pods match the recorded plan. Returns (deleted, created, still waiting).

    While the namespace refuses the pods (``status.podsRefused``, recorded by the
    reconcile or by :func:`pods_refused`), no pod is created before the next attempt; pods
    created after it remove the record (also during a recovery, when the reconcile stands
    aside).
    The ``mid-pod-batch`` fault point sits inside :meth:`Kube.apply_pod_diff`.
    """
    plan = t.status.plan
    if plan is None or not plan.recorded_for(t.generation):
        return 0, 0, 0
    desired = planned_pods(t, plan)
    key = t.memory.desired[0] if t.memory.desired is not None else None
    if plan.promoted:  # a promoted replica's pod keeps its manifest: patch its role
        promoted = {replica_name(t.owner.name, task, k) for task, k in plan.promoted.items()}
        mine = {name: desired[name] for name in promoted if name in desired}
        t.kube.patch_pod_metadata(t.owner.namespace, relabels(mine, indexed))
    matched = t.memory.matched = pods_match(desired, indexed)
    if not matched or t.memory.held != key:
        # the recorded plan's pods count as soon as it is recorded, also after a restart;
        # not again every round once they all run (100 topologies' rounds held 5,000
        # pods a second and were the ledger lock's first waiters in the fleet bench)
        t.ledger.hold(owner_key(t.owner), manifest_holds(desired, t.owner.namespace))
        t.memory.held = key
    if matched:
        return 0, 0, 0
    existing = indexed  # the pod index's records: no LIST per round, no copies
    fenced = fenced_tasks(existing, desired, force_nodes)
    if fenced:  # an old copy may still run behind a partition: new epochs first
        if not fence(t, plan, fenced):
            return 0, 0, 0
        plan = t.status.plan_or_empty
        desired = planned_pods(t, plan)
    live = {n for n, info in t.nodes.items() if info.ready}
    diff = diff_pods(desired, existing, force_nodes)
    diff = lifecycle.hold_pending(diff, existing, held_tasks(t), live)
    drain = t.status.drain
    held = drain_held(drain.dump() if drain is not None else {}, time.time())
    diff.create = [m for m in diff.create if m["metadata"]["labels"].get(LABEL_TASK) not in held]
    refused = t.status.pods_refused
    if refused is not None and refused.holds(time.time()):  # the next attempt is later
        diff.create = []
    try:
        deleted, created = t.kube.apply_pod_diff(t.owner.namespace, diff)
    except PodRefused as err:  # every other call was made
        pods_refused(t, err, indexed)
        return 0, 0, diff.waiting
    if created and refused is not None:  # the namespace takes pods again
        write_status(t, with_changes(t.status, pods_refused=None))
    return deleted, created, diff.waiting


def pods_refused(t: Tick, err: PodRefused, indexed: Sequence[Mapping[str, Any]]) -> None:
    """Record that the namespace refuses the pods this round creates (for a recovery step,
    a drain's move, a rollout step, ...) as the reconcile records its own
    (:func:`~backstop.controller.reconcile.refused`): ``status.podsRefused`` with its next
    attempt, ``Ready=False`` reason ``PodsRefused`` with the API server's message, and a
    Warning Event when the refusal is new or says something new, posted once the record
    is written (on a conflict the next round tries again)."""
    rec, news = refusal_record(t.status.pods_refused, err)
    new = with_changes(t.status, pods_refused=rec)
    if not write_status(t, with_conditions(t, new, pod_states(indexed))):
        return
    if news is not None:
        t.emit("PodsRefused", news, True)
    log.warning(
        "supervision of %s/%s: the API server refuses the task pods (%s %s, attempt %d): %s",
        t.owner.namespace,
        t.owner.name,
        rec.code,
        rec.reason,
        rec.attempts,
        rec.message,
    )


def fence(t: Tick, plan: PlanStatus, tasks: set[str]) -> bool:
    """Give ``tasks`` (recreated off a lost node) a new fencing epoch: recorded in the
    status, then published in the session ConfigMap (derived from the status, like every
    tick's), before any pod is touched (:mod:`backstop.domain.fencing`)."""
    epochs = bump_epochs(plan.epochs, sorted(tasks))
    new = with_changes(t.status, plan=plan.model_copy(update={"epochs": epochs}))
    if not write_status(t, new):
        return False
    faults.point("after-status")
    ensure_session_objects(t)
    return True


def mark_applied(t: Tick, indexed: list[Mapping[str, Any]]) -> bool:
    """Once the last step's pods run where it put them, record it (its RecoveryPlan's
    phase ``Applied`` follows from the status)."""
    new = recoveryplans.mark_applied(t.status, running_primaries(indexed))
    if new is None or not write_status(t, new):
        return False
    faults.point("after-status")
    ensure_session_objects(t)
    return True


def dead_nodes(t: Tick) -> set[str]:
    """Nodes whose pods no kubelet will ever confirm gone: NotReady, or deleted."""
    dead = {n for n, info in t.nodes.items() if not info.ready}
    plan = t.status.plan_or_empty
    lost = t.status.recovery_or_empty.lost  # deleted nodes the plan no longer names too
    gone = set(plan.assignment.values() if plan.assignment else ()) | set(lost)
    return dead | {n for n in gone if n not in t.nodes}


FULL_EVERY = 30.0
"""Seconds after which a round is a whole one even on unchanged inputs: what depends on
other topologies' pods (a restore's or consolidation's capacity) is looked at again."""


DUE_SOON = 3.0
"""Seconds before a lost node's grace period ends in which rounds only decide."""


def supervise_once(t: Tick, pods: Pods) -> tuple[int, int]:
    """One supervision round (see the module docstring). Returns (deleted, created) pods.

    While the current spec is rejected (``t.fallback``) the round re-reads the
    object first, recovers and converges the last good plan, and neither drains
    nor restores. A steady round (:func:`_steady`: nothing it reads changed since a
    round that found everything settled) only asks the recovery decision, whose
    deadlines are the clock's: at 10k pods the whole round is about 0.4 CPU s, and a
    node's loss waited behind it. So does a round shortly before a NotReady node's
    grace period ends (:func:`_loss_due`).
    """
    if t.fallback:
        t.refresh()
    steady = _steady(t)
    if not steady:
        ensure_session_objects(t)
    indexed = pods()
    if not steady and suspend_tick(t, indexed):  # a suspend holds the pods: none is lost
        _write_conditions(t, pods)
        _observe(t)
        return 0, 0
    recovered = recovery_tick(t, indexed)
    if (steady or _loss_due(t, time.time())) and not recovered:
        return 0, 0
    if not recovered and not t.fallback:
        acted = lost_tick(t, indexed) or rollout_tick(t, indexed)
        if not acted and not rolling(t):  # a rollout first, then drains and restores
            _ = drain_tick(t, indexed) or restore_tick(t, indexed) or replica_tick(t)
    ensure_session_objects(t)
    deleted, created, waiting = converge(t, pods(), force_nodes=dead_nodes(t))
    mark_applied(t, pods())
    states = _write_conditions(t, pods)
    _observe(t)
    settled = not (recovered or deleted or created or waiting) and _settled(t, states)
    t.memory.steady = (t.inputs, time.monotonic()) if settled else None
    if settled:
        status_wire(t)  # the base of the next status patch, ready before a loss
    return deleted, created


def _loss_due(t: Tick, now: float) -> bool:
    """Whether a node of the plan is NotReady and its grace period ends within
    :data:`DUE_SOON` seconds: the round then only decides, so that the daemon is free to
    look again when the loss becomes one (the NotReady node's pods changed too, so the
    round is not steady, and at 10k pods a whole round under load took longer than the
    grace period left: the step came 1.1 s after it)."""
    grace = t.model.recovery.grace_period_seconds
    used = set((t.status.plan_or_empty.assignment or {}).values())
    return any(
        0 < info.since + grace - now <= DUE_SOON
        for n in used
        if (info := t.nodes.get(n)) is not None and not info.ready and info.confirmed_lost is None
    )


def _steady(t: Tick) -> bool:
    """Whether this round's inputs are those of the last whole round, which found
    everything settled, less than :data:`FULL_EVERY` seconds ago."""
    kept = t.memory.steady
    return (
        t.inputs is not None
        and kept is not None
        and kept[0] == t.inputs
        and time.monotonic() - kept[1] < FULL_EVERY
    )


def _settled(t: Tick, states: Sequence[PodState]) -> bool:
    """Whether nothing is left for a later round on the same inputs but the clock's own
    recovery deadlines: this round wrote nothing (the status version is the one its
    inputs were read at), the pods match the plan and all run without a failure, the
    plan's nodes are Ready and uncordoned, and no recovery, restore, drain or rollout is
    under way (their steps wait on time, not only on pods). A consolidation looks for
    fewer nodes when capacity changes: nodes are inputs, other topologies' pods are
    looked at again after :data:`FULL_EVERY`."""
    if t.inputs is None or t.fallback or t.resource_version != t.inputs[3]:
        return False
    plan, st = t.status.plan, t.status
    if plan is None or not plan.recorded_for(t.generation) or t.memory.matched is not True:
        return False
    if st.recovering() or st.restore_or_empty.active or st.drain is not None or rolling(t):
        return False
    if t.model.recovery.replan_on_violation and next_action(  # a broken bound: not settled
        plan, st.restore_or_empty, t.generation
    ) not in ("none", "finish"):
        return False
    used = set((plan.assignment or {}).values())
    if any((i := t.nodes.get(n)) is None or not i.ready or i.cordoned for n in used):
        return False
    return all(s.phase == "Running" and not s.deleting and not s.failure for s in states)


def _write_conditions(t: Tick, pods: Pods) -> list[PodState]:
    """Write the conditions if they changed; the pod states they were derived from."""
    indexed = pods()
    states = pod_states(indexed, unready_reasons(t.memory, indexed))
    new = with_conditions(t, t.status, states)
    before = [c.dump() for c in t.status.conditions]
    if conditions_changed(before, [c.dump() for c in new.conditions]):
        write_status(t, new)
    return states


def _observe(t: Tick) -> None:
    """The topology's recovery metrics, from the status this round ends with."""
    failed = recovery.ordered(t.graph, t.status.recovery_or_empty.failed)
    down = len(failed_queries(t.graph, failed))
    t.metrics.observe_status(*_labels(t), t.status, queries_down=down)


def _labels(t: Tick) -> tuple[str, str]:
    return t.owner.namespace, t.owner.name
