"""Two operator replicas and a Lease: one acts, the other takes over.

Two ``backstop operator --leader-elect`` processes run against the local control
plane. Only the Lease holder reconciles; the standby runs no handler. The leader
is SIGKILLed in steady state (no chance to give the Lease up), then a simulated
node carrying tasks is killed: the standby must take the Lease and a RecoveryPlan
must appear within the topology's grace period plus 15 s of the node turning
NotReady. Why: without the Lease a second copy would reconcile too, and with one copy
a dead operator would recover nothing.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop_testkit.sim.nodesim import NodeShape, Simulator
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    create_namespace,
    install_crds,
    node_ready,
    start_operator,
    stop_operator,
    wait_for,
)

pytestmark = pytest.mark.cluster
GRACE = 10.0
LEASE = "backstop-operator"


def elected(kubeconfig: str, namespace: str, log: Path) -> subprocess.Popen[bytes]:
    return start_operator(
        kubeconfig,
        namespace,
        log,
        ("--leader-elect", f"--leader-elect-namespace={namespace}", f"--leader-elect-name={LEASE}"),
    )


def holder(coord: client.CoordinationV1Api, namespace: str) -> str | None:
    try:
        lease = coord.read_namespaced_lease(LEASE, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity  # type: ignore[no-any-return]


def topology(name: str, pool: str) -> dict[str, Any]:
    op = {"resources": {"cpu": "1", "memory": "64Mi"}, "reprocessingLatency": 0.5}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/ha:1",
            "recoveryLatencyBound": 10,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": GRACE},
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "sink", "parallelism": 2, "inputs": [{"operator": "src"}], **op},
            ],
        },
    }


@pytest.fixture
def ha(cluster: str, kube: client.ApiClient, simulator: Simulator) -> Iterator[dict[str, Any]]:
    install_crds(kube)
    core = client.CoreV1Api(kube)
    ns = f"ha-{uuid.uuid4().hex[:6]}"
    create_namespace(core, ns)
    pool = f"ha{uuid.uuid4().hex[:4]}"
    nodes = [f"{pool}-{i}" for i in range(4)]
    for n in nodes:
        simulator.create(n, NodeShape(cpu="2"))
        core.patch_node(n, {"metadata": {"labels": {POOL_LABEL: pool}}})
    wait_for(lambda: all(node_ready(core, n) for n in nodes), 30, "pool Ready")
    state: dict[str, Any] = {"ns": ns, "pool": pool, "nodes": nodes, "procs": []}
    try:
        yield state
    finally:
        for proc in state["procs"]:
            if proc.poll() is None:
                stop_operator(proc)
        custom = client.CustomObjectsApi(kube)
        with contextlib.suppress(ApiException):  # no operator left to drop the finalizer
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, "streamtopologies", "ha", {"metadata": {"finalizers": []}}
            )
        core.delete_namespace(ns)
        for n in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(n)


def test_fault07_standby_takes_over_and_recovers_within_grace_plus_15s(
    cluster: str, kube: client.ApiClient, simulator: Simulator, ha: dict[str, Any], tmp_path: Path
) -> None:
    ns, core = ha["ns"], client.CoreV1Api(kube)
    coord = client.CoordinationV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    logs = [tmp_path / "op-0.log", tmp_path / "op-1.log"]
    procs = [elected(cluster, ns, logs[0]), elected(cluster, ns, logs[1])]
    ha["procs"] = procs
    who = wait_for(lambda: holder(coord, ns), 60, "a Lease holder")
    assert who is not None
    leader = next(i for i, p in enumerate(procs) if f"-{p.pid}-" in who)
    standby = 1 - leader

    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, "streamtopologies", topology("ha", ha["pool"])
    )

    def ready() -> dict[str, Any] | None:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, "streamtopologies", "ha"
        )
        conds = (obj.get("status") or {}).get("conditions") or []
        return obj if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) else None

    obj = wait_for(ready, 90, "the topology Ready")
    assert obj is not None
    # only one acts: the standby has not started Kopf, let alone a handler
    standby_log = logs[standby].read_text()
    assert "waits for Lease" in standby_log
    assert "leads" not in standby_log and "Handler" not in standby_log, standby_log
    assert "leads" in logs[leader].read_text()

    procs[leader].send_signal(signal.SIGKILL)  # no chance to give the Lease up
    procs[leader].wait()
    killed_at = time.time()
    victim = obj["status"]["plan"]["assignment"]["src-0"]
    simulator.kill(victim)

    def not_ready_since() -> float | None:
        for c in core.read_node(victim).status.conditions or []:
            if c.type == "Ready" and c.status != "True":
                return float(c.last_transition_time.timestamp())
        return None

    def recovery_plan() -> float | None:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "recoveryplans")["items"]
        stamps = [
            datetime.fromisoformat(p["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
            for p in items
        ]
        return min(s.timestamp() for s in stamps) if stamps else None

    down = wait_for(not_ready_since, 60, f"{victim} NotReady")
    planned = wait_for(recovery_plan, GRACE + 60, "a RecoveryPlan from the new leader")
    assert down is not None and planned is not None
    assert procs[standby].poll() is None, logs[standby].read_text()[-3000:]
    assert f"-{procs[standby].pid}-" in (holder(coord, ns) or "")
    assert "leads" in logs[standby].read_text()
    # the required bound: a recovery starts within the grace period + 15 s of the loss
    assert planned - down <= GRACE + 15, (planned - down, planned - killed_at)
