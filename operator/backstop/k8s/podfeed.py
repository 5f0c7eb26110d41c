"""Feeding the capacity ledger: a list-then-watch of the pods the operator may read.

Why not a Kopf index: the ledger wants every pod that takes capacity on a node, not
only the topologies' task pods, and it wants them as plain JSON in a thread of its
own. So the feed keeps :class:`backstop.k8s.ledger.CapacityLedger` current from
watches in daemon threads: one LIST at start (and after a watch lost its place,
HTTP 410), then events only; no planner lists pods.

Which pods: the operator's namespaces, one list/watch per namespace (merged in the
ledger: a namespace's listing replaces that namespace's pods only), or every
namespace in one list/watch when the operator serves every namespace or is asked to
count every workload's requests (``--capacity-all-namespaces``). The trade-off: a
node's capacity is also taken by pods of other namespaces (other workloads,
kube-system's daemons), and no API gives a node's allocated requests without
reading those pods' specs cluster-wide (a ``spec.nodeName`` field selector is still a
cluster-wide pod list). Following only its namespaces, the operator reads no pod
spec elsewhere (inline secrets included) but counts only its namespaces' pods on a
node, so it may plan onto CPU another workload already requested.

Memory: the feed keeps no pod. The LIST is read in pages of :data:`PAGE` pods and
both the pages and the watch events stay plain JSON dicts (no ``V1Pod`` models,
which cost several times the JSON's size); the ledger keeps of each pod only its
node, its requests and its topology.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.listwatch import ListWatch

WATCH_SECONDS = 300
"""Server-side timeout of one watch request (it is then resumed from the last version)."""
PAGE = 500
"""Pods per page of the (re)listing: its peak memory is one page, whatever the cluster."""


def pod_sources(
    core: client.CoreV1Api, namespaces: Sequence[str] = ()
) -> dict[str | None, ListWatch]:
    """One list/watch of pods per namespace, or (``namespaces`` empty) one of every
    namespace under the key ``None``."""
    if not namespaces:
        return {None: ListWatch(core.list_pod_for_all_namespaces, **_SIZES)}
    return {
        ns: ListWatch(core.list_namespaced_pod, selectors={"namespace": ns}, **_SIZES)
        for ns in dict.fromkeys(namespaces)
    }


_SIZES: dict[str, Any] = {"watch_seconds": WATCH_SECONDS, "page": PAGE}


def readable_pods(core: client.CoreV1Api, namespace: str) -> list[Any]:
    """Every pod of the cluster, or those of ``namespace`` alone when the caller may not
    list pods cluster-wide (403): the one-off listing of ``backstop place``, read with
    the caller's own credentials, counts what those credentials may read."""
    try:
        return list(core.list_pod_for_all_namespaces().items)
    except ApiException as err:
        if err.status != 403:
            raise
    return list(core.list_namespaced_pod(namespace).items)


class PodFeed:
    """Keep a ledger's pods current from pod watches (one daemon thread per watch).

    ``namespaces``: the namespaces whose pods are read; empty: every namespace.
    """

    def __init__(
        self, api: client.ApiClient, ledger: CapacityLedger, namespaces: Sequence[str] = ()
    ) -> None:
        self.api = api
        self.ledger = ledger
        self.stopped = threading.Event()
        self.sources = pod_sources(client.CoreV1Api(api), namespaces)
        self._listed: set[str | None] = set()
        self._listed_lock = threading.Lock()
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(scope,),
                name=f"backstop-podfeed-{scope or '*'}",
                daemon=True,
            )
            for scope in self.sources
        ]

    def start(self) -> PodFeed:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self, scope: str | None) -> None:
        self.sources[scope].run(lambda pods: self.relist(pods, scope), self.apply, self.stopped)

    def relist(self, pods: Iterable[Mapping[str, Any]], scope: str | None = None) -> None:
        """A fresh listing of ``scope`` (a namespace, or ``None``: every namespace)
        replaces the ledger's pods of that scope. The ledger counts as synced once
        every source has listed once."""
        with self.ledger.relisting(scope, complete=False) as observe:
            for pod in pods:
                observe(pod)
        with self._listed_lock:
            self._listed.add(scope)
            if self._listed >= set(self.sources):
                self.ledger.synced.set()

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (its object a JSON dict) into the ledger."""
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.ledger.forget((str(meta.get("namespace")), str(meta.get("name"))))
        elif kind in ("ADDED", "MODIFIED"):
            self.ledger.observe(obj)
