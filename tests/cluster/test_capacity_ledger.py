"""One capacity ledger for every topology's recovery, on the control plane.

Two topologies lose their node at the same moment. The only spare node has CPU
for both but memory for one: two recoveries planning onto it each on its own (CPU
only) would leave the surplus pods Pending ``Unschedulable`` while the status counted
them as recovered. With the ledger one topology recovers and the other waits until
capacity comes. The reference is the test's
own sums of pod requests per node against the allocatable it gave the nodes.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.ledger import Resources, pod_place, pod_requests
from backstop_testkit.sim.nodesim import NodeShape
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    Env,
    cleanup_fixture,
    env_fixture,
    node_ready,
    wait_for,
)

pytestmark = pytest.mark.cluster


env = env_fixture("ledger", node_cpu="1", nodes=1)
_cleanup = cleanup_fixture()


def pair(name: str, pool: str) -> dict[str, Any]:
    """Two tasks of 500m CPU and 400Mi memory: one node of 1 CPU holds them exactly."""
    op = {"resources": {"cpu": "500m", "memory": "400Mi"}, "reprocessingLatency": 0.5}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/pair:1",
            "recoveryLatencyBound": 10,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1, "mode": "auto"},
            "operators": [
                {"name": "src", **op},
                {"name": "sink", "inputs": [{"operator": "src"}], **op},
            ],
        },
    }


def add_node(env: Env, node: str, pool: str, shape: NodeShape) -> None:
    assert env.simulator is not None
    env.simulator.create(node, shape)
    env.core.patch_node(node, {"metadata": {"labels": {POOL_LABEL: pool}}})
    wait_for(lambda: node_ready(env.core, node), 30, f"{node} Ready")


def booked(env: Env) -> dict[str, Resources]:
    """Requests per node of every live pod bound or pinned there (any namespace)."""
    out: dict[str, Resources] = {}
    for p in env.core.list_pod_for_all_namespaces().items:
        if p.metadata.deletion_timestamp is not None:
            continue
        d = env.core.api_client.sanitize_for_serialization(p)
        node = pod_place(d)
        if node is not None:
            out[node] = out.get(node, Resources()) + pod_requests(d)
    return out


def unschedulable(env: Env, name: str) -> list[str]:
    return [
        p.metadata.name
        for p in env.pods(name)
        for c in (p.status.conditions or [])
        if c.type == "PodScheduled" and c.reason == "Unschedulable"
    ]


def test_fault06_two_recoveries_share_one_ledger(env: Env) -> None:
    pool = f"p{uuid.uuid4().hex[:5]}"
    nodes = [f"{pool}-a", f"{pool}-b", f"{pool}-spare", f"{pool}-late"]
    try:
        _scenario(env, pool, nodes)
    finally:
        for n in nodes:
            with contextlib.suppress(ApiException):
                env.core.delete_node(n)


def _scenario(env: Env, pool: str, nodes: list[str]) -> None:
    a, b, spare, late = nodes
    small = NodeShape(cpu="1", memory="1Gi")
    add_node(env, a, pool, small)
    env.create(pair("one", pool))
    env.wait_condition("one", "Ready", "True")
    add_node(env, b, pool, small)  # a is full: two's pods go to b
    env.create(pair("two", pool))
    env.wait_condition("two", "Ready", "True")
    for name, node in (("one", a), ("two", b)):
        assert {p.spec.node_name for p in env.pods(name)} == {node}
    # CPU for both recoveries (8 x 0.8), memory for one (2 x 400Mi of 1Gi)
    add_node(env, spare, pool, NodeShape(cpu="8", memory="1Gi"))
    assert env.simulator is not None
    env.simulator.kill(a)
    env.simulator.kill(b)

    def both_tried() -> bool:
        recs = [(env.get(n).get("status") or {}).get("recovery") or {} for n in ("one", "two")]
        return all(r.get("session") and r.get("lastAttempt") for r in recs) and any(
            r.get("recovered") for r in recs
        )

    wait_for(both_tried, 90, "both topologies to start recovering")
    time.sleep(3)  # the step's pods get created and scheduled
    alloc = Resources(8, 2**30, 110)
    assert booked(env).get(spare, Resources()).fits_in(alloc), booked(env)
    for name in ("one", "two"):
        assert unschedulable(env, name) == []
    recs = {n: env.get(n)["status"]["recovery"] for n in ("one", "two")}
    waiting = [n for n, r in recs.items() if r.get("active")]
    assert len(waiting) == 1, recs
    assert len(recs[waiting[0]]["failed"]) == 2
    assert "waiting for capacity" in recs[waiting[0]]["message"]
    # capacity comes: the waiting one recovers too, still within every node's allocatable
    add_node(env, late, pool, NodeShape(cpu="2", memory="2Gi"))
    env.wait_condition(waiting[0], "Ready", "True", timeout=90)
    final = booked(env)
    assert final.get(spare, Resources()).fits_in(alloc), final
    assert final.get(late, Resources()).fits_in(Resources(2, 2 * 2**30, 110)), final
    for name in ("one", "two"):
        assert unschedulable(env, name) == []
        assert all(p.status.phase == "Running" for p in env.pods(name))
