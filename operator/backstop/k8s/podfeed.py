"""Feeding the capacity ledger: one list-then-watch of every pod in the cluster.

Why not a Kopf index: Kopf watches namespaced resources only in the namespaces
it serves (``--namespace``), while a node's capacity is taken by pods of every
namespace (other workloads, kube-system's daemons). So one watch over all
namespaces, in a daemon thread, keeps :class:`backstop.k8s.ledger.CapacityLedger`
current: one LIST at start (and after the watch lost its place, HTTP 410), then
events only; no planner lists pods any more. The chart already grants
cluster-wide ``list``/``watch`` on pods for capacity accounting.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from backstop.k8s.ledger import CapacityLedger

log = logging.getLogger("backstop.ledger")

WATCH_SECONDS = 300
"""Server-side timeout of one watch request (it is then resumed from the last version)."""


class PodFeed:
    """Keep a ledger's pods current from a cluster-wide pod watch (a daemon thread)."""

    def __init__(self, api: client.ApiClient, ledger: CapacityLedger) -> None:
        self.core = client.CoreV1Api(api)
        self.api = api
        self.ledger = ledger
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backstop-podfeed", daemon=True)

    def start(self) -> PodFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _dict(self, pod: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.api.sanitize_for_serialization(pod)
        return out

    def _list(self) -> str:
        listing = self.core.list_pod_for_all_namespaces(_request_timeout=60)
        self.ledger.replace_pods([self._dict(p) for p in listing.items])
        return str(listing.metadata.resource_version)

    def _run(self) -> None:
        version: str | None = None
        while not self.stopped.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
            except ApiException as err:
                if err.status == 410:  # too old: list again
                    version = None
                    continue
                log.warning("pod watch: %s %s; retrying", err.status, err.reason)
                version = None
                self.stopped.wait(1.0)
            except Exception as err:  # network trouble: never let the feed die
                log.warning("pod watch: %s; retrying", err)
                version = None
                self.stopped.wait(1.0)

    def _watch(self, version: str) -> str | None:
        w = watch.Watch()
        for event in w.stream(
            self.core.list_pod_for_all_namespaces,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
        ):
            if self.stopped.is_set():
                w.stop()
                break
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                return None
            version = self.apply(kind, obj)
        return version

    def apply(self, kind: str, obj: Any) -> str:
        """One watch event into the ledger; the resourceVersion to resume from.

        A BOOKMARK's object is a bare dict (the client does not deserialize it: it carries
        only ``metadata.resourceVersion``), every other event's a ``V1Pod``.
        """
        if kind == "BOOKMARK" or isinstance(obj, dict):
            return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
        if kind == "DELETED":
            self.ledger.forget((obj.metadata.namespace, obj.metadata.name))
        elif kind in ("ADDED", "MODIFIED"):
            self.ledger.observe(self._dict(obj))
        return str(obj.metadata.resource_version)
