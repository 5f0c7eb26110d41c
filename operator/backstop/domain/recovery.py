"""The one node-loss recovery state machine: :func:`decide`, pure, on the typed status.

A supervision tick reads the status once (:func:`backstop.domain.status.types.parse_status`),
calls :func:`decide` with the nodes it sees, and applies the :class:`Decision` in a fixed
order: the new status first (the write-ahead log), then the step's RecoveryPlan, the
session ConfigMap, and the pods. Those last three are never "remembered" by the
controller: :func:`wanted_recovery_plans` and the session ConfigMap are re-derived from
the status on every tick, so an operator killed between any two writes converges when
it comes back (:mod:`backstop.controller.faults` kills it there in the tests).

The transitions themselves are :class:`planners.recovery.RecoverySession`'s: the
recorded plan minus the failed tasks is the session's running assignment, lost nodes
are :class:`~planners.recovery.NodesLost` events, and :meth:`RecoverySession.plan`
issues the step. What this module adds is the operator's view: grace periods and node
labels, CPU other pods hold, the session's bookkeeping in ``status.recovery``, and
edits of the spec made while a session runs (failed ids that no longer exist are
dropped instead of failing every tick).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from backstop.domain.constants import EventReason
from backstop.domain.incidents import NodeInfo, detect_lost, epoch_rfc3339, session_mode
from backstop.domain.planning import per_node_worst
from backstop.domain.promotion import promote, with_new_replicas
from backstop.domain.spec import StreamTopologySpec
from backstop.domain.status import (
    PlanStatus,
    RecoveryStatus,
    StepRecord,
    TopologyStatus,
    with_changes,
    worst_vs_bound,
)
from planners import PlannerError, TaskGraph
from planners.recovery import NodesLost, RecoverySession, RecoveryStep, fill_leftover, node_load

RETRY_SECONDS = 10.0
"""While tasks stay failed, re-plan at least this often, and at once when the controller
sees usable capacity grow (``decide(freed=True)``)."""
RECOVERY_TIME_LIMIT = 1.0
"""Planner budget per step: a plan must be out within ~2 s of its trigger."""

Trigger = Literal["NodeLost", "DataPlane", "NodeBack", "NodeReady", "Retry", "SpecChanged"]
"""Why a step was issued; ``DataPlane``: nodes lost as the operator confirmed on the data
plane (:mod:`backstop.domain.dataplane`), before their Ready condition changed."""
Capacity = Callable[[Sequence[str]], Mapping[str, float]]
"""CPU a recovery step may fill on each of the given usable nodes: the utilisation cap
applied, every pod and every reservation counted, this topology's own pods too (the
controller answers it from the capacity ledger; asked only when a step is planned)."""


@dataclass(frozen=True)
class Notice:
    """An Event to post on the topology once the status is written."""

    reason: EventReason
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Decision:
    """What one recovery tick decided, to be applied in order.

    Attributes
    ----------
    status:
        The whole new status; the controller writes ``status_patch(old, status)``
        before anything else.
    trigger:
        Why the tick acted.
    issued:
        The step issued now (its RecoveryPlan follows from ``status``), or ``None``.
    notices:
        Events to post after the write.
    """

    status: TopologyStatus
    trigger: Trigger
    issued: StepRecord | None
    notices: tuple[Notice, ...] = ()


def ordered(graph: TaskGraph, tasks: Collection[str]) -> list[str]:
    """Task ids in the graph's topological order (unknown ids left out)."""
    return sorted({t for t in tasks if t in graph._index}, key=graph.index)


def usable_nodes(spec: StreamTopologySpec, nodes: Mapping[str, NodeInfo]) -> list[str]:
    """Ready, schedulable nodes carrying the topology's node selector, by name."""
    return sorted(n for n, i in nodes.items() if i.schedulable and i.matches(spec.node_selector))


