"""The reconcile around its context: the desired pods are built once per plan, and the
conditions come from the typed status.

The reconcile handler runs as Kopf runs it, against a client whose API calls are
mocks; the first run plans and records a plan, the second resumes the recorded one
(the status the first wrote). Each counts the builds of the plan's pods.
"""

from __future__ import annotations

import logging
from typing import Any
from unittest import mock

import kopf
import pytest
from kubernetes import client

from backstop.controller import handlers, metrics
from backstop.controller import reconcile as reconciling
from backstop.domain.incidents import node_info
from backstop.domain.status import (
    PlanStatus,
    RecoveryStatus,
    TopologyStatus,
    derive_conditions,
    pod_state,
)
from backstop.k8s import manifests
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import CapacityLedger

NS = "team"
SPEC = {
    "image": "registry.example/t:1",
    "recoveryLatencyBound": 10,
    "store": {"objectStore": {"bucket": "state", "secretRef": {"name": "s3"}}},
    "operators": [
        {"name": "src", "parallelism": 2, "resources": {"cpu": "500m"}, "reprocessingLatency": 1},
        {
            "name": "sink",
            "parallelism": 2,
            "resources": {"cpu": "500m"},
            "reprocessingLatency": 1,
            "inputs": [{"operator": "src"}],
        },
    ],
}


def real_creations(kube: Any) -> int:
    """Pods created for real (a new spec's server-side dry runs are not pods)."""
    calls = kube.core.create_namespaced_pod.call_args_list
    return len([c for c in calls if not c.kwargs.get("dry_run")])


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def run(kube: Kube, ledger: CapacityLedger, status: dict[str, Any]) -> kopf.Patch:
    meta = {"name": "t", "namespace": NS, "uid": "u1", "generation": 1}
    nodes = [node("a"), node("b")]
    patch = kopf.Patch()
    reconcile: Any = handlers.reconcile  # Kopf passes these by keyword
    reconcile(
        body={"metadata": meta, "spec": SPEC, "status": status}, spec=SPEC, meta=meta,
        status=status, name="t", namespace=NS, patch=patch, logger=logging.getLogger("t"),
        memo=kopf.Memo(ledger=ledger, metrics=metrics.OperatorMetrics()),
        node_index={n["metadata"]["name"]: [node_info(n)] for n in nodes},
        pods_by_topology={},
    )  # fmt: skip
    return patch


def test_a_reconcile_builds_the_plans_pods_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(client.ApiClient())
    kube.core = mock.MagicMock(spec=client.CoreV1Api)
    # the topology's peer token, read from its Secret before the pods that use it
    kube.core.read_namespaced_secret.return_value = client.V1Secret(data={"token": "dG9r"})
    kube.custom = mock.MagicMock(spec=client.CustomObjectsApi)
    monkeypatch.setattr(handlers, "kube", lambda: kube)
    monkeypatch.setattr(handlers, "post_event", lambda *a, **k: None)
    builds: list[int] = []
    build = manifests.desired_pods

    def counted(*args: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
        builds.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(reconciling, "desired_pods", counted)
    ledger = CapacityLedger()
    ledger.replace_pods([])

    run(kube, ledger, {})  # plans: books, records with its rollout, creates the pods
    assert len(builds) == 1
    written = kube.custom.patch_namespaced_custom_object_status.call_args.args[-1]["status"]
    assert written["plan"]["generation"] == 1 and len(written["plan"]["assignment"]) == 4
    assert real_creations(kube) == 4

    builds.clear()
    run(kube, ledger, written)  # resumes the recorded plan: holds, rollout, pods
    assert len(builds) == 1
    assert real_creations(kube) == 8  # the pod index is empty here


def test_the_conditions_of_the_typed_status_are_those_of_its_dump() -> None:
    status = TopologyStatus(
        plan=PlanStatus(
            generation=2,
            tasks=2,
            backup_count=0,
            nodes_used=1,
            algorithm="greedy",
            worst_recovery_latency=3.5,
            bound=4.0,
            bound_satisfied=True,
            assignment={"a-0": "n1", "a-1": "n1"},
        ),
        recovery=RecoveryStatus(active=False, message="session s1 recovered 1 tasks"),
    )
    pod = {
        "metadata": {"name": "t--a-0", "labels": {"streams.backstop.dev/task": "a-0"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    pods = [pod_state(pod)]
    typed = derive_conditions(2, status, pods)
    assert typed == derive_conditions(2, status.dump(), pods)
    by_type = {c["type"]: c for c in typed}
    assert by_type["Ready"]["message"] == "1/2 pods running"
    assert by_type["Placed"]["reason"] == "Placing"  # a-1 has no pod
    assert by_type["Recovering"]["status"] == "False"
