"""Kopf handlers: thin glue from StreamTopology events to planning and pods.

Run with ``backstop operator`` or ``kopf run -m backstop.handlers``. Each handler
parses the spec once into the pydantic model, calls the pure planning and
manifest builders, and leaves the API calls to :mod:`backstop.kubeio`.
Permanent problems (an invalid spec, a bound no placement can keep) become a
status condition plus a Warning Event and are not retried; temporary ones
(not enough Ready nodes yet, pods still terminating, API hiccups) are retried
with ``kopf.TemporaryError``.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.cluster import api_client
from backstop.kubeio import Kube
from backstop.manifests import LABEL_TOPOLOGY, Owner, conditions_changed
from backstop.planning import current_assignment, desired_pods, diff_pods, plan_topology
from backstop.spec import GROUP, VERSION, cpu_cores, expand, parse_spec
from backstop.status import PodState, build_plan_status, conditions_patch, pod_state
from planners import Infeasible, InvalidTopology, PlannerError
from planners.replication import select_replicas

PLURAL = "streamtopologies"
log = logging.getLogger("backstop.operator")
_kube: Kube | None = None


def kube() -> Kube:
    """The process-wide API client (created at startup, lazily in tests)."""
    global _kube
    if _kube is None:
        _kube = Kube(api_client())
    return _kube


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep Kopf's bookkeeping under our own domain and post its logs as Events."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.loggers = True  # Kopf's per-object logs become Events
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    kube()


def _problem(body: kopf.Body, generation: int, reason: str, message: str) -> dict[str, Any]:
    kopf.warn(body, reason=reason, message=message)
    return {"reason": reason, "message": message, "generation": generation}


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, PLURAL)
def reconcile(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Plan backups and placement, then make the task pods match the plan."""
    assert namespace is not None  # the CRD is namespaced
    generation = int(meta.get("generation", 1))
    k = kube()
    try:
        model = parse_spec(dict(spec))
        graph = expand(model)
    except InvalidTopology as err:
        problem = _problem(body, generation, "InvalidSpec", str(err))
        _record(k, namespace, name, generation, {"problem": problem}, status)
        return
    owner = Owner(name=name, namespace=namespace, uid=meta["uid"])
    view = k.view(namespace, name, model.topology_key)
    recorded = dict(status.get("plan") or {})
    reuse = (
        recorded.get("generation") == generation
        and not status.get("problem")
        and set(recorded.get("assignment", {}).values()) <= set(view.node_objects)
        and set(recorded.get("assignment", {})) == set(graph.tasks)
    )
    if reuse:  # resume the recorded plan (write-ahead log) instead of planning anew
        plan_status = recorded
    else:
        try:
            plan = plan_topology(
                model, graph, view.nodes, current=current_assignment(view.own_pods)
            )
        except Infeasible as err:
            problem = _problem(body, generation, "Infeasible", f"infeasible: {err}")
            _record(k, namespace, name, generation, {"problem": problem}, status)
            if err.smallest_bound is not None or not view.nodes:
                return  # the bound itself is impossible: no retry can help
            raise kopf.TemporaryError(f"infeasible on the current nodes: {err}", delay=15) from None
        except PlannerError as err:
            problem = _problem(body, generation, "Infeasible", str(err))
            _record(k, namespace, name, generation, {"problem": problem}, status)
            return
        replicas: dict[str, tuple[str, ...]] | None = None
        availability = None
        if model.replication is not None:
            used: dict[str, float] = {}
            for t, n in plan.placement.assignment.items():
                used[n] = used.get(n, 0.0) + graph.weight[graph.index(t)]
            spare = {n.name: max(0.0, n.cpu - used.get(n.name, 0.0)) for n in view.nodes}
            rep = select_replicas(
                graph,
                plan.placement.assignment,
                spare,
                budget=cpu_cores(model.replication.spare_cpu),
                strategy=model.replication.strategy,
            )
            replicas, availability = dict(rep.replicas), rep.availability
        plan_status = build_plan_status(
            generation, graph, plan, replicas=replicas, availability=availability
        )
        # write-ahead: the plan is recorded before any pod is touched
        _record(k, namespace, name, generation, {"plan": plan_status, "problem": None}, status)
        kopf.info(
            body,
            reason="Planned",
            message=(
                f"{plan_status['backupCount']} backups, {plan_status['nodesUsed']} nodes, "
                f"worst recovery {plan_status['worstRecoveryLatency']:g}s "
                f"(bound {plan_status['bound']:g}s), {plan.moved} pods move"
            ),
        )
        if not plan_status["boundSatisfied"]:
            kopf.warn(body, reason="BoundViolated", message="the plan does not keep the bound")
    desired = desired_pods(
        owner,
        model,
        graph,
        frozenset(plan_status["backups"]),
        plan_status["assignment"],
        plan_status.get("replicas"),
    )
    diff = diff_pods(desired, view.own_pods)
    try:
        deleted, created = k.apply_pod_diff(namespace, diff)
    except ApiException as err:
        raise kopf.TemporaryError(f"API error while applying pods: {err.reason}", delay=2) from err
    logger.info("pods: %d unchanged, %d deleted, %d created", diff.unchanged, deleted, created)
    patch.status["conditions"] = conditions_patch(
        generation,
        {**status, "plan": plan_status, "problem": None},
        [pod_state(p) for p in k.own_pods(namespace, name)],
    )
    if diff.delete or diff.terminating:
        raise kopf.TemporaryError(
            f"waiting for {len(diff.delete) + len(diff.terminating)} pods to terminate", delay=1
        )


