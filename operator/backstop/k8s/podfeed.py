"""Feeding the capacity ledger: one list-then-watch of every pod in the cluster.

Why not a Kopf index: Kopf watches namespaced resources only in the namespaces
it serves (``--namespace``), while a node's capacity is taken by pods of every
namespace (other workloads, kube-system's daemons). So one watch over all
namespaces, in a daemon thread, keeps :class:`backstop.k8s.ledger.CapacityLedger`
current: one LIST at start (and after the watch lost its place, HTTP 410), then
events only; no planner lists pods. The chart grants cluster-wide ``list``/``watch``
on pods for capacity accounting.

Memory: the feed keeps no pod. The LIST is read in pages of :data:`PAGE` pods and
both the pages and the watch events stay plain JSON dicts (no ``V1Pod`` models,
which cost several times the JSON's size); the ledger keeps of each pod only its
node, its requests and its topology.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.listwatch import ListWatch

WATCH_SECONDS = 300
"""Server-side timeout of one watch request (it is then resumed from the last version)."""
PAGE = 500
"""Pods per page of the (re)listing: its peak memory is one page, whatever the cluster."""


class PodFeed:
    """Keep a ledger's pods current from a cluster-wide pod watch (a daemon thread)."""

    def __init__(self, api: client.ApiClient, ledger: CapacityLedger) -> None:
        self.core = client.CoreV1Api(api)
        self.api = api
        self.ledger = ledger
        self.stopped = threading.Event()
        self.source = ListWatch(
            self.core.list_pod_for_all_namespaces, watch_seconds=WATCH_SECONDS, page=PAGE
        )
        self._thread = threading.Thread(target=self._run, name="backstop-podfeed", daemon=True)

    def start(self) -> PodFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        self.source.run(self.relist, self.apply, self.stopped)

    def relist(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A fresh listing of every pod replaces the ledger's pods."""
        with self.ledger.relisting() as observe:
            for pod in pods:
                observe(pod)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (its object a JSON dict) into the ledger."""
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.ledger.forget((str(meta.get("namespace")), str(meta.get("name"))))
        elif kind in ("ADDED", "MODIFIED"):
            self.ledger.observe(obj)
