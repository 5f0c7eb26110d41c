"""The supervisor: one loop per topology, about once a second, applying the recovery
state machine's decisions (:func:`backstop.controller.supervisor.supervise_once`).

:mod:`backstop.controller.handlers` lists it among each topology's workers
(:mod:`backstop.controller.workers`: a thread of its own per topology). It is apart from
the reconcile of spec changes (:mod:`backstop.controller.reconcile`) because the two run
on different triggers: the reconcile on events of the object, this loop on time and on the node and
pod indexes. Both take the topology's lock in its Kopf memo
(:mod:`backstop.controller.memo`), so they never interleave.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import memo as topology_memo
from backstop.controller import settings as config
from backstop.controller.context import gone, kube, node_snapshot, post_event
from backstop.controller.supervisor import supervise_once
from backstop.controller.tick import Tick
from backstop.controller.workers import Stopped
from backstop.domain.constants import EventReason
from backstop.domain.dataplane import with_confirmed
from backstop.domain.incidents import for_topology
from backstop.domain.recovery import next_look
from backstop.domain.spec import StreamTopologySpec, expand
from backstop.domain.status import PlanStatus, TopologyStatus, parse_status
from backstop.domain.status.recoveryplans import last_good_generation
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner
from backstop.k8s.specstore import plan_spec
from planners import InvalidTopology, PlannerError, TaskGraph


def _model(
    mem: topology_memo.TopologyMemo,
    generation: int,
    spec: Mapping[str, Any],
    keep: Collection[int] = (),
) -> tuple[StreamTopologySpec, TaskGraph] | None:
    if generation not in mem.parsed:
        try:
            model = config.parse_spec(dict(spec))
        except InvalidTopology:
            return None
        # only the current generation (and the last good one, ``keep``) is asked for again
        mem.parsed = {g: v for g, v in mem.parsed.items() if g in keep}
        mem.parsed[generation] = (model, expand(model))
    return mem.parsed[generation]


def _fresh_status(
    mem: topology_memo.TopologyMemo, meta: kopf.Meta, status: kopf.Status
) -> tuple[dict[str, Any], str | None]:
    """The newest status we know and its resourceVersion: the watched one, or what we
    wrote if that is newer (the watch may lag behind our own writes)."""
    seen = meta.get("resourceVersion")
    rv, written = mem.written
    if rv > int(seen or 0):
        return dict(written), str(rv)
    return dict(status), seen


def _target(
    mem: topology_memo.TopologyMemo,
    generation: int,
    spec: Mapping[str, Any],
    st: TopologyStatus,
    last_good: Callable[[PlanStatus], Mapping[str, Any] | None],
) -> tuple[StreamTopologySpec, TaskGraph, int, bool] | None:
    """The spec the pods follow: the current one, or while an edit is rejected (invalid,
    or a problem recorded for it) the last good plan's, which ``last_good`` reads (once
    per generation: the model is kept).

    Returns (model, graph, generation, fallback), or ``None`` when there is neither.
    """
    followed = last_good_generation(st, generation)
    keep = {generation} | ({followed} if followed is not None else set())
    parsed = _model(mem, generation, spec, keep)
    rejected = st.problem is not None and st.problem.generation == generation
    if (parsed is None or rejected) and followed is not None and st.plan is not None:
        good_spec = {} if followed in mem.parsed else last_good(st.plan)
        good = _model(mem, followed, good_spec, keep) if good_spec is not None else None
        if good is not None:
            return good[0], good[1], followed, True
    return None if parsed is None else (parsed[0], parsed[1], generation, False)


def _plan_spec(k: Kube, namespace: str, name: str) -> Callable[[PlanStatus], Any]:
    """How the supervisor reads the spec a recorded plan was computed from
    (:func:`backstop.k8s.specstore.plan_spec`)."""
    owner = Owner(name=name, namespace=namespace, uid="")
    return lambda plan: plan_spec(k, owner, plan)


def supervise(**kwargs: Any) -> None:
    """Supervise one topology (:func:`_supervise`) in its worker thread, for the
    topology's lifetime; then release what the process holds for it."""
    try:
        _supervise(**kwargs)
    finally:
        # the topology is gone (or the operator stops): its capacity holds go with it,
        # and its metric series
        kwargs["memo"].ledger.release(f"{kwargs['namespace']}/{kwargs['name']}")
        kwargs["memo"].metrics.forget(kwargs["namespace"], kwargs["name"])