def _record(
    k: Kube,
    namespace: str,
    name: str,
    generation: int,
    fields: dict[str, Any],
    status: kopf.Status,
) -> None:
    """Write facts to the status at once (not at the end of the handler)."""
    merged = {**dict(status), **fields}
    body = {
        **fields,
        "observedGeneration": generation,
        "conditions": conditions_patch(generation, merged, []),
    }
    try:
        k.patch_status(namespace, name, body)
    except ApiException as err:
        raise kopf.TemporaryError(f"cannot record status: {err.reason}", delay=2) from err


@kopf.index("pods", labels={LABEL_TOPOLOGY: kopf.PRESENT})
def pods_by_topology(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    """In-memory index of task pods per topology, so readiness needs no API calls."""
    return {(namespace, labels[LABEL_TOPOLOGY]): body}


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=1.0, cancellation_timeout=5.0)
def readiness(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """Keep Placed/Ready (and the other derived conditions) in step with the pods.

    A daemon rather than a timer: it polls the in-memory pod index every second
    and writes only when a condition changes, without logging (and so without
    posting an Event) on every tick.
    """
    assert namespace is not None
    index: kopf.Index[tuple[str | None, str], Any] = kwargs["pods_by_topology"]
    while not stopped:
        generation = int(meta.get("generation", 1))
        pods = [_pod_state_from_body(b) for b in index.get((namespace, name), [])]
        current = list(status.get("conditions") or [])
        merged = conditions_patch(generation, dict(status), pods)
        if conditions_changed(current, merged):
            try:
                kube().patch_status(namespace, name, {"conditions": merged})
            except ApiException as err:
                if err.status == 404:
                    return
                log.warning("readiness of %s/%s: %s", namespace, name, err.reason)
        stopped.wait(1.0)


def _pod_state_from_body(body: Any) -> PodState:
    labels = body.get("metadata", {}).get("labels", {}) or {}
    return PodState(
        name=body["metadata"]["name"],
        task=labels.get("streams.backstop.dev/task", ""),
        role=labels.get("streams.backstop.dev/role", "primary"),
        phase=(body.get("status") or {}).get("phase"),
        node=(body.get("spec") or {}).get("nodeName"),
        deleting=body["metadata"].get("deletionTimestamp") is not None,
    )
