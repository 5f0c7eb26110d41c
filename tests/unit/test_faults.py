"""The fault-injection switch: off by default, exits at the N-th hit of
its point with its own exit code and one line naming the point, interrupts a pod batch
halfway."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client

from backstop.controller import faults
from backstop.controller.settings import Settings
from backstop.domain.planning import PodDiff
from backstop.k8s.kubeio import Kube

SCRIPT = """
import sys
from backstop.controller import faults
for i in range(3):
    print("reached", i, flush=True)
    faults.point(sys.argv[1])
print("survived", flush=True)
"""


def run_points(point: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BACKSTOP_FAULT_")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, point],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_off_by_default_the_points_do_nothing() -> None:
    proc = run_points("after-status", {})
    assert proc.returncode == 0
    assert "survived" in proc.stdout


def test_another_point_armed_does_not_fire_here() -> None:
    proc = run_points("after-status", {"BACKSTOP_FAULT_POINT": "after-configmap"})
    assert proc.returncode == 0 and "survived" in proc.stdout


@pytest.mark.parametrize("after", [1, 2, 3])
def test_the_armed_point_exits_at_its_nth_hit_with_the_fault_exit_code(after: int) -> None:
    proc = run_points(
        "after-recoveryplan",
        {"BACKSTOP_FAULT_POINT": "after-recoveryplan", "BACKSTOP_FAULT_AFTER": str(after)},
    )
    assert proc.returncode == faults.EXIT_CODE
    assert proc.stdout.split() == " ".join(f"reached {i}" for i in range(after)).split()
    assert "exiting at point after-recoveryplan (hit " + str(after) + ")" in proc.stderr


def test_every_point_name_is_accepted_and_nothing_else() -> None:
    for name in faults.POINTS:
        assert Settings.from_env({"BACKSTOP_FAULT_POINT": name}).fault_point == name
    with pytest.raises(ValueError, match="BACKSTOP_FAULT_POINT"):
        Settings.from_env({"BACKSTOP_FAULT_POINT": "after-lunch"})
    with pytest.raises(ValueError, match="BACKSTOP_FAULT_AFTER"):
        Settings.from_env({"BACKSTOP_FAULT_AFTER": "0"})


class RawAnswer:
    """An unparsed answer (``_preload_content=False``): read, then its connection freed."""

    def read(self) -> bytes:
        return b"{}"

    def release_conn(self) -> None:
        return None


class FakeCore:
    """Records pod creations and deletions in order (no API server)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def create_namespaced_pod(self, namespace: str, manifest: dict[str, Any], **_: Any) -> Any:
        self.calls.append("create " + manifest["metadata"]["name"])
        return RawAnswer()

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        self.calls.append("delete " + name)


class Stop(Exception):
    pass


def kube_with(fault: Any) -> tuple[Kube, FakeCore]:
    k = Kube(client.ApiClient(), fault=fault)
    core = FakeCore()
    k.core = core
    return k, core


def pods(*names: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": n}} for n in names]


def test_mid_pod_batch_stops_after_half_of_the_creations() -> None:
    seen: list[list[str]] = []

    def fault(name: str) -> None:
        assert name == "mid-pod-batch"
        seen.append(list(core.calls))
        raise Stop

    k, core = kube_with(fault)
    with pytest.raises(Stop):
        k.apply_pod_diff("ns", PodDiff(create=pods("a", "b", "c", "d", "e"), delete=["x"]))
    assert seen == [core.calls]
    assert core.calls[0] == "delete x"
    assert sorted(core.calls[1:]) == ["create a", "create b"]  # 2 of 5 created, then stopped


def test_mid_pod_batch_stops_halfway_through_deletions_when_few_pods_are_created() -> None:
    def fault(name: str) -> None:
        raise Stop

    k, core = kube_with(fault)
    with pytest.raises(Stop):
        k.apply_pod_diff("ns", PodDiff(create=pods("a"), delete=["x", "y"], force=["z"]))
    assert core.calls == ["delete z", "delete x"]


def test_unarmed_the_batch_is_not_split_and_a_passing_hook_changes_nothing() -> None:
    k, core = kube_with(None)
    assert k.apply_pod_diff("ns", PodDiff(create=pods("a", "b", "c"), delete=["x"])) == (1, 3)
    hits: list[str] = []
    k2, core2 = kube_with(hits.append)
    assert k2.apply_pod_diff("ns", PodDiff(create=pods("a", "b", "c"), delete=["x"])) == (1, 3)
    assert hits == ["mid-pod-batch"]
    assert sorted(core.calls) == sorted(core2.calls)
