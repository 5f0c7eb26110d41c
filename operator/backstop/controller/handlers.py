"""Kopf handlers: thin glue from StreamTopology events to planning and pods.

Run with ``backstop operator`` or ``kopf run -m backstop.controller.handlers``. Each handler
parses the spec once into the pydantic model, calls the pure planning and
manifest builders, and leaves the API calls to :mod:`backstop.k8s.kubeio`.
Permanent problems (an invalid spec, a bound no placement can keep) become a
status condition plus a Warning Event and are not retried; temporary ones
(not enough Ready nodes yet, pods still terminating, API hiccups) are retried
with ``kopf.TemporaryError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import daemon, faults, gckeeper, kopf_config, metrics
from backstop.controller import memo as topology_memo
from backstop.controller import settings as config
from backstop.controller.capacity import Placing, owner_key, plan_nodes, reserve, topology_view
from backstop.controller.context import kube, node_snapshot, post_event
from backstop.controller.fencing import publish_epochs
from backstop.controller.lifecycle import pending_of, rollout_with_plan
from backstop.domain.admission import unknown_fields
from backstop.domain.constants import (
    ANN_APPLIED,
    GROUP,
    LABEL_TOPOLOGY,
    PLURAL,
    VERSION,
    EventReason,
)
from backstop.domain.fencing import fenced_tasks
from backstop.domain.incidents import NodeInfo, for_topology, node_info
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
    build_plan_status,
    conditions_patch,
    parse_status,
    plain_status,
    pod_state,
    status_patch,
    with_changes,
    worst_vs_bound,
)
from backstop.k8s.kubeio import ClusterView, Kube
from backstop.k8s.ledger import Booking, CapacityLedger, Overcommitted, Reading, manifest_holds
from backstop.k8s.manifests import Owner, build_pdb, desired_pods, template_samples
from backstop.k8s.podfeed import PodFeed
from backstop.k8s.podrecord import slim_pod
from planners import Infeasible, InvalidTopology, PlannerError, TaskGraph
from planners.placement import Node

log = logging.getLogger("backstop.operator")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Keep Kopf's bookkeeping under our own domain; post no log lines as Events.

    Also starts the process's one capacity ledger (:mod:`backstop.k8s.ledger`),
    shared through ``memo`` by the planners of every topology, and the process's
    metrics (:mod:`backstop.controller.metrics`) unless the CLI put them there.
    """
    kopf_config.apply_kopf_settings(settings)
    daemon.executor.attach(settings)
    try:  # read the environment once, now: a bad value stops the operator at startup
        config.settings()
    except ValueError as err:
        raise kopf.PermanentError(str(err)) from None
    memo.ledger = CapacityLedger()
    memo.node_watch = topology_memo.NodeWatch()  # wakes the supervisors on a node's NotReady
    memo.pod_changes = topology_memo.PodChanges()  # lets a steady round skip its pods
    if memo.get("metrics") is None:  # `backstop operator` passes the one it serves
        memo.metrics = metrics.OperatorMetrics()
    memo.pod_feed = PodFeed(kube().api, memo.ledger).start()
    memo.gc_keeper = gckeeper.start()  # full collections on a schedule (10k pods' objects)


@kopf.on.cleanup()
def stop_feed(memo: kopf.Memo, **_: Any) -> None:
    """Stop the ledger's pod watch and the scheduled collections with the operator."""
    if memo.get("pod_feed") is not None:
        memo.pod_feed.stop()
    if memo.get("gc_keeper") is not None:
        memo.gc_keeper.set()


def _problem(body: kopf.Body, generation: int, reason: EventReason, message: str) -> Problem:
    post_event(body, reason, message, warning=True)
    return Problem(reason=reason, message=message, generation=generation)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, PLURAL)
