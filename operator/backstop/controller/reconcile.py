"""The reconcile of a StreamTopology's spec: validate, observe, reconcile.

:mod:`backstop.controller.handlers` hands Kopf's arguments over as a :class:`Request`;
:func:`reconcile` runs three steps around one context object, :class:`Reconcile`:

1. **validate**: parse the spec into the pydantic model, expand its task graph and
   dry-run the pod templates; an invalid spec is a status problem plus a Warning Event
   and is not retried;
2. **observe**: from the node index, the capacity ledger and the pod index, the
   topology's view of the cluster (no LIST on the reconcile path), next to the recorded
   plan of the typed status the context parses once;
3. **reconcile**: resume the recorded plan (the write-ahead log) or plan anew on the
   ledger's free capacity, record it before any pod is touched, then make the pods match.

Temporary problems (not enough Ready nodes yet, pods still terminating, API hiccups) are
retried with ``kopf.TemporaryError``. Task pods the namespace refuses (403: Pod Security
admission, a ResourceQuota, a missing ServiceAccount) are recorded in ``status.podsRefused``
(``Ready=False``, reason ``PodsRefused``) with a Warning Event, and retried with a growing
delay until pods are created again. The supervise daemon
(:mod:`backstop.controller.supervisor`) records a refusal of the pods it creates the same
way, and works the same way around its own context, :class:`~backstop.controller.tick.Tick`;
both take the topology's lock in its memo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import faults
from backstop.controller import memo as topology_memo
from backstop.controller import settings as config
from backstop.controller.capacity import Placing, owner_key, plan_nodes, reserve, topology_view
from backstop.controller.context import node_snapshot
from backstop.controller.fencing import publish_epochs
from backstop.controller.lifecycle import pending_of, rollout_with_plan
from backstop.controller.specchecks import check_templates, check_wiring, spec_warnings
from backstop.domain.constants import EventReason
from backstop.domain.fencing import fenced_tasks
from backstop.domain.incidents import for_topology
from backstop.domain.lifecycle import hold_pending
from backstop.domain.planning import (
    TopologyPlan,
    current_assignment,
    diff_pods,
    plan_replicas,
    plan_topology,
)
from backstop.domain.spec import StreamTopologySpec, expand, spec_hash
from backstop.domain.status import (
    Condition,
    PlanStatus,
    Problem,
    RolloutStatus,
    TopologyStatus,
    build_plan_status,
    conditions_patch,
    parse_status,
    plain_status,
    pod_state,
    status_patch,
    with_changes,
    worst_vs_bound,
)
from backstop.k8s.apierrors import PodRefused, refusal_record
from backstop.k8s.kubeio import ClusterView, Kube
from backstop.k8s.ledger import Booking, Overcommitted, Reading, manifest_holds
from backstop.k8s.manifests import Owner, build_pdb, desired_pods
from backstop.k8s.peerpush import peers_token
from backstop.k8s.specstore import build_spec_configmap
from planners import Infeasible, InvalidTopology, PlannerError, TaskGraph
from planners.placement import Node

Emit = Callable[[EventReason, str, bool], None]
"""``emit(reason, message, warning)`` posts an Event on the topology."""
Logger = logging.Logger | logging.LoggerAdapter[Any]


@dataclass(frozen=True)
class Request:
    """What Kopf hands a reconcile (the handler's arguments), and how it reaches the API."""

    kube: Kube
    emit: Emit
    body: kopf.Body
    spec: kopf.Spec
    meta: kopf.Meta
    status: kopf.Status
    name: str
    namespace: str
    patch: kopf.Patch
    logger: Logger
    memo: kopf.Memo
    pods_index: Any
    """Kopf's ``pods_by_topology`` index."""
    node_index: Any
    """Kopf's ``node_index`` index."""


@dataclass
class Reconcile:
    """Everything one reconcile works with; the steps fill it in, in order.

    ``status`` is the typed status as Kopf passed it, parsed once; every write goes
    from it through the one merge path (:func:`record`).
    """

    kube: Kube
    emit: Emit
    body: kopf.Body
    owner: Owner
    generation: int
    raw: Mapping[str, Any]
    """The status as Kopf passed it, its compact task lists and maps decoded."""
    status: TopologyStatus
    patch: kopf.Patch
    logger: Logger
    model: StreamTopologySpec = field(init=False)
    """The parsed spec (validate)."""
    graph: TaskGraph = field(init=False)
    """Its task graph (validate)."""
    placing: Placing = field(init=False)
    """The API gateway, the ledger, the node index and the pod index (observe)."""
    view: ClusterView = field(init=False)
    """The topology's view of the cluster (observe, under the topology's lock)."""
    _desired: tuple[tuple[object, ...], dict[str, dict[str, Any]]] | None = None

    @property
    def recorded(self) -> PlanStatus:
        """The recorded plan (``status.plan``; empty before the first one)."""
        return self.status.plan_or_empty

    def desired(self, plan: PlanStatus) -> dict[str, dict[str, Any]]:
        """The task pods ``plan`` asks for, built once for as long as the plan's backups,
        assignment, replicas, epochs and promotions are the same objects (a reconcile reads them
        three or four times; a new plan or new epochs build them again)."""
        key = (plan.backups, plan.assignment, plan.replicas, plan.epochs, plan.promoted)
        kept = self._desired
        if kept is not None and all(a is b for a, b in zip(kept[0], key, strict=True)):
            return kept[1]
        pods = desired_pods(
            self.owner,
            self.model,
            self.graph,
            frozenset(plan.backups),
            plan.assignment or {},
            plan.replicas,
            plan.epochs,
            promoted=plan.promoted,
        )
        self._desired = (key, pods)
        return pods

    def problem(self, reason: EventReason, message: str) -> Problem:
        """A problem of this generation, posted as a Warning Event."""
        self.emit(reason, message, True)
        return Problem(reason=reason, message=message, generation=self.generation)


def reconcile(req: Request) -> None:
    """Plan backups and placement, then make the task pods match the plan."""
    ctx = Reconcile(
        kube=req.kube,
        emit=req.emit,
        body=req.body,
        owner=Owner(name=req.name, namespace=req.namespace, uid=req.meta["uid"]),
        generation=int(req.meta.get("generation", 1)),
        raw=plain_status(req.status),
        status=parse_status(req.status).status,
        patch=req.patch,
        logger=req.logger,
    )
    try:
        _run(ctx, req)
    except PodRefused as err:
        refused(ctx, err)


def _run(ctx: Reconcile, req: Request) -> None:
    """The three steps of :func:`reconcile` on its context."""
    if not validate(ctx, req.spec):
        return
    _warn_spec(ctx, req.meta)
    if ctx.status.recovering() and ctx.recorded.generation == ctx.generation:
        ctx.logger.info("a recovery session is running; the supervisor drives the pods")
        return
    ledger = req.memo.ledger
    if not ledger.synced.is_set():  # the pod feed's first listing: retried soon, not in 60 s
        raise kopf.TemporaryError("the capacity ledger has not listed the pods yet", delay=2)
    pods_index, key = req.pods_index, (ctx.owner.namespace, ctx.owner.name)

    def own_pods() -> list[Mapping[str, Any]]:
        return list(pods_index.get(key, []))

    ctx.placing = Placing(ctx.kube, ledger, node_snapshot(req.node_index), own_pods)
    mem = topology_memo.of(req.memo)
    if mem.peers_token is None:  # the pods read it from the Secret: made before them
        mem.peers_token = _peers_token(ctx)
    with mem.lock:
        observe(ctx)
        converge(ctx)


def _peers_token(ctx: Reconcile) -> str:
    """The topology's peer token, its Secret created first if there is none
    (:func:`backstop.k8s.peerpush.peers_token`): a task pod does not start without it."""
    try:
        return peers_token(ctx.kube.core, ctx.owner)
    except ApiException as err:
        why = f"cannot read or create the peer token's Secret: {err.status} {err.reason}"
        raise kopf.TemporaryError(why, delay=5) from err


# ---- validate ----------------------------------------------------------------------------


def validate(ctx: Reconcile, spec: Mapping[str, Any]) -> bool:
    """Parse and expand the spec into ``ctx``; an invalid one is recorded as a problem
    (and ``False`` returned): retrying cannot fix it, a new spec can."""
    try:
        ctx.model = config.parse_spec(dict(spec), name=ctx.owner.name)
        ctx.graph = expand(ctx.model)
        new_spec = ctx.recorded.spec_hash != spec_hash(dict(spec))
        if new_spec:
            check_wiring(ctx.kube, ctx.owner, ctx.model, ctx.recorded)
        check_templates(ctx.kube, ctx.owner, ctx.model, every=new_spec)
    except InvalidTopology as err:
        record(ctx, problem=ctx.problem("InvalidSpec", str(err)))
        return False
    except PodRefused:
        raise  # the namespace refuses the pods: recorded by the caller (refused)
    except ApiException as err:
        raise kopf.TemporaryError(f"API error in the pods' dry run: {err.reason}", delay=2) from err
    return True


def _warn_spec(ctx: Reconcile, meta: kopf.Meta) -> None:
    """Warning Events about a valid spec (:func:`~backstop.controller.specchecks.spec_warnings`)."""
    for reason, message in spec_warnings(meta, ctx.model):
        ctx.emit(reason, message, True)


# ---- observe -----------------------------------------------------------------------------


def observe(ctx: Reconcile) -> None:
    """The topology's view of the cluster, from the node index, the ledger and the pod
    index: no LIST on the reconcile path."""
    p = ctx.placing
    nodes = for_topology(p.nodes, ctx.model)
    ctx.view = topology_view(p.ledger, nodes, ctx.model, ctx.owner, p.pods())


def reusable(ctx: Reconcile) -> bool:
    """Whether the recorded plan is resumed (the write-ahead log) instead of planning anew:
    it is of this spec and, on a resume, every node it uses is still usable."""
    rec, status = ctx.recorded, ctx.status
    this_spec = spec_hash(dict(ctx.body["spec"]))
    same_spec = rec.generation == ctx.generation or rec.spec_hash == this_spec
    # a resume keeps the recorded placement only where every node is still usable
    nodes_ok = set(ctx.view.ready) if status.suspend is None else ctx.view.usable_names()
    assignment = rec.assignment or {}
    return (
        same_spec
        and status.problem is None
        and set(assignment.values()) <= nodes_ok
        and set(assignment) == set(ctx.graph.tasks)
    )


# ---- reconcile ---------------------------------------------------------------------------


def converge(ctx: Reconcile) -> None:
    """Resume the recorded plan or plan anew, then make the pods match it (unless the
    topology is suspended: the supervisor stops its pods, checkpoint first)."""
    if reusable(ctx):
        plan, rollout = _resume(ctx)
    else:
        planned = plan_anew(ctx)
        if planned is None:
            return
        plan, moved, rollout = planned
        _announce(ctx, plan, moved)
    if ctx.model.suspend:  # the plan is recorded; the supervisor stops the pods
        ctx.logger.info("suspended: the plan is kept, no pod runs")
        return
    apply_plan(ctx, plan, pending_of(rollout))


def _resume(ctx: Reconcile) -> tuple[PlanStatus, RolloutStatus | None]:
    """Resume the recorded plan: hold its pods on the ledger and record what changed
    (its generation, when only ``spec.reoptimization`` changed; the rollout; a status of
    an older operator loses its copy of the spec, stored in the spec ConfigMap first)."""
    rec, generation = ctx.recorded, ctx.generation
    p = ctx.placing
    p.ledger.hold(owner_key(ctx.owner), manifest_holds(ctx.desired(rec), ctx.owner.namespace))
    rollout = _rollout(ctx, rec)
    hashed = rec.spec_hash
    if rec.spec is not None:  # the status's own copy (older operators): moved out
        hashed = hashed or spec_hash(rec.spec)
        keep_spec(ctx, rec.spec, hashed)
    # a new generation here changed only what planning ignores (spec_hash)
    if rec.generation != generation or rec.spec is not None:
        plan = rec.model_copy(update={"generation": generation, "spec": None, "spec_hash": hashed})
        record(ctx, plan=plan, rollout=rollout)
        return plan, rollout
    if rollout != ctx.status.rollout:
        record(ctx, rollout=rollout)
    return rec, rollout


def _announce(ctx: Reconcile, plan: PlanStatus, moved: int) -> None:
    """The ``Planned`` Event of a new plan, and ``BoundViolated`` when it misses the bound."""
    worst = worst_vs_bound(plan.worst_recovery_latency or 0.0, ctx.model)
    ctx.emit(
        "Planned",
        f"{plan.backup_count} backups, {plan.nodes_used} nodes, "
        f"worst recovery {worst}, {moved} pods move",
        False,
    )
    if not plan.bound_satisfied:
        ctx.emit("BoundViolated", "the plan does not keep the bound", True)


def _rollout(ctx: Reconcile, plan: PlanStatus) -> RolloutStatus | None:
    """The rollout to record with ``plan`` (:func:`rollout_with_plan`)."""
    view = ctx.view
    return rollout_with_plan(
        ctx.status, ctx.generation, ctx.desired(plan), view.own_pods, view.dead()
    )


def apply_plan(ctx: Reconcile, plan: PlanStatus, held: set[str]) -> None:
    """Make the pods match a recorded plan (tasks leaving a lost node get a new epoch);
    the running pods of ``held`` tasks are a rollout's to replace, step by step."""
    k, owner, view = ctx.kube, ctx.owner, ctx.view
    desired = ctx.desired(plan)
    dead = view.dead()
    try:
        fenced = fenced_tasks(view.own_pods, desired, dead)
        if fenced:
            rec = ctx.raw.get("recovery") or {}
            plan, _ = publish_epochs(k, owner, ctx.graph, plan, rec, fenced)
            desired = ctx.desired(plan)
        live = set(view.ready) - dead
        diff = hold_pending(diff_pods(desired, view.own_pods, dead), view.own_pods, held, live)
        k.put_pdb(build_pdb(owner, len(desired)))  # evictions wait for the operator's drain
        deleted, created = k.apply_pod_diff(owner.namespace, diff)
    except PodRefused:
        raise  # recorded by the reconcile's caller (refused)
    except ApiException as err:
        raise kopf.TemporaryError(f"API error while applying pods: {err.reason}", delay=2) from err
    ctx.logger.info("pods: %d unchanged, %d deleted, %d created", diff.unchanged, deleted, created)
    if ctx.status.pods_refused is not None:  # the pods are created again
        record(ctx, pods_refused=None)
    ctx.patch.status["conditions"] = conditions_patch(
        ctx.generation,
        with_changes(ctx.status, plan=plan, problem=None, pods_refused=None),
        [pod_state(pod) for pod in ctx.placing.pods()],  # the index: new pods may lag
    )
    if diff.waiting:
        raise kopf.TemporaryError(f"waiting for {diff.waiting} pods to terminate", delay=1)


def refused(ctx: Reconcile, err: PodRefused) -> NoReturn:
    """Record that the namespace refuses the task pods (``status.podsRefused``), post a
    Warning Event when the refusal is new or says something new, and retry later: each
    attempt doubles the delay (:func:`~backstop.k8s.apierrors.refusal_record`), as only a
    change of the namespace (its Pod Security level, quota or ServiceAccount) helps. The
    supervise daemon creates no pod before that attempt either (``retryAt``), and records
    a refusal of its own creations the same way."""
    rec, news = refusal_record(ctx.status.pods_refused, err)
    if news is not None:
        ctx.emit("PodsRefused", news, True)
    record(ctx, pods_refused=rec)
    delay = rec.retry_delay()
    why = f"the API server refuses the task pods ({rec.code}); retried in {delay:.0f}s"
    raise kopf.TemporaryError(why, delay=delay) from err


def plan_anew(ctx: Reconcile) -> tuple[PlanStatus, int, RolloutStatus | None] | None:
    """Plan on the ledger's free capacity, reserve the new pods, then record the plan
    (with the rollout of the pods it replaces, in the same write).

    The plan is made outside the booking on a snapshot and made again inside it only
    if another plan took its room meanwhile (:meth:`CapacityLedger.plan_and_book`), so
    the reconciles of a fleet plan side by side.

    Returns ``(plan status, pods moved, rollout)``, or ``None`` after recording a
    permanent problem.
    """
    p, owner, model, graph, view = ctx.placing, ctx.owner, ctx.model, ctx.graph, ctx.view
    rec = ctx.recorded
    kept = (rec.assignment, rec.backups) if rec.assignment else None

    def make(reading: Reading) -> tuple[TopologyPlan, PlanStatus] | None:
        nodes = plan_nodes(reading, p.nodes, view.nodes, model, owner)
        try:
            made = plan_topology(
                model, graph, nodes, current=current_assignment(view.own_pods), recorded=kept
            )
        except PlannerError as err:
            _planning_failed(ctx, err, has_nodes=bool(nodes))
            return None
        return made, _plan_status(ctx, made, nodes)

    def book(booking: Booking, made: tuple[TopologyPlan, PlanStatus]) -> None:
        reserve(booking, owner, ctx.desired(made[1]), p.nodes, exclusive=True)

    try:
        made = p.ledger.plan_and_book(make, book)
    except Overcommitted as err:
        raise kopf.TemporaryError(f"capacity changed while planning: {err}", delay=2) from None
    if made is None:
        return None
    topology_plan, plan_status = made
    # write-ahead: the plan is recorded before any pod is touched
    rollout = _rollout(ctx, plan_status)
    try:
        keep_spec(ctx, ctx.body["spec"], plan_status.spec_hash or "")
        record(ctx, plan=plan_status, problem=None, rollout=rollout)
    except kopf.TemporaryError:
        p.ledger.release(owner_key(owner))
        raise
    faults.point("after-status")
    return plan_status, topology_plan.moved, rollout


def _plan_status(ctx: Reconcile, plan: TopologyPlan, nodes: list[Node]) -> PlanStatus:
    """The status's ``plan`` for a new plan (and its replicas)."""
    model, graph, recorded = ctx.model, ctx.graph, ctx.recorded
    replicas, availability = plan_replicas(model, graph, plan.placement.assignment, nodes)
    plan_status = build_plan_status(
        ctx.generation, graph, plan, replicas=replicas, availability=availability
    )
    # names the last good spec (its content is in the spec ConfigMap, :func:`keep_spec`)
    plan_status["specHash"] = spec_hash(dict(ctx.body["spec"]))
    # what the operator-wide defaults resolved to (Settings.resolve), for users to read
    plan_status.update(gracePeriodSeconds=model.recovery.grace_period_seconds,
                       utilizationCap=model.recovery.utilization_cap)  # fmt: skip
    if recorded.epochs:  # the copies running now keep theirs (no restart)
        plan_status["epochs"] = recorded.epochs
    if recorded.promoted:  # a promoted primary stays in its pod (no restart)
        plan_status["promoted"] = {t: k for t, k in recorded.promoted.items() if t in graph._index}
    return PlanStatus.model_validate(plan_status)


def _planning_failed(ctx: Reconcile, err: PlannerError, *, has_nodes: bool) -> None:
    """Record why planning failed; raise ``kopf.TemporaryError`` when nodes may fix it.

    A bound that no placement can keep (:attr:`Infeasible.smallest_bound` set) or a
    planner refusal on usable nodes is permanent; no usable node (yet), or too few, is
    temporary: nodes come and go, so the reconcile is retried.
    """
    infeasible = isinstance(err, Infeasible)
    message = f"infeasible: {err}" if infeasible else str(err)
    record(ctx, problem=ctx.problem("Infeasible", message))
    if isinstance(err, Infeasible) and err.smallest_bound is None:
        raise kopf.TemporaryError(f"infeasible on the current nodes: {err}", delay=15) from None
    if not infeasible and not has_nodes:
        raise kopf.TemporaryError(f"no usable nodes: {err}", delay=15) from None


def keep_spec(ctx: Reconcile, spec: Mapping[str, Any], hashed: str) -> None:
    """Store the spec a plan is recorded for in the topology's spec ConfigMap, before
    the plan (:mod:`backstop.k8s.specstore`): the supervisor follows it while a later
    edit is rejected, and the status names it by its hash only.

    An API hiccup is retried; a refusal (a quota on ConfigMaps, a forbidden write) only
    costs that fallback, so the plan is recorded and run all the same, with a warning.
    """
    try:
        ctx.kube.put_configmap(build_spec_configmap(ctx.owner, spec, hashed))
    except ApiException as err:
        if err.status in (403, 413, 422):
            ctx.logger.warning("the spec ConfigMap is refused (%s): %s", err.status, err.reason)
            return
        raise kopf.TemporaryError(f"cannot store the spec: {err.reason}", delay=2) from err


def record(ctx: Reconcile, **changes: Any) -> None:
    """Write facts to the status at once (not at the end of the handler), through the
    one merge path (:func:`backstop.domain.status.types.status_patch`), from the status
    Kopf passed (each write patches from it, as the API server merges key by key)."""
    old = ctx.status
    new = with_changes(old, **changes)
    conditions = conditions_patch(ctx.generation, new, [])
    new = with_changes(new, conditions=[Condition.model_validate(c) for c in conditions])
    try:
        ctx.kube.patch_status(ctx.owner.namespace, ctx.owner.name, status_patch(old, new))
    except ApiException as err:
        raise kopf.TemporaryError(f"cannot record status: {err.reason}", delay=2) from err