def _supervise(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    body: kopf.Body,
    stopped: Stopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """Supervise one topology: node-loss recovery, pod convergence, derived conditions.

    About once a second: detect lost/returned/new Ready nodes from the node
    index and advance the recovery session (recorded in the status before any
    pod is touched), drain cordoned nodes, restore a broken bound when capacity
    allows (:mod:`backstop.controller.restore`), converge the pods to the recorded plan,
    and rewrite the conditions when they change. Quiet unless something happens.
    """
    assert namespace is not None
    pods_index: kopf.Index[tuple[str | None, str], Any] = kwargs["pods_by_topology"]
    mem = topology_memo.of(kwargs["memo"])
    k = kube()
    watch: topology_memo.NodeWatch | None = kwargs["memo"].get("node_watch")
    while not stopped and not gone(kwargs["topologies"], namespace, name, meta["uid"]):
        wait = 1.0
        seen = watch.changes if watch is not None else 0
        try:
            with kwargs["memo"].metrics.timed("supervise"):
                tick = _tick(k, mem, name, namespace, meta, spec, status, body, kwargs)
                if tick is not None:
                    with mem.lock:
                        deleted, created = supervise_once(
                            tick, lambda: list(pods_index.get((namespace, name), []))
                        )
                    if deleted or created:
                        logger.info("pods: %d deleted, %d created", deleted, created)
                    wait = next_look(tick.status, tick.model, tick.nodes, time.time())
        except ApiException as err:
            if err.status == 404 and k.topology_gone(namespace, name):
                return
            logger.warning(
                "supervision of %s/%s: %s %s %s",
                namespace,
                name,
                err.status,
                err.reason,
                (err.body or "")[:300],
            )
        except PlannerError as err:
            logger.warning("recovery planning failed: %s", err)
        if watch is None:
            stopped.wait(wait)
        else:  # a node turning NotReady (or Ready) is looked at now, not up to 1 s later
            watch.wait(seen, wait)


def _tick(
    k: Kube,
    mem: topology_memo.TopologyMemo,
    name: str,
    namespace: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    body: kopf.Body,
    kwargs: Mapping[str, Any],
) -> Tick | None:
    """This round's :class:`~backstop.controller.tick.Tick`: the newest status we know, the
    spec the pods follow, the node index; ``None`` while there is no spec to follow."""
    generation = int(meta.get("generation", 1))
    current, rv = _fresh_status(mem, meta, status)
    typed = parse_status(current).status
    target = _target(mem, generation, spec, typed, _plan_spec(k, namespace, name))
    if target is None:
        return None
    model, graph, followed, fallback = target

    def emit(reason: EventReason, message: str, warning: bool) -> None:
        post_event(body, reason, message, warning=warning)

    nodes = for_topology(node_snapshot(kwargs["node_index"]), model)  # its tolerations
    nodes = with_confirmed(nodes, dict(mem.dataplane_lost), time.time())  # the data plane's
    changes: topology_memo.PodChanges | None = kwargs["memo"].get("pod_changes")
    inputs = None
    if changes is not None:
        pods = kwargs["pods_by_topology"].get((namespace, name), [])
        inputs = round_inputs(changes.count((namespace, name)), len(pods), nodes, rv, generation)
    return Tick(
        kube=k,
        owner=Owner(name=name, namespace=namespace, uid=meta["uid"]),
        model=model,
        graph=graph,
        generation=followed,
        status=typed,
        nodes=nodes,
        emit=emit,
        ledger=kwargs["memo"].ledger,
        memory=mem,
        resource_version=rv,
        fallback=fallback,
        observed=generation,
        metrics=kwargs["memo"].metrics,
        inputs=inputs,
    )


def round_inputs(
    pod_events: int, pods: int, nodes: Mapping[str, Any], rv: str | None, generation: int
) -> tuple[Any, ...]:
    """Everything a round reads but the clock, in a form two rounds compare with ``==``:
    the topology's pod events (:class:`~.memo.PodChanges`) and indexed pods (a deletion
    is no event), its nodes, the status version and the object's generation.

    Examples
    --------
    >>> a = round_inputs(3, 10, {"n1": 1}, "7", 1)
    >>> a == round_inputs(3, 10, {"n1": 1}, "7", 1), a == round_inputs(3, 9, {"n1": 1}, "7", 1)
    (True, False)
    """
    return (pod_events, pods, dict(nodes), rv, generation)
