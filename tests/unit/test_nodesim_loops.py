"""The node simulator keeps heartbeating while a round over the pods is slow.

At 10k pods one round over the pods (a list of every bound pod, then a call per pod to
start) took longer than the node-lifecycle controller's 20 s grace period; with
heartbeats and pods in one loop, live nodes turned NotReady and the operator recovered
them (bench_scale, 10k tasks). The API is a stand-in here: what is checked is only that
the simulator's own loops do not make heartbeats wait for pods.
"""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from backstop_testkit.sim.nodesim import Simulator


class FakeCore:
    """The few CoreV1Api calls of a simulator round; starting a pod blocks until released."""

    def __init__(self) -> None:
        self.beats = 0
        self.starts = 0
        self.release = threading.Event()
        self.api_client = client.ApiClient()

    def list_node(self, **_: Any) -> Any:
        node = SimpleNamespace(
            metadata=SimpleNamespace(name="n1", annotations={}),
            status=SimpleNamespace(conditions=[], allocatable={"cpu": "1"}),
            spec=SimpleNamespace(taints=[]),
        )
        return SimpleNamespace(items=[node])

    def patch_node_status(self, *_: Any, **__: Any) -> None:
        self.beats += 1

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):  # nothing changes; the watch ends when released
            self.release.wait(10)
            raise RuntimeError("watch closed")
        pod = {
            "metadata": {"namespace": "ns", "name": "p", "resourceVersion": "1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "task"}]},
            "status": {"phase": "Pending"},
        }
        items = {"metadata": {"resourceVersion": "1"}, "items": [pod]}
        return SimpleNamespace(data=json.dumps(items).encode())

    def patch_namespaced_pod_status(self, *_: Any, **__: Any) -> None:
        self.starts += 1
        self.release.wait(10)  # a round over 10k pods on a busy API server


class FakeCoord:
    def patch_namespaced_lease(self, *_: Any, **__: Any) -> None:
        return None


def test_heartbeats_go_on_while_a_pod_round_is_stuck() -> None:
    sim = Simulator(client.ApiClient())
    core = FakeCore()
    sim.core, sim.coord = core, FakeCoord()
    stop = threading.Event()
    runner = threading.Thread(target=sim.run, args=(0.02, stop), daemon=True)
    runner.start()
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end and (core.starts < 1 or core.beats < 6):
            time.sleep(0.02)
        assert core.starts == 1, "the pod round should be stuck starting its first pod"
        assert core.beats >= 6, f"only {core.beats} heartbeats while the pod round was stuck"
    finally:
        stop.set()
        core.release.set()
        runner.join(5)
    assert not runner.is_alive()


class OrderCore(FakeCore):
    """Records the order of a heartbeat's calls."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def patch_node_status(self, *_: Any, **__: Any) -> None:
        self.calls.append("status")


class OrderCoord:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def patch_namespaced_lease(self, *_: Any, **__: Any) -> None:
        self.calls.append("lease")


def test_a_node_has_its_lease_before_its_status_says_ready() -> None:
    calls: list[str] = []
    sim = Simulator(client.ApiClient())
    sim.core, sim.coord = OrderCore(calls), OrderCoord(calls)
    sim.tick_nodes()
    assert calls == ["lease", "status"]
