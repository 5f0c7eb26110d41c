"""Every Kopf handler of the operator, registered here and nowhere else.

Run with ``backstop operator`` or ``kopf run -m backstop.controller.handlers``. Each
handler is a registration that hands Kopf's arguments to the module doing the work:

* start-up and clean-up: :mod:`backstop.controller.startup`;
* the reconcile of spec changes (and of an applied re-optimization):
  :mod:`backstop.controller.reconcile`;
* the in-memory indexes of pods, topologies and nodes: :mod:`backstop.controller.indexes`;
* the workers of each topology (:data:`PER_TOPOLOGY`), started and stopped by a watching
  handler through :mod:`backstop.controller.workers`: the supervisor
  (:mod:`backstop.controller.daemon`), the peer pushes telling the task pods where their
  producers are (:mod:`backstop.controller.peers`), the data-plane confirmations of node
  losses the task pods noticed (:mod:`backstop.controller.dataplane`) and the periodic
  re-optimization (:mod:`backstop.controller.handlers_reopt`).

No handler here needs a finalizer (no ``kopf.daemon``, ``kopf.timer`` or ``kopf.on.delete``),
so a topology deleted while the operator is down goes at once. The admission webhook's
handler is registered on demand by :func:`backstop.controller.admission.register` (only
when a webhook port is given, and also into a standby replica's own registry).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from backstop.controller import (
    daemon,
    dataplane,
    handlers_reopt,
    indexes,
    kopf_config,
    metrics,
    peers,
    startup,
    workers,
)
from backstop.controller import reconcile as reconciling
from backstop.controller.context import kube, post_event
from backstop.domain.constants import (
    ANN_APPLIED,
    GROUP,
    LABEL_TOPOLOGY,
    PLURAL,
    VERSION,
    EventReason,
)
from backstop.domain.incidents import NodeInfo

PER_TOPOLOGY = (
    workers.Worker("supervise", daemon.supervise, initial_delay=1.0, cancellation_timeout=5.0),
    workers.Worker("push_peers", peers.run, initial_delay=0.5, cancellation_timeout=3.0),
    workers.Worker("confirm_losses", dataplane.run, initial_delay=0.5, cancellation_timeout=3.0),
    workers.Worker(
        "reoptimizer", handlers_reopt.reoptimizer, initial_delay=2.0, cancellation_timeout=10.0
    ),
)
"""The loops each topology runs while it exists: the supervisor (sync, in a thread of its
own), the peer pushes beside the pod index that wakes them, the data-plane confirmations
and the re-optimizer (``async``, on Kopf's event loop: their requests hold no thread)."""

INDEXES = ("pods_by_topology", "topologies", "node_index")
"""The indexes handed to the workers (registered below)."""


@kopf.on.event(GROUP, VERSION, PLURAL)
async def topology_workers(
    body: kopf.Body,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **kwargs: Any,
) -> None:
    """Start a topology's workers when it is seen, refresh their body on every event, stop
    them when it is deleted (:class:`workers.Workers`, started by :func:`configure`)."""
    manager: workers.Workers | None = memo.get("workers")
    if manager is not None:
        manager.saw(kwargs.get("type"), body, memo, logger, {n: kwargs[n] for n in INDEXES})


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Configure Kopf and start the process's shared state (:func:`startup.start`), with
    the manager of the topologies' workers."""
    startup.start(settings, memo)
    memo.workers = workers.Workers(PER_TOPOLOGY)
    kopf_config.quiet_success("topology_workers")


@kopf.on.cleanup()
async def stop_feed(memo: kopf.Memo, **_: Any) -> None:
    """Stop every topology's workers, then the ledger's pod watch and the scheduled
    collections (:func:`startup.stop`)."""
    if memo.get("workers") is not None:
        await memo.workers.stop_all()
    startup.stop(memo)


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
    """Plan backups and placement, then make the task pods match the plan
    (:func:`backstop.controller.reconcile.reconcile`)."""
    assert namespace is not None  # the CRD is namespaced

    def emit(reason: EventReason, message: str, warning: bool) -> None:
        post_event(body, reason, message, warning=warning)

    request = reconciling.Request(
        kube=kube(),
        emit=emit,
        body=body,
        spec=spec,
        meta=meta,
        status=status,
        name=name,
        namespace=namespace,
        patch=patch,
        logger=logger,
        memo=memo,
        pods_index=kwargs["pods_by_topology"],
        node_index=kwargs["node_index"],
    )
    reconciling.reconcile(request)


@kopf.index("pods", labels={LABEL_TOPOLOGY: kopf.PRESENT})
async def pods_by_topology(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **kwargs: Any
) -> dict[tuple[str | None, str], Any]:
    """In-memory index of task pods per topology (:func:`indexes.pod_entry`).

    Kopf watches pods in the namespaces the operator serves (one watch each), cluster-wide
    only under ``--all-namespaces``: the index reads no pod of another namespace.

    ``async`` (it does not block): Kopf runs it on its event loop, not in the executor
    whose threads the reconciles hold, so a fleet's pod events are indexed at once
    instead of queueing behind up to 16 reconciles.
    """
    return indexes.pod_entry(namespace, labels, body, kwargs.get("memo"))


@kopf.index(GROUP, VERSION, PLURAL)
async def topologies(
    namespace: str | None, name: str, uid: str, **_: Any
) -> dict[tuple[str | None, str], str]:
    """The uid of every StreamTopology: a worker whose object leaves it returns."""
    return {(namespace, name): uid}


@kopf.index("nodes")
async def node_index(name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, NodeInfo]:
    """In-memory view of every Node (:func:`indexes.node_entry`), ``async`` as
    :func:`pods_by_topology`: a NotReady is seen behind no reconcile."""
    return indexes.node_entry(name, body, memo)


@kopf.on.update(GROUP, VERSION, PLURAL, field=("metadata", "annotations", ANN_APPLIED))
def apply_reoptimized(new: Any, **kwargs: Any) -> None:
    """Run the ordinary reconcile when a re-optimized plan was written to the status.

    The reconcile resumes ``status.plan`` (same generation) and moves only the
    pods whose node or role changed; its retries (pods still terminating)
    become this handler's retries.
    """
    if new:
        reconcile(**kwargs)
