"""Feeding the capacity ledger: one list-then-watch of every pod in the cluster.

Why not a Kopf index: Kopf watches namespaced resources only in the namespaces
it serves (``--namespace``), while a node's capacity is taken by pods of every
namespace (other workloads, kube-system's daemons). So one watch over all
namespaces, in a daemon thread, keeps :class:`backstop.k8s.ledger.CapacityLedger`
current: one LIST at start (and after the watch lost its place, HTTP 410), then
events only; no planner lists pods any more. The chart already grants
cluster-wide ``list``/``watch`` on pods for capacity accounting.

Memory: the feed keeps no pod. The LIST is read in pages of :data:`PAGE` pods and
both the pages and the watch events stay plain JSON dicts (no ``V1Pod`` models,
which cost several times the JSON's size); the ledger keeps of each pod only its
node, its requests and its topology. A LIST of 5,000 pods as models took +203 MiB.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from backstop.k8s.ledger import CapacityLedger

log = logging.getLogger("backstop.ledger")

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
        self._thread = threading.Thread(target=self._run, name="backstop-podfeed", daemon=True)

    def start(self) -> PodFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _pages(self) -> Iterator[dict[str, Any]]:
        """The pages of one consistent LIST of every pod, as JSON dicts."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            resp = self.core.list_pod_for_all_namespaces(_preload_content=False, **kwargs)
            page: dict[str, Any] = json.loads(resp.data)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def _list(self) -> str:
        version = ""
        with self.ledger.relisting() as observe:
            for page in self._pages():
                for pod in page.get("items") or []:
                    observe(pod)
                version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        return version

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
            deserialize=False,
        ):
            if self.stopped.is_set():
                w.stop()
                break
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":  # e.g. 410 Gone: list again
                return None
            version = self.apply(kind, obj)
        return version

    def apply(self, kind: str, obj: Mapping[str, Any]) -> str:
        """One watch event (its object a JSON dict) into the ledger; the resourceVersion
        to resume from (a BOOKMARK carries only that)."""
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.ledger.forget((str(meta.get("namespace")), str(meta.get("name"))))
        elif kind in ("ADDED", "MODIFIED"):
            self.ledger.observe(obj)
        return str(meta.get("resourceVersion") or "")