def _trigger(
    rec: RecoveryStatus,
    seen: Observed,
    nodes: Mapping[str, NodeInfo],
    now: float,
    freed: bool = False,
) -> Trigger | None:
    if seen.newly:  # all confirmed on the data plane: lost before their Ready condition says so
        return "DataPlane" if all(_confirmed(nodes, n) for n in seen.newly) else "NodeLost"
    if seen.back:
        return "NodeBack"
    if seen.dropped:
        return "SpecChanged"
    if rec.active and set(seen.ready) - set(rec.seen_ready):
        return "NodeReady"
    if rec.active and (freed or now - rec.last_attempt >= RETRY_SECONDS):
        return "Retry"
    return None


def session_over(
    graph: TaskGraph,
    spec: StreamTopologySpec,
    assignment: Mapping[str, str],
    failed: Collection[str],
    free: Mapping[str, float],
    mode: str,
) -> RecoverySession:
    """The :class:`RecoverySession` of this tick, over the capacity granted now.

    ``free`` is what a step may fill per usable node with everything counted, this
    topology's running tasks too; the session subtracts those itself
    (``capacity = node_cpu * cap - ours``), so each node enters it with
    ``node_cpu = (free + ours) / cap`` and the session's capacity is exactly ``free``.
    """
    cap = spec.recovery.utilization_cap
    ours = node_load(graph, assignment)
    node_cpu = {n: max(0.0, (c + ours.get(n, 0.0)) / cap) for n, c in free.items()}
    for n in set(assignment.values()) - set(node_cpu):  # lost or not Ready: no capacity
        node_cpu[n] = 0.0
    return RecoverySession(
        graph=graph,
        assignment=dict(assignment),
        node_cpu=node_cpu,
        failed=frozenset(failed),
        mode="blocking" if mode == "blocking" else "incremental",
        algorithm=spec.recovery.algorithm,
        utilization=cap,
        time_limit=RECOVERY_TIME_LIMIT,
    )


def next_step(session: RecoverySession, usable: Collection[str]) -> RecoveryStep | None:
    """The session's next step on the usable nodes; incremental steps also fill the
    capacity a query-centric step leaves idle (:func:`planners.recovery.fill_leftover`)."""
    live = replace(session, node_cpu={n: c for n, c in session.node_cpu.items() if n in usable})
    capacity = live.capacity()
    _, step = live.plan()
    if session.mode == "blocking":
        return step
    failed = ordered(session.graph, session.failed)
    base = step or RecoveryStep(session.algorithm, {}, tuple(failed), (), 0.0, 0.0, None)
    filled = fill_leftover(session.graph, failed, capacity, base)
    return filled if filled.recover else None


@dataclass(frozen=True)
class Observed:
    """What a tick sees before deciding: the session's view of the nodes and tasks."""

    assignment: dict[str, str]
    """The recorded plan's running tasks (ids of this spec only)."""
    known: list[str]
    """Failed tasks this spec still has and the plan does not place."""
    dropped: list[str]
    """Failed ids the spec no longer has, or the re-plan placed (an edit)."""
    newly: set[str]
    """Nodes in use lost since the last tick."""
    back: set[str]
    """Lost nodes usable again."""
    ready: list[str]
    """Usable nodes (Ready, schedulable, carrying the node selector)."""


def observe(
    status: TopologyStatus,
    spec: StreamTopologySpec,
    graph: TaskGraph,
    nodes: Mapping[str, NodeInfo],
    now: float,
) -> Observed | None:
    """The tick's :class:`Observed`, or ``None`` while no plan of this spec is recorded."""
    plan, prev = status.plan, status.recovery_or_empty
    if plan is None or plan.assignment is None:
        return None
    assignment = {t: n for t, n in plan.assignment.items() if t in graph._index}
    known = ordered(graph, [t for t in prev.failed if t not in assignment])
    in_use = set(assignment.values())
    grace = spec.recovery.grace_period_seconds
    return Observed(
        assignment=assignment,
        known=known,
        dropped=sorted(set(prev.failed) - set(known)),
        newly=detect_lost(in_use, nodes, grace=grace, now=now) - set(prev.lost),
        back={n for n in prev.lost if n in nodes and nodes[n].schedulable},
        ready=usable_nodes(spec, nodes),
    )


