"""The node simulator: simulated Nodes that behave like kubelets toward the control plane.

Kubelets (and Docker, and kind) cannot run on our CI machines, but the operator's
node-loss handling must be exercised against the real node-lifecycle controller and
scheduler. This module stands in for kubelets and nothing else:

* it creates Nodes with allocatable CPU/memory and zone/rack labels;
* it keeps their heartbeats (a Lease in ``kube-node-lease`` and the Ready condition),
  and removes the ``node.kubernetes.io/not-ready`` taint once a node is Ready;
* it marks pods bound to live simulated nodes Running, and finishes the deletion of
  pods deleted on live nodes (as a kubelet would once containers stop);
* it "kills" a node by stopping its heartbeats (the node-lifecycle controller then
  turns it NotReady/Unknown), and adds replacement nodes that become Ready after a delay.

All simulator state lives on the Node objects (labels and annotations), so the
``nodes kill/add`` commands of ``python -m backstop_testkit`` and the heartbeat loop
(``python -m backstop_testkit nodes run`` or
``python -m backstop_testkit.sim.nodesim``) can run in different processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from threading import Event, Thread
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import NODE_KIND_LABEL, NODE_KIND_SIMULATED
from backstop.domain.status import now_rfc3339
from backstop.k8s.cluster import ClusterUnavailable, api_client
from backstop.k8s.nodes import node_is_ready
from backstop_testkit.sim.podwatch import PodWatch

log = logging.getLogger("backstop.nodesim")

SIM_LABEL = "sim.backstop.dev/simulated"
KILLED = "sim.backstop.dev/killed"
READY_AT = "sim.backstop.dev/ready-at"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "topology.backstop.dev/rack"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"
LEASE_NS = "kube-node-lease"
LEASE_SECONDS = 40
POOL_WORKERS = 8
"""Concurrent API calls of one tick (heartbeats, pods started, deletions finished)."""
REQUEST_TIMEOUT = 30.0
"""Seconds one pod call or pod list of a tick may take: the client waits forever by
default, and one call that never returns would stop every later tick (and heartbeat)."""


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeShape:
    """What a simulated node offers."""

    cpu: str = "4"
    memory: str = "16Gi"
    pods: int = 110


def build_node(
    name: str,
    shape: NodeShape,
    *,
    zone: str | None = None,
    rack: str | None = None,
    ready_at: float | None = None,
    hostname: str | None = None,
) -> dict[str, Any]:
    """The Node manifest of a simulated node (no status: the API server drops it on create).

    Its ``kubernetes.io/hostname`` label is ``hostname`` (default: the node's name), so a
    test can make a node whose label differs from its name, as a kubelet started with
    ``--hostname-override`` or a cloud node named by its DNS name has.
    """
    labels = {
        SIM_LABEL: "true",
        NODE_KIND_LABEL: NODE_KIND_SIMULATED,
        "kubernetes.io/hostname": hostname or name,
        "kubernetes.io/os": "linux",
    }
    if zone:
        labels[ZONE_LABEL] = zone
    if rack:
        labels[RACK_LABEL] = rack
    annotations = {READY_AT: f"{ready_at:.3f}"} if ready_at is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
    }


def build_node_status(shape: NodeShape, now: datetime, *, ready: bool = True) -> dict[str, Any]:
    """The status a kubelet would post: capacity, allocatable and a fresh Ready condition."""
    res = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
    stamp = now_rfc3339(now)
    return {
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "simulated by backstop nodesim",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.20.2-backstop-sim",
                "kubeProxyVersion": "v1.20.2-backstop-sim",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "sim://1",
                "osImage": "backstop node simulator",
                "kernelVersion": "sim",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
    }


def build_heartbeat(now: datetime, last_transition: str | None) -> dict[str, Any]:
    """A strategic-merge patch that renews the Ready condition's heartbeat."""
    stamp = now_rfc3339(now)
    return {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated by backstop nodesim",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": last_transition or stamp,
                }
            ]
        }
    }


