"""The node simulator's view of the bound pods, kept by a watch instead of a LIST per round.

Why: a LIST of every bound pod once a second is, at 10k pods, a 33 MiB answer the API
server encodes and the simulator parses each second, on the same two cores as the
operator and the API server's own work (pod creations would wait for it). A watch sends
each change once. The view keeps only what :func:`backstop_testkit.sim.nodesim.pods_to_act`
reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from backstop.k8s.listwatch import ListWatch

BOUND = "spec.nodeName!="
"""Only pods bound to a node are a kubelet's business."""
WATCH_SECONDS = 10
"""How long one watch request lasts; the loop checks ``stop`` at least this often."""


def slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod (raw JSON) that the simulator acts on.

    >>> slim({"metadata": {"namespace": "ns", "name": "p", "labels": {"a": "b"}},
    ...       "spec": {"nodeName": "n1", "containers": [{"name": "task", "image": "x"}]},
    ...       "status": {"phase": "Pending", "conditions": []}})["spec"]
    {'nodeName': 'n1', 'containers': [{'name': 'task'}]}
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    out_meta = {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")}
    if meta.get("deletionTimestamp") is not None:
        out_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    return {
        "metadata": out_meta,
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [{"name": c["name"]} for c in spec.get("containers") or []],
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


class PodWatch:
    """Bound pods, listed once and then followed by a watch (listed again after a 410)."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.synced = threading.Event()
        """Set once the first listing is in."""

    def items(self) -> list[dict[str, Any]]:
        """The bound pods as last seen (slim, see :func:`slim`)."""
        with self._lock:
            return list(self._pods.values())

    def apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        """One watch event.

        >>> w = PodWatch(None)  # type: ignore[arg-type]
        >>> p = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"nodeName": "n"}}
        >>> w.apply("ADDED", p); len(w.items())
        1
        >>> w.apply("DELETED", p); len(w.items())
        0
        """
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(_key(pod), None)
            elif kind in ("ADDED", "MODIFIED"):
                self._pods[_key(pod)] = slim(pod)

    def run(self, stop: threading.Event) -> None:
        """List, then watch from there, until ``stop``; any error lists again."""
        source = ListWatch(
            self.core.list_pod_for_all_namespaces,
            selectors={"field_selector": BOUND},
            watch_seconds=WATCH_SECONDS,
            retry_after=0.5,
        )
        source.run(self.relist, self.apply, stop)

    def relist(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A fresh listing replaces the view at once."""
        fresh = {_key(p): slim(p) for p in pods}
        with self._lock:
            self._pods = fresh
        self.synced.set()