def next_look(
    status: TopologyStatus,
    spec: StreamTopologySpec,
    nodes: Mapping[str, NodeInfo],
    now: float,
    period: float = 1.0,
) -> float:
    """Seconds until the supervisor's next tick: ``period``, or sooner when a node the
    plan uses reaches the end of its grace period before then, so the loss is acted on
    when it becomes one and not up to a period later (the first RecoveryPlan is due
    within 1 s of detection).

    Examples
    --------
    >>> plan = PlanStatus(assignment={"a-0": "n1", "a-1": "n2"})
    >>> spec = StreamTopologySpec.model_validate({"image": "i", "recoveryLatencyBound": 1,
    ...     "recovery": {"gracePeriodSeconds": 2},
    ...     "operators": [{"name": "a", "parallelism": 2, "reprocessingLatency": 1}]})
    >>> down = {"n1": NodeInfo("n1", False, 100.0, 4, False, False)}
    >>> round(next_look(TopologyStatus(plan=plan), spec, down, now=101.7), 3)
    0.3
    >>> next_look(TopologyStatus(plan=plan), spec, down, now=102.5)  # already lost
    1.0
    >>> next_look(TopologyStatus(plan=plan), spec, {}, now=101.7)
    1.0
    """
    assignment = status.plan.assignment if status.plan is not None else None
    grace = spec.recovery.grace_period_seconds
    due = [
        info.since + grace - now
        for n in set((assignment or {}).values())
        if (info := nodes.get(n)) is not None and not info.ready and info.confirmed_lost is None
    ]
    return min([period, *(d for d in due if d > 0)])


def decide(
    status: TopologyStatus,
    spec: StreamTopologySpec,
    graph: TaskGraph,
    nodes: Mapping[str, NodeInfo],
    now: float,
    capacity: Capacity,
    *,
    generation: int,
    freed: bool = False,
) -> Decision | None:
    """Advance the recovery session by at most one step; ``None`` when nothing happened.

    Pure: the same status, spec, nodes, time and capacity give the same Decision.
    A planner error (e.g. an algorithm an older CRD let through) is recorded in
    ``status.recovery.message`` and retried, never raised. ``freed``: the usable nodes
    have more free capacity than when the session last tried, so a session waiting for
    capacity tries again now (``Retry``), not :data:`RETRY_SECONDS` after its last try.
    """
    plan, prev = status.plan, status.recovery_or_empty
    seen = observe(status, spec, graph, nodes, now)
    if plan is None or seen is None or not plan.recorded_for(generation):
        return None  # the reconcile handler has not recorded a plan for this spec yet
    trigger = _trigger(prev, seen, nodes, now, freed)
    if trigger is None:
        return None
    rec = prev
    if seen.newly and not prev.active:
        rec = RecoveryStatus(session=f"s{int(now)}", started_at=epoch_rfc3339(now), lost=prev.lost)
    history = {**rec.lost_history, **{n: now for n in seen.newly}}
    mode = session_mode(spec.recovery, history)
    lost = {n: t for n, t in rec.lost.items() if n not in seen.back}
    lost.update({n: now for n in seen.newly})
    usable = [n for n in seen.ready if n not in lost]
    plan, seen, promoted = _promote(plan, seen, usable)  # those tasks are not lost
    needs_plan = bool(seen.known) or any(n in seen.newly for n in seen.assignment.values())
    free = capacity(usable) if needs_plan else {}
    session = session_over(graph, spec, seen.assignment, seen.known, free, mode)
    session = session.apply(NodesLost(tuple(sorted(seen.newly & set(session.node_cpu)))))
    notices = _loss_notices(graph, seen, {n for n in seen.newly if _confirmed(nodes, n)}) + promoted
    rec = rec.model_copy(
        update={
            "lost_history": history,
            "lost": lost,
            "mode": mode,
            "seen_ready": seen.ready,
            "last_attempt": now,
            "session_failed": ordered(graph, set(rec.session_failed) | session.failed),
        }
    )
    session, rec, issued, more = _plan_step(session, rec, usable, trigger, now)
    notices.extend(more)
    failed = ordered(graph, session.failed)
    rec = rec.model_copy(update={"failed": failed, "active": bool(failed)})
    new_plan = plan.model_copy(update={"assignment": _in_order(graph, session.assignment)})
    if failed:
        waiting = "; waiting for capacity" if issued is None else ""
        progress = f"step {rec.step} ({mode}): {len(rec.recovered)} tasks recovered, "
        if rec.message is None:  # else: why planning failed
            rec = rec.model_copy(update={"message": progress + f"{len(failed)} pending" + waiting})
    else:  # nothing pending: replicas for promoted tasks, where CPU is free now
        new_plan = _replenish(graph, new_plan, capacity, usable, issued)
    if not failed and (prev.active or seen.newly or seen.dropped) and rec.session:
        new_plan, rec, done = _completed(graph, spec, new_plan, rec, now)
        notices.extend(done)
    new_status = with_changes(status, plan=new_plan, recovery=rec)
    return Decision(status=new_status, trigger=trigger, issued=issued, notices=tuple(notices))