def build_lease(name: str, now: datetime) -> dict[str, Any]:
    """The node Lease the node-lifecycle controller watches."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NS},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro(now),
        },
    }


def build_running_status(pod_name: str, containers: list[str], now: datetime) -> dict[str, Any]:
    """The status a kubelet posts once all containers of a pod run."""
    stamp = now_rfc3339(now)
    n = abs(hash(pod_name)) % 250 + 2
    conds = [
        {"type": t, "status": "True", "lastTransitionTime": stamp}
        for t in ("Initialized", "ContainersReady", "Ready", "PodScheduled")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conds,
            "podIP": f"10.244.{n // 250}.{n}",
            "startTime": stamp,
            "containerStatuses": [
                {
                    "name": c,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "sim",
                    "imageID": "sim://",
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in containers
            ],
        }
    }


def pods_to_act(
    items: list[dict[str, Any]], live: set[str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str, list[str]]]]:
    """What a kubelet would do now with the pods (raw JSON) bound to the ``live`` nodes:
    ``(deletions to finish as (namespace, name), pods to start as (namespace, name,
    container names))``. Pods on dead nodes are left as they are; a pod already Running,
    Failed or Succeeded is not started again.

    >>> pod = lambda n, node, phase=None, deleting=False: {
    ...     "metadata": {"namespace": "ns", "name": n,
    ...                  **({"deletionTimestamp": "t"} if deleting else {})},
    ...     "spec": {"nodeName": node, "containers": [{"name": "task"}]},
    ...     "status": {"phase": phase} if phase else {}}
    >>> pods_to_act([pod("a", "n1"), pod("b", "n1", "Running"), pod("c", "n2"),
    ...              pod("d", "n1", "Running", deleting=True)], {"n1"})
    ([('ns', 'd')], [('ns', 'a', ['task'])])
    """
    finish: list[tuple[str, str]] = []
    start: list[tuple[str, str, list[str]]] = []
    for pod in items:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("nodeName") not in live:
            continue
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if meta.get("deletionTimestamp") is not None:
            finish.append((ns, name))
        elif (pod.get("status") or {}).get("phase") not in ("Running", "Failed", "Succeeded"):
            start.append((ns, name, [c["name"] for c in spec.get("containers") or []]))
    return finish, start


class Simulator:
    """I/O side: creates, kills and heartbeats simulated nodes through the API server."""

    def __init__(self, api: client.ApiClient, shape: NodeShape | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.shape = shape or NodeShape()
        self._shapes: dict[str, NodeShape] = {}
        # one request at a time made a tick of 10k pods last minutes; the client's
        # connection pool holds 5 per core, so a few more workers gain nothing
        self._pool = ThreadPoolExecutor(max_workers=POOL_WORKERS, thread_name_prefix="nodesim")
        # heartbeats have a pool of their own: queued behind thousands of pod calls they
        # came too late, and the node-lifecycle controller took live nodes for dead
        self._beat_pool = ThreadPoolExecutor(
            max_workers=POOL_WORKERS, thread_name_prefix="nodesim-beat"
        )
        self._live: set[str] = set()
        """The live nodes of the last heartbeat round (read by the pod loop of :meth:`run`)."""

    # ---------------------------------------------------------------- commands
    def create(
        self,
        name: str,
        shape: NodeShape,
        *,
        zone: str | None = None,
        rack: str | None = None,
        ready_after: float = 0.0,
        hostname: str | None = None,
    ) -> None:
        """Create a simulated node; it turns Ready at the next tick after ``ready_after`` s
        (``hostname``: its ``kubernetes.io/hostname`` label, default its name)."""
        ready_at = time.time() + ready_after
        body = build_node(name, shape, zone=zone, rack=rack, ready_at=ready_at, hostname=hostname)
        body["metadata"]["annotations"]["sim.backstop.dev/shape"] = (
            f"{shape.cpu},{shape.memory},{shape.pods}"
        )
        self.core.create_node(body)
        # allocatable is visible at once (a kubelet registers with it); Ready comes later
        self.core.patch_node_status(name, build_node_status(shape, datetime.now(UTC), ready=False))

    def kill(self, name: str) -> None:
        """Stop the node's heartbeats, as if its machine died."""
        self.core.patch_node(name, {"metadata": {"annotations": {KILLED: "true"}}})

    def revive(self, name: str) -> None:
        """Resume the node's heartbeats (the lost node comes back)."""
        self.core.patch_node(name, {"metadata": {"annotations": {KILLED: None}}})

    def delete(self, name: str) -> None:
        self.core.delete_node(name)

    def pressure(self, name: str) -> None:
        """Put the node under memory pressure, as a kubelet reports it: the condition and
        the ``NoSchedule`` taint the node-lifecycle controller derives from it."""
        now = now_rfc3339(datetime.now(UTC))
        cond = {
            "type": "MemoryPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientMemory",
            "message": "simulated by backstop nodesim",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.core.patch_node_status(name, {"status": {"conditions": [cond]}})
        taints = self.core.read_node(name).spec.taints or []
        serialize = self.core.api_client.sanitize_for_serialization
        kept = [serialize(t) for t in taints if t.key != PRESSURE_TAINT]
        taint = {"key": PRESSURE_TAINT, "effect": "NoSchedule"}
        self.core.patch_node(name, {"spec": {"taints": [*kept, taint]}})

    def evict(self, namespace: str, pod: str, message: str) -> None:
        """End a pod as a kubelet's eviction does: phase ``Failed``, reason ``Evicted``
        (the pod object stays; nothing of it runs)."""
        status = {"phase": "Failed", "reason": "Evicted", "message": message}
        self.core.patch_namespaced_pod_status(pod, namespace, {"status": status})

    # ---------------------------------------------------------------- the loop
    def _shape_of(self, node: Any) -> NodeShape:
        raw = (node.metadata.annotations or {}).get("sim.backstop.dev/shape")
        if raw:
            cpu, mem, pods = raw.split(",")
            return NodeShape(cpu=cpu, memory=mem, pods=int(pods))
        return self.shape

    def tick(self) -> None:
        """One round: heartbeat every live node, run its pods, finish deletions."""
        live = self.tick_nodes()
        if live:
            self._run_pods(live, datetime.now(UTC))

    def tick_nodes(self) -> set[str]:
        """Heartbeat every live node; returns their names."""
        now = datetime.now(UTC)
        nodes = self.core.list_node(label_selector=f"{SIM_LABEL}=true").items
        live: set[str] = set()
        for node in nodes:
            ann = node.metadata.annotations or {}
            if ann.get(KILLED) == "true":
                continue
            if float(ann.get(READY_AT, "0")) > time.time():
                continue
            live.add(node.metadata.name)
        alive = [n for n in nodes if n.metadata.name in live]
        list(self._beat_pool.map(lambda n: self._heartbeat(n, now), alive))
        self._live = live
        return live

    def _heartbeat(self, node: Any, now: datetime) -> None:
        name = node.metadata.name
        ready = node_is_ready(node)
        last_transition = None
        for c in (node.status and node.status.conditions) or []:
            if c.type == "Ready" and c.status == "True" and c.last_transition_time:
                last_transition = now_rfc3339(c.last_transition_time)
        try:
            # the Lease first: a node seen Ready always has its Lease (a reader of a
            # fresh Ready node found none between the two calls)
            self._renew_lease(name, now)
            if not ready and not node.status.allocatable:
                self.core.patch_node_status(name, build_node_status(self._shape_of(node), now))
            else:
                self.core.patch_node_status(name, build_heartbeat(now, last_transition))
            taints = node.spec.taints or []
            kept = [t for t in taints if t.key != NOT_READY_TAINT]
            if len(kept) != len(taints):
                serialize = self.core.api_client.sanitize_for_serialization
                self.core.patch_node(name, {"spec": {"taints": [serialize(t) for t in kept]}})
        except ApiException as err:
            if err.status != 404:
                log.warning("heartbeat for %s failed: %s", name, err.reason)

    def _renew_lease(self, name: str, now: datetime) -> None:
        body = build_lease(name, now)
        try:
            self.coord.patch_namespaced_lease(name, LEASE_NS, {"spec": body["spec"]})
        except ApiException as err:
            if err.status != 404:
                raise
            self.coord.create_namespaced_lease(LEASE_NS, body)

    def _run_pods(
        self, live: set[str], now: datetime, items: list[dict[str, Any]] | None = None
    ) -> None:
        """Start the pods bound to ``live`` nodes and finish their deletions; ``items``:
        the bound pods as a watch keeps them (:class:`~backstop_testkit.sim.podwatch.PodWatch`),
        else listed now."""
        if items is None:
            # raw JSON, not the client's models: at 10k pods deserializing them took ~10 s
            resp = self.core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName!=",
                _preload_content=False,
                _request_timeout=2 * REQUEST_TIMEOUT,
            )
            items = json.loads(resp.data).get("items") or []
        finish, start = pods_to_act(items, live)
        list(self._pool.map(lambda j: self._finish(j[0], j[1]), finish))
        list(self._pool.map(lambda j: self._start(j[0], j[1], j[2], now), start))

    def _finish(self, ns: str, name: str) -> None:
        self._pod_call(ns, name, self.core.delete_namespaced_pod, grace_period_seconds=0)

    def _start(self, ns: str, name: str, containers: list[str], now: datetime) -> None:
        body = build_running_status(name, containers, now)
        self._pod_call(ns, name, self.core.patch_namespaced_pod_status, body)

    def _pod_call(self, ns: str, name: str, call: Any, *args: Any, **kwargs: Any) -> None:
        try:
            call(name, ns, *args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as err:
            if err.status not in (404, 409):
                log.warning("pod %s/%s: %s", ns, name, err.reason)
        except urllib3.exceptions.HTTPError as err:  # a timeout: the next tick tries again
            log.warning("pod %s/%s: %s", ns, name, err)

    def run(self, interval: float = 2.0, stop: Event | None = None) -> None:
        """Tick every ``interval`` seconds until ``stop`` is set (or forever).

        Heartbeats and pods run in two loops: a round over thousands of pods (a call per
        pod to start) can take longer than the node-lifecycle controller's grace period,
        and heartbeats waiting behind it let live nodes turn NotReady (at 10k pods the
        operator then "recovered" them). The pods come from a watch, not a LIST per round
        (:mod:`backstop_testkit.sim.podwatch`).
        """
        stop = stop or Event()
        log.info("node simulator running (heartbeat every %.1fs)", interval)
        beats = Thread(
            target=self._loop, args=(self.tick_nodes, interval, stop), name="nodesim-beats"
        )
        beats.start()
        pods = PodWatch(self.core)
        # a daemon: its watch request may take WATCH_SECONDS to notice ``stop``
        Thread(target=pods.run, args=(stop,), name="nodesim-pods", daemon=True).start()
        try:
            self._loop(lambda: self._tick_pods(pods), interval, stop)
        finally:
            stop.set()
            beats.join()

    def _tick_pods(self, pods: PodWatch) -> None:
        live = self._live
        if live and pods.synced.is_set():
            self._run_pods(live, datetime.now(UTC), pods.items())

    @staticmethod
    def _loop(step: Callable[[], object], interval: float, stop: Event) -> None:
        while not stop.is_set():
            try:
                step()
            except ApiException as err:
                log.warning("tick failed: %s %s", err.status, err.reason)
            except Exception as err:  # the API server may restart under us; keep going
                log.warning("tick failed: %s", err)
            stop.wait(interval)


def main(argv: list[str] | None = None) -> int:
    """``python -m backstop_testkit.sim.nodesim``: run the heartbeat loop."""
    parser = argparse.ArgumentParser(
        prog="python -m backstop_testkit.sim.nodesim",
        description="Keep simulated Nodes alive (heartbeats, Ready, pods Running).",
    )
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between heartbeats")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s nodesim %(message)s")
    try:
        sim = Simulator(api_client(args.kubeconfig))
    except ClusterUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stop = Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        sim.run(args.interval, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
