"""The supervise daemon: one loop per topology, about once a second, applying the
recovery state machine's decisions (:func:`backstop.controller.supervisor.supervise_once`).

:mod:`backstop.controller.handlers` registers it; it is apart from the reconcile of spec
changes (:mod:`backstop.controller.reconcile`) because the two run on different
triggers: the reconcile on events of the object, this loop on time and on the node and
pod indexes. Both take the topology's lock in its Kopf memo
(:mod:`backstop.controller.memo`), so they never interleave.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import memo as topology_memo
from backstop.controller import settings as config
from backstop.controller.context import gone, kube, node_snapshot, post_event
from backstop.controller.supervisor import supervise_once
from backstop.controller.tick import Tick
from backstop.domain.constants import EventReason
from backstop.domain.dataplane import with_confirmed
from backstop.domain.incidents import for_topology
from backstop.domain.recovery import next_look
from backstop.domain.spec import StreamTopologySpec, expand
from backstop.domain.status import TopologyStatus, parse_status
from backstop.domain.status.recoveryplans import last_good_generation
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner
from planners import InvalidTopology, PlannerError, TaskGraph

HANDLER_WORKERS = 16
"""Executor threads for handlers and indexes, besides one per running supervise daemon."""


class ExecutorSizer:
    """Counts running sync daemons and sizes Kopf's executor to them plus the handlers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._daemons = 0
        self._settings: kopf.OperatorSettings | None = None

    def attach(self, settings: kopf.OperatorSettings) -> None:
        """Size the executor of this operator run (called by the startup handler)."""
        with self._lock:
            self._settings = settings
        self.add(0)

    def add(self, delta: int) -> None:
        """Count ``delta`` more running daemons and resize the executor.

        A ``ThreadPoolExecutor`` starts a thread only when work is submitted, so a
        larger limit alone starts none: the daemons queued behind the reconciles (a
        fleet's, spawned at once) would wait for some other submission. Each started
        daemon therefore starts the thread it added (:func:`_start_thread`): the pod and
        node indexes are ``async`` and submit nothing, so without it 16 of a fleet's 100
        daemons would run and 84 wait forever.
        """
        with self._lock:
            self._daemons += delta
            if self._settings is None:
                return
            self._settings.execution.max_workers = HANDLER_WORKERS + self._daemons
            pool = self._settings.execution.executor
        if delta > 0:
            _start_thread(pool)


def _start_thread(pool: object) -> None:
    """Start one more worker thread of a ``ThreadPoolExecutor`` (within its limit).

    Its idle semaphore counts work items finished, not threads idle now, so after the
    reconciles' threads went on to daemons (which never return) it still says "idle"
    and a submission would start nothing: its stale counts are taken first. CPython's
    executor has no public way to do this; with another executor nothing happens.
    """
    idle = getattr(pool, "_idle_semaphore", None)
    adjust = getattr(pool, "_adjust_thread_count", None)
    lock = getattr(pool, "_shutdown_lock", None)
    if idle is None or adjust is None or lock is None:
        return
    with lock:
        if getattr(pool, "_shutdown", False):
            return
        while idle.acquire(timeout=0):
            pass
        adjust()


executor = ExecutorSizer()
"""The one sizer of this process's Kopf executor."""


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
    mem: topology_memo.TopologyMemo, generation: int, spec: Mapping[str, Any], st: TopologyStatus
) -> tuple[StreamTopologySpec, TaskGraph, int, bool] | None:
    """The spec the pods follow: the current one, or while an edit is rejected (invalid,
    or a problem recorded for it) the last good plan's (``status.plan.spec``).

    Returns (model, graph, generation, fallback), or ``None`` when there is neither.
    """
    followed = last_good_generation(st, generation)
    keep = {generation} | ({followed} if followed is not None else set())
    parsed = _model(mem, generation, spec, keep)
    rejected = st.problem is not None and st.problem.generation == generation
    if (parsed is None or rejected) and followed is not None and st.plan and st.plan.spec:
        good = _model(mem, followed, st.plan.spec, keep)
        if good is not None:
            return good[0], good[1], followed, True
    return None if parsed is None else (parsed[0], parsed[1], generation, False)


def supervise(**kwargs: Any) -> None:
    """Supervise one topology (:func:`_supervise`) in a thread of Kopf's executor.

    A sync daemon holds its thread for the topology's lifetime, so the executor
    grows by one while it runs: handlers and indexes always keep
    :data:`HANDLER_WORKERS` threads (with a fixed pool, 16 topologies would
    starve every reconcile and index update).
    """
    executor.add(+1)
    try:
        _supervise(**kwargs)
    finally:
        executor.add(-1)
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
    stopped: kopf.DaemonStopped,
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
    target = _target(mem, generation, spec, typed)
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