def _promote(
    plan: PlanStatus, seen: Observed, usable: Collection[str]
) -> tuple[PlanStatus, Observed, list[Notice]]:
    """Promote the replicas of the tasks on newly lost nodes
    (:func:`backstop.domain.promotion.promote`): those tasks are then not lost."""
    plan, moved = promote(plan, seen.newly, usable)
    notices = [
        Notice("ReplicaPromoted", f"task {task}: its replica on {node} is its primary now")
        for task, node in sorted(moved.items())
    ]
    return plan, replace(seen, assignment={**seen.assignment, **moved}), notices


def _replenish(
    graph: TaskGraph,
    plan: PlanStatus,
    capacity: Capacity,
    usable: Sequence[str],
    issued: StepRecord | None,
) -> PlanStatus:
    """A new replica for each promoted task left without one, on what the session's
    last step left free (:func:`backstop.domain.promotion.with_new_replicas`)."""
    if not plan.promoted:
        return plan
    placed = issued.recover if issued is not None else {}
    return with_new_replicas(graph, plan, capacity(usable), placed)


def _confirmed(nodes: Mapping[str, NodeInfo], node: str) -> bool:
    """Whether ``node`` is lost by the operator's data-plane confirmation."""
    info = nodes.get(node)
    return info is not None and info.confirmed_lost is not None


def _loss_notices(graph: TaskGraph, seen: Observed, confirmed: Collection[str]) -> list[Notice]:
    notices: list[Notice] = []
    if seen.dropped:
        text = (
            f"the spec changed: {len(seen.dropped)} failed tasks no longer exist or were re-placed"
        )
        notices.append(Notice("Planned", text))
    for n in sorted(seen.newly):
        gone = ordered(graph, [t for t, m in seen.assignment.items() if m == n])
        more = ", …" if len(gone) > 8 else ""
        how = " (confirmed on the data plane)" if n in confirmed else ""
        text = f"node {n} lost{how}: {len(gone)} tasks failed ({', '.join(gone[:8])}{more})"
        notices.append(Notice("NodeLost", text, True))
    return notices


