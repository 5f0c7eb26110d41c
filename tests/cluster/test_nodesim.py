"""The node simulator against the real control plane: Ready, Running, killed, replaced."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client

from backstop.domain.pinning import pinned, pinned_by_hostname
from backstop.k8s.nodes import node_is_ready
from backstop_testkit.sim.nodesim import NOT_READY_TAINT, NodeShape, Simulator

pytestmark = pytest.mark.cluster


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def ready(core: client.CoreV1Api, name: str) -> bool:
    return node_is_ready(core.read_node(name))


def test_nodes_turn_ready_and_run_scheduled_pods(
    simulator: Simulator, node_prefix: str, namespace: str
) -> None:
    core = simulator.core
    name = f"{node_prefix}-0"
    simulator.create(name, NodeShape(cpu="2"), zone="zone-a", rack="rack-1")
    wait_for(lambda: ready(core, name), 20, f"{name} Ready")
    node = core.read_node(name)
    assert node.status.allocatable["cpu"] == "2"
    assert node.metadata.labels["topology.kubernetes.io/zone"] == "zone-a"
    wait_for(
        lambda: not any(t.key == NOT_READY_TAINT for t in core.read_node(name).spec.taints or []),
        20,
        "the not-ready taint to go",
    )
    lease = client.CoordinationV1Api(simulator.core.api_client).read_namespaced_lease(
        name, "kube-node-lease"
    )
    assert lease.spec.holder_identity == name
    # the real scheduler binds the pod; the simulator runs it
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": name},
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}
                ],
            },
        },
    )
    wait_for(
        lambda: core.read_namespaced_pod("p", namespace).status.phase == "Running",
        30,
        "the pod to run",
    )
    assert core.read_namespaced_pod("p", namespace).spec.node_name == name
    # deleting a pod on a live node completes, as a kubelet would make it
    core.delete_namespaced_pod("p", namespace)
    wait_for(
        lambda: (
            not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "p"]
        ),
        20,
        "the pod deletion to finish",
    )


def test_a_pod_pinned_by_node_name_runs_on_a_node_whose_hostname_label_differs(
    simulator: Simulator, node_prefix: str, namespace: str
) -> None:
    """The task pods' pin (:func:`backstop.domain.pinning.pinned`) names the Node, not its
    hostname label: the scheduler binds the pod and the simulator runs it there."""
    core = simulator.core
    name = f"{node_prefix}-0"
    simulator.create(name, NodeShape(cpu="2"), hostname=f"{name}-host")
    wait_for(lambda: ready(core, name), 20, f"{name} Ready")
    assert core.read_node(name).metadata.labels["kubernetes.io/hostname"] == f"{name}-host"
    wait_for(
        lambda: not any(t.key == NOT_READY_TAINT for t in core.read_node(name).spec.taints or []),
        20,
        "the not-ready taint to go",
    )
    for pod, pin in (("by-name", pinned(name)), ("by-label", pinned_by_hostname(name))):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": pod},
                "spec": {
                    "affinity": pin,
                    "containers": [{"name": "c", "image": "x"}],
                },
            },
        )
    wait_for(
        lambda: core.read_namespaced_pod("by-name", namespace).status.phase == "Running",
        30,
        "the pod pinned by name to run",
    )
    assert core.read_namespaced_pod("by-name", namespace).spec.node_name == name
    # the label pin names no node here: the scheduler leaves that pod unbound
    assert core.read_namespaced_pod("by-label", namespace).spec.node_name is None


def test_killed_node_turns_not_ready_and_replacement_turns_ready(
    simulator: Simulator, node_prefix: str
) -> None:
    core = simulator.core
    victim, spare = f"{node_prefix}-0", f"{node_prefix}-1"
    simulator.create(victim, NodeShape(cpu="2"))
    wait_for(lambda: ready(core, victim), 20, f"{victim} Ready")
    t0 = time.monotonic()
    simulator.kill(victim)
    simulator.create(spare, NodeShape(cpu="4"), ready_after=4.0)
    time.sleep(1.5)
    assert not ready(core, spare), "a replacement must not be Ready before its delay"
    wait_for(lambda: ready(core, spare), 20, f"{spare} Ready after its delay")
    # the real node-lifecycle controller (grace 15 s in the tests) notices the missing heartbeats
    wait_for(lambda: not ready(core, victim), 60, f"{victim} NotReady")
    assert time.monotonic() - t0 >= 10, "NotReady must come from missed heartbeats, not at once"
    taints = {t.key for t in core.read_node(victim).spec.taints or []}
    assert "node.kubernetes.io/unreachable" in taints
    simulator.revive(victim)
    wait_for(lambda: ready(core, victim), 30, f"{victim} Ready again after revive")