@metrics.instrumented("reconcile")
def reconcile(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Plan backups and placement, then make the task pods match the plan."""
    assert namespace is not None  # the CRD is namespaced
    generation = int(meta.get("generation", 1))
    k = kube()
    try:
        model = config.parse_spec(dict(spec), name=name)
        graph = expand(model)
        _check_templates(k, Owner(name=name, namespace=namespace, uid=meta["uid"]), model)
    except InvalidTopology as err:
        problem = _problem(body, generation, "InvalidSpec", str(err))
        _record(k, namespace, name, generation, status, problem=problem)
        return
    _warn_unknown_fields(body, meta)
    owner = Owner(name=name, namespace=namespace, uid=meta["uid"])
    recorded = dict(plain_status(status).get("plan") or {})  # large task maps are compact
    recovering = (status.get("recovery") or {}).get("active")
    if recovering and recorded.get("generation") == generation:
        logger.info("a recovery session is running; the supervisor drives the pods")
        return
    if not memo.ledger.synced.is_set():  # the pod feed's first listing: retried soon, not in 60 s
        raise kopf.TemporaryError("the capacity ledger has not listed the pods yet", delay=2)
    pods_index = kwargs["pods_by_topology"]

    def own_pods() -> list[Mapping[str, Any]]:
        return list(pods_index.get((namespace, name), []))

    placing = Placing(k, memo.ledger, node_snapshot(kwargs["node_index"]), own_pods)
    with topology_memo.of(memo).lock:
        _reconcile(placing, body, model, graph, owner, generation, recorded, status, patch, logger)


def _check_templates(k: Kube, owner: Owner, model: StreamTopologySpec) -> None:
    """Pod templates the API server would refuse are an invalid spec, not pods retried
    forever: each templated operator's first pod is created in a dry run."""
    for i, pod in template_samples(owner, model).items():
        why = k.pod_rejection(owner.namespace, pod)
        if why is not None:
            op = model.operators[i].pod_template
            where = f"spec.operators[{i}].podTemplate" if op else "spec.podTemplate"
            if op and model.pod_template:
                where += " (merged with spec.podTemplate)"
            raise InvalidTopology(f"{where}: the API server refuses the task pod: {why}")


def _warn_unknown_fields(body: kopf.Body, meta: kopf.Meta) -> None:
    """A Warning Event naming the fields of the last ``kubectl apply`` the API server pruned."""
    dropped = unknown_fields(meta.get("annotations") or {})
    if dropped:
        message = "the API server dropped fields the schema does not know: " + ", ".join(dropped)
        post_event(body, "UnknownFields", message, warning=True)


def _reconcile(
    p: Placing,
    body: kopf.Body,
    model: StreamTopologySpec,
    graph: TaskGraph,
    owner: Owner,
    generation: int,
    recorded: dict[str, Any],
    status: kopf.Status,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    k, namespace, name = p.kube, owner.namespace, owner.name
    # from the node index, the ledger and the pod index: no LIST on the reconcile path
    view = topology_view(p.ledger, for_topology(p.nodes, model), model, owner, p.pods())
    this_spec = spec_hash(dict(body["spec"]))
    same_spec = recorded.get("generation") == generation or recorded.get("specHash") == this_spec
    # a resume keeps the recorded placement only where every node is still usable
    nodes_ok = set(view.ready) if not status.get("suspend") else view.usable_names()
    reuse = (
        same_spec
        and not status.get("problem")
        and set(recorded.get("assignment", {}).values()) <= nodes_ok
        and set(recorded.get("assignment", {})) == set(graph.tasks)
    )
    if reuse:  # resume the recorded plan (write-ahead log) instead of planning anew
        plan_status = recorded
        p.ledger.hold(
            owner_key(owner), manifest_holds(_desired(owner, model, graph, recorded), namespace)
        )
        rollout = _rollout(owner, model, graph, recorded, status, generation, view)
        if recorded.get("generation") != generation:  # only spec.reoptimization changed
            plan_status = {**recorded, "generation": generation}
            typed = PlanStatus.model_validate(plan_status)
            _record(k, namespace, name, generation, status, plan=typed, rollout=rollout)
        elif rollout != parse_status(status).status.rollout:
            _record(k, namespace, name, generation, status, rollout=rollout)
    else:
        planned = _plan(p, body, model, graph, owner, generation, recorded, status, view)
        if planned is None:
            return
        plan_status, moved, rollout = planned
        post_event(
            body,
            "Planned",
            (
                f"{plan_status['backupCount']} backups, {plan_status['nodesUsed']} nodes, "
                f"worst recovery {worst_vs_bound(plan_status['worstRecoveryLatency'], model)}, "
                f"{moved} pods move"
            ),
        )
        if not plan_status["boundSatisfied"]:
            post_event(body, "BoundViolated", "the plan does not keep the bound", warning=True)
    if model.suspend:  # the plan is recorded; the supervisor stops the pods (checkpoint first)
        logger.info("suspended: the plan is kept, no pod runs")
        return
    held = pending_of(rollout)
    _apply_plan(p, owner, model, graph, plan_status, view, status, patch, logger, held)


def _rollout(
    owner: Owner,
    model: StreamTopologySpec,
    graph: TaskGraph,
    plan_status: Mapping[str, Any],
    status: kopf.Status,
    generation: int,
    view: ClusterView,
) -> RolloutStatus | None:
    """The rollout to record with ``plan_status`` (:func:`rollout_with_plan`)."""
    desired = _desired(owner, model, graph, plan_status)
    return rollout_with_plan(status, generation, desired, view.own_pods, view.dead())


def _apply_plan(
    p: Placing,
    owner: Owner,
    model: StreamTopologySpec,
    graph: TaskGraph,
    plan_status: dict[str, Any],
    view: ClusterView,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    held: set[str],
) -> None:
    """Make the pods match a recorded plan (tasks leaving a lost node get a new epoch);
    the running pods of ``held`` tasks are a rollout's to replace, step by step."""
    k, namespace, generation = p.kube, owner.namespace, int(plan_status["generation"])
    desired = _desired(owner, model, graph, plan_status)
    dead = view.dead()
    try:
        fenced = fenced_tasks(view.own_pods, desired, dead)
        if fenced:
            rec = plain_status(status).get("recovery") or {}
            plan_status, _ = publish_epochs(k, owner, graph, plan_status, rec, fenced)
            desired = _desired(owner, model, graph, plan_status)
        live = set(view.ready) - dead
        diff = hold_pending(diff_pods(desired, view.own_pods, dead), view.own_pods, held, live)
        k.put_pdb(build_pdb(owner, len(desired)))  # evictions wait for the operator's drain
        deleted, created = k.apply_pod_diff(namespace, diff)
    except ApiException as err:
        raise kopf.TemporaryError(f"API error while applying pods: {err.reason}", delay=2) from err
    logger.info("pods: %d unchanged, %d deleted, %d created", diff.unchanged, deleted, created)
    patch.status["conditions"] = conditions_patch(
        generation,
        {**status, "plan": plan_status, "problem": None},
        [pod_state(pod) for pod in p.pods()],  # the index: the pods just written may lag
    )
    if diff.waiting:
        raise kopf.TemporaryError(f"waiting for {diff.waiting} pods to terminate", delay=1)


def _desired(
    owner: Owner, model: StreamTopologySpec, graph: TaskGraph, plan: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    return desired_pods(
        owner,
        model,
        graph,
        frozenset(plan["backups"]),
        plan["assignment"],
        plan.get("replicas"),
        plan.get("epochs"),
    )


def _plan(
    p: Placing,
    body: kopf.Body,
    model: StreamTopologySpec,
    graph: TaskGraph,
    owner: Owner,
    generation: int,
    recorded: dict[str, Any],
    status: kopf.Status,
    view: ClusterView,
) -> tuple[dict[str, Any], int, RolloutStatus | None] | None:
    """Plan on the ledger's free capacity, reserve the new pods, then record the plan
    (with the rollout of the pods it replaces, in the same write).

    The plan is made outside the booking on a snapshot and made again inside it only
    if another plan took its room meanwhile (:meth:`CapacityLedger.plan_and_book`), so
    the reconciles of a fleet plan side by side.

    Returns ``(plan status, pods moved, rollout)``, or ``None`` after recording a
    permanent problem.
    """
    namespace, name, k = owner.namespace, owner.name, p.kube
    kept = (
        (recorded["assignment"], recorded.get("backups") or [])
        if recorded.get("assignment")
        else None
    )

    def make(reading: Reading) -> tuple[TopologyPlan, dict[str, Any]] | None:
        nodes = plan_nodes(reading, p.nodes, view.nodes, model, owner)
        try:
            plan = plan_topology(
                model, graph, nodes, current=current_assignment(view.own_pods), recorded=kept
            )
        except PlannerError as err:
            _planning_failed(k, body, owner, generation, status, err, has_nodes=bool(nodes))
            return None
        return plan, _plan_status(body, model, graph, generation, recorded, plan, nodes)

    def book(booking: Booking, made: tuple[TopologyPlan, dict[str, Any]]) -> None:
        desired = _desired(owner, model, graph, made[1])
        reserve(booking, owner, desired, p.nodes, exclusive=True)

    try:
        made = p.ledger.plan_and_book(make, book)
    except Overcommitted as err:
        raise kopf.TemporaryError(f"capacity changed while planning: {err}", delay=2) from None
    if made is None:
        return None
    plan, plan_status = made
    # write-ahead: the plan is recorded before any pod is touched
    typed = PlanStatus.model_validate(plan_status)
    rollout = _rollout(owner, model, graph, plan_status, status, generation, view)
    try:
        _record(k, namespace, name, generation, status, plan=typed, problem=None, rollout=rollout)
    except kopf.TemporaryError:
        p.ledger.release(owner_key(owner))
        raise
    faults.point("after-status")
    return plan_status, plan.moved, rollout


def _plan_status(
    body: kopf.Body,
    model: StreamTopologySpec,
    graph: TaskGraph,
    generation: int,
    recorded: dict[str, Any],
    plan: TopologyPlan,
    nodes: list[Node],
) -> dict[str, Any]:
    """The status's ``plan`` for a new plan (and its replicas)."""
    replicas, availability = plan_replicas(model, graph, plan.placement.assignment, nodes)
    plan_status = build_plan_status(
        generation, graph, plan, replicas=replicas, availability=availability
    )
    plan_status["specHash"] = spec_hash(dict(body["spec"]))
    # the last good spec: while a later edit is rejected, its pods stay supervised
    plan_status["spec"] = dict(body["spec"])
    # what the operator-wide defaults resolved to (Settings.resolve), for users to read
    plan_status.update(gracePeriodSeconds=model.recovery.grace_period_seconds,
                       utilizationCap=model.recovery.utilization_cap)  # fmt: skip
    if recorded.get("epochs"):  # the copies running now keep theirs (no restart)
        plan_status["epochs"] = recorded["epochs"]
    return plan_status


def _planning_failed(
    k: Kube,
    body: kopf.Body,
    owner: Owner,
    generation: int,
    status: kopf.Status,
    err: PlannerError,
    *,
    has_nodes: bool,
) -> None:
    """Record why planning failed; raise ``kopf.TemporaryError`` when nodes may fix it.

    A bound that no placement can keep (:attr:`Infeasible.smallest_bound` set) or a
    planner refusal on usable nodes is permanent; no usable node (yet), or too few, is
    temporary: nodes come and go, so the reconcile is retried.
    """
    infeasible = isinstance(err, Infeasible)
    message = f"infeasible: {err}" if infeasible else str(err)
    problem = _problem(body, generation, "Infeasible", message)
    _record(k, owner.namespace, owner.name, generation, status, problem=problem)
    if isinstance(err, Infeasible) and err.smallest_bound is None:
        raise kopf.TemporaryError(f"infeasible on the current nodes: {err}", delay=15) from None
    if not infeasible and not has_nodes:
        raise kopf.TemporaryError(f"no usable nodes: {err}", delay=15) from None


def _record(
    k: Kube,
    namespace: str,
    name: str,
    generation: int,
    status: kopf.Status,
    **changes: Any,
) -> None:
    """Write facts to the status at once (not at the end of the handler), through the
    one merge path (:func:`backstop.domain.status.types.status_patch`)."""
    old = parse_status(status).status
    new = with_changes(old, **changes)
    conditions = conditions_patch(generation, new.dump(), [])
    new = with_changes(new, conditions=[Condition.model_validate(c) for c in conditions])
    try:
        k.patch_status(namespace, name, status_patch(old, new))
    except ApiException as err:
        raise kopf.TemporaryError(f"cannot record status: {err.reason}", delay=2) from err


@kopf.index("pods", labels={LABEL_TOPOLOGY: kopf.PRESENT})
async def pods_by_topology(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **kwargs: Any
) -> dict[tuple[str | None, str], Any]:
    """In-memory index of task pods per topology, so readiness needs no API calls.

    Each pod is kept as :func:`~backstop.k8s.podrecord.slim_pod` makes it: only the
    fields the operator reads (about 1/5 of the pod's JSON; with 10k pods the whole
    pods were about 240 MB of the operator's memory).

    ``async`` (it does not block): Kopf runs it on its event loop, not in the executor
    whose threads the reconciles and the supervise daemons hold, so a fleet's pod
    events are indexed at once instead of queueing behind up to 16 reconciles.

    Every event is counted for the supervisor's steady rounds (:class:`~.memo.PodChanges`).
    """
    key = (namespace, labels[LABEL_TOPOLOGY])
    changes = (kwargs.get("memo") or {}).get("pod_changes")
    if changes is not None:
        changes.saw(key)  # now, and once more after Kopf stored this pod
        asyncio.get_running_loop().call_soon(changes.saw, key)
    return {key: slim_pod(body)}


@kopf.index(GROUP, VERSION, PLURAL)
async def topologies(
    namespace: str | None, name: str, uid: str, **_: Any
) -> dict[tuple[str | None, str], str]:
    """The uid of every StreamTopology: a daemon whose object leaves it returns."""
    return {(namespace, name): uid}


@kopf.index("nodes")
async def node_index(name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, NodeInfo]:
    """In-memory view of every Node, for loss detection without API calls (``async``, on
    the event loop as :func:`pods_by_topology`: a NotReady is seen behind no reconcile);
    a change of readiness wakes the supervise daemons (:class:`~.memo.NodeWatch`)."""
    info = node_info(body)
    if memo.get("node_watch") is not None:
        memo.node_watch.saw(name, info.ready)
    return {name: info}


@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", ANN_APPLIED))
def apply_reoptimized(new: Any, **kwargs: Any) -> None:
    """Run the ordinary reconcile when a re-optimized plan was written to the status.

    The reconcile resumes ``status.plan`` (same generation) and moves only the
    pods whose node or role changed; its retries (pods still terminating)
    become this handler's retries.
    """
    if new:
        reconcile(**kwargs)


# registers the re-optimization daemon (after this module's handlers and the supervise daemon)
from backstop.controller import handlers_reopt  # noqa: E402,F401

kopf_config.daemons_without_finalizer(kopf.get_default_registry())
