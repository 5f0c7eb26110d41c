"""Every Kopf handler of the operator, registered here and nowhere else.

Run with ``backstop operator`` or ``kopf run -m backstop.controller.handlers``. Each
handler is a registration that hands Kopf's arguments to the module doing the work:

* start-up and clean-up: :mod:`backstop.controller.startup`;
* the reconcile of spec changes (and of an applied re-optimization):
  :mod:`backstop.controller.reconcile`;
* the in-memory indexes of pods, topologies and nodes: :mod:`backstop.controller.indexes`;
* the supervise daemon, one per topology: :mod:`backstop.controller.daemon`;
* the peers daemon, one per topology, telling the task pods where their producers are:
  :mod:`backstop.controller.peers`;
* the data-plane daemon, one per topology, confirming a node loss its task pods noticed:
  :mod:`backstop.controller.dataplane`;
* the re-optimization daemon, one per topology: :mod:`backstop.controller.handlers_reopt`.

The admission webhook's handler is registered on demand by
:func:`backstop.controller.admission.register` (only when a webhook port is given, and
also into a standby replica's own registry). The registration order is the order Kopf
runs handlers of one event in: the supervise daemon first, the re-optimization daemon last.
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


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=1.0, cancellation_timeout=5.0)
def supervise(**kwargs: Any) -> None:
    """Supervise one topology in a thread of Kopf's executor (:func:`daemon.supervise`)."""
    daemon.supervise(**kwargs)


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=0.5, cancellation_timeout=3.0)
async def push_peers(**kwargs: Any) -> None:
    """Push the topology's peer map to its task pods (:func:`peers.run`), ``async`` on
    Kopf's event loop beside the pod index that wakes it."""
    await peers.run(**kwargs)


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=0.5, cancellation_timeout=3.0)
async def confirm_losses(**kwargs: Any) -> None:
    """Confirm node losses the topology's tasks suspect (:func:`dataplane.run`), ``async``
    on Kopf's event loop: its requests hold no thread."""
    await dataplane.run(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Configure Kopf and start the process's shared state (:func:`startup.start`)."""
    startup.start(settings, memo)


@kopf.on.cleanup()
def stop_feed(memo: kopf.Memo, **_: Any) -> None:
    """Stop the ledger's pod watch and the scheduled collections (:func:`startup.stop`)."""
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

    ``async`` (it does not block): Kopf runs it on its event loop, not in the executor
    whose threads the reconciles and the supervise daemons hold, so a fleet's pod
    events are indexed at once instead of queueing behind up to 16 reconciles.
    """
    return indexes.pod_entry(namespace, labels, body, kwargs.get("memo"))


@kopf.index(GROUP, VERSION, PLURAL)
async def topologies(
    namespace: str | None, name: str, uid: str, **_: Any
) -> dict[tuple[str | None, str], str]:
    """The uid of every StreamTopology: a daemon whose object leaves it returns."""
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


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=2.0, cancellation_timeout=10.0)
async def reoptimizer(**kwargs: Any) -> None:
    """Run the periodic re-optimization of one topology (:func:`handlers_reopt.reoptimizer`)."""
    await handlers_reopt.reoptimizer(**kwargs)


kopf_config.daemons_without_finalizer(kopf.get_default_registry())