def _plan_step(
    session: RecoverySession, rec: RecoveryStatus, usable: list[str], trigger: Trigger, now: float
) -> tuple[RecoverySession, RecoveryStatus, StepRecord | None, list[Notice]]:
    """The session's next step, recorded in ``rec``; a planner error becomes its message
    (with one Warning when the message is new) instead of an exception."""
    try:
        step = next_step(session, usable) if session.failed else None
    except PlannerError as err:
        message = f"recovery planning failed: {err}"
        notices = [] if rec.message == message else [Notice("Infeasible", message, True)]
        return session, rec.model_copy(update={"message": message}), None, notices
    if step is None:
        return session, rec.model_copy(update={"message": None}), None, []
    number = rec.step + 1
    issued = StepRecord(
        step=number,
        trigger=trigger,
        at=epoch_rfc3339(now),
        algorithm=step.algorithm,
        recover=dict(step.recover),
        pending=list(step.pending),
        recovered_queries=list(step.recovered_queries),
        recovered_priority=step.recovered_priority,
        failed_priority=step.failed_priority,
        lost_nodes=sorted(rec.lost),
    )
    session = replace(
        session,
        assignment={**session.assignment, **step.recover},
        failed=session.failed - set(step.recover),
    )
    rec = rec.model_copy(
        update={
            "step": number,
            "last_step": issued,
            "recovered": ordered(session.graph, set(rec.recovered) | set(step.recover)),
            "message": None,
        }
    )
    return session, rec, issued, _issued_notices(issued, rec.mode or "")


def _in_order(graph: TaskGraph, assignment: Mapping[str, str]) -> dict[str, str]:
    return dict(sorted(assignment.items(), key=lambda kv: graph.index(kv[0])))


def _issued_notices(issued: StepRecord, mode: str) -> list[Notice]:
    queries = ", ".join(issued.recovered_queries) or "none yet"
    out = [
        Notice(
            "RecoveryPlanIssued",
            f"step {issued.step} ({issued.trigger}, {mode}): {len(issued.recover)} tasks, "
            f"queries back: {queries}; priority "
            f"{issued.recovered_priority:g}/{issued.failed_priority:g}",
        )
    ]
    for task, node in list(issued.recover.items())[:20]:
        out.append(Notice("TaskRecovered", f"task {task} restarts on {node}"))
    return out


def plan_with_worst(
    graph: TaskGraph, plan: PlanStatus, assignment: Mapping[str, str], bound: float
) -> PlanStatus:
    """``plan`` over ``assignment`` with the per-node worst recovery re-checked (evaluator)."""
    worst_by_node = per_node_worst(graph, list(plan.backups), assignment)
    worst = max(worst_by_node.values(), default=0.0)
    return plan.model_copy(
        update={
            "assignment": _in_order(graph, assignment),
            "worst_recovery_latency": round(worst, 6),
            "bound_satisfied": worst <= bound + 1e-9,
            "nodes_used": len(set(assignment.values())),
            "worst_by_node": {k: round(v, 6) for k, v in worst_by_node.items()},
        }
    )


def _completed(
    graph: TaskGraph, spec: StreamTopologySpec, plan: PlanStatus, rec: RecoveryStatus, now: float
) -> tuple[PlanStatus, RecoveryStatus, list[Notice]]:
    """The session is over: re-check the bound on the placement recovery left."""
    bound = spec.planning_bound
    plan = plan_with_worst(graph, plan, plan.assignment or {}, bound)
    worst = plan.worst_recovery_latency or 0.0
    message = (
        f"session {rec.session} recovered {len(rec.recovered)} tasks in {rec.step} steps; "
        f"worst single-node recovery at its end {worst_vs_bound(worst, spec)}"
    )
    rec = rec.model_copy(update={"completed_at": epoch_rfc3339(now), "message": message})
    notices = [Notice("Recovered", message)]
    if not plan.bound_satisfied:
        # backstop.controller.restore takes over: it re-plans with the fewest moves
        # whenever usable capacity changes, and moves a few pods at a time
        notices.append(
            Notice(
                "BoundViolated",
                "after recovery the worst single-node failure recovers in "
                + worst_vs_bound(worst, spec),
                True,
            )
        )
    return plan, rec, notices
