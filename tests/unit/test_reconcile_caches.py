"""Issue 15, item 1: a reconcile reads the cluster from the watch caches, not by LIST.

Before, every reconcile listed every node and every pod of the cluster
(``Kube.view``) and the topology's pods again at the end; 5,000 pods took 6.4 s
and +203 MiB per list. Here the reconcile handler runs with Kopf's arguments (the
node index, the pod index, the shared ledger) against a client whose every API
call is recorded: it must plan and create the pods with no ``list_*`` call at all.
The expected pod count and nodes come from the test's own topology and nodes.
"""

from __future__ import annotations

import logging
from typing import Any, cast
from unittest import mock

import kopf
import pytest
from kubernetes import client

from backstop.controller import handlers, metrics
from backstop.domain.constants import ANN_NODE, LABEL_TOPOLOGY
from backstop.domain.incidents import node_info
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import CapacityLedger

NS = "team"
GI = 2**30


def node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "p"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def other_pod(name: str, on: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "kube-system", "name": name},
        "spec": {"nodeName": on, "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }


SPEC = {
    "image": "registry.example/t:1",
    "recoveryLatencyBound": 10,
    "nodeSelector": {"pool": "p"},
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


def test_a_reconcile_lists_nothing_and_plans_on_the_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = Kube(client.ApiClient())
    kube.core = mock.MagicMock(spec=client.CoreV1Api)
    kube.custom = mock.MagicMock(spec=client.CustomObjectsApi)
    monkeypatch.setattr(handlers, "kube", lambda: kube)
    monkeypatch.setattr(handlers, "post_event", lambda *a, **k: None)
    ledger = CapacityLedger()
    # "full" is taken by another namespace's pod: only the ledger (the pod feed) knows
    ledger.replace_pods([other_pod("dns", "full", "2")])
    nodes = [node("a", "2"), node("b", "2"), node("full", "2")]
    node_index = {n["metadata"]["name"]: [node_info(n)] for n in nodes}
    body: dict[str, Any] = {
        "metadata": {"name": "t", "namespace": NS, "uid": "u1", "generation": 1},
        "spec": SPEC,
        "status": {},
    }
    # a pod of a task the spec no longer has, in the pod index only: deleted
    stale = {
        "metadata": {"namespace": NS, "name": "t--gone-0", "labels": {LABEL_TOPOLOGY: "t"}},
        "spec": {"nodeName": "a", "containers": [{"name": "task"}]},
        "status": {"phase": "Running"},
    }
    patch = kopf.Patch()
    reconcile: Any = handlers.reconcile  # Kopf passes these by keyword
    with pytest.raises(kopf.TemporaryError, match="waiting for 1 pods to terminate"):
        reconcile(
            body=body,
            spec=SPEC,
            meta=body["metadata"],
            status={},
            name="t",
            namespace=NS,
            patch=patch,
            logger=logging.getLogger("test"),
            memo=kopf.Memo(ledger=ledger, metrics=metrics.OperatorMetrics()),
            node_index=node_index,
            pods_by_topology={(NS, "t"): [kopf.Body(cast(kopf.RawBody, stale))]},
        )
    calls = [c[0] for c in [*kube.core.method_calls, *kube.custom.method_calls]]
    assert [c for c in calls if c.startswith("list_")] == []
    created = [c.args[1] for c in kube.core.create_namespaced_pod.call_args_list]
    assert len(created) == 4  # 2 + 2 tasks, no backups asked for on 2-CPU nodes
    placed = {p["metadata"]["annotations"][ANN_NODE] for p in created}
    assert placed <= {"a", "b"}  # never the node the other namespace's pod fills
    deleted = [c.args[0] for c in kube.core.delete_namespaced_pod.call_args_list]
    assert deleted == ["t--gone-0"]
    # the new pods are held on the ledger until they show up: nothing more fits there
    held = ledger.holds("team/t")
    assert len(held) == 4


def test_the_pod_index_keeps_pods_without_managed_fields() -> None:
    """At 10k task pods the index held every pod whole; the server's field-ownership
    records (``managedFields``, read by nothing in the operator) are left out."""
    pod: dict[str, Any] = {
        "metadata": {
            "namespace": NS,
            "name": "t--src-0",
            "labels": {LABEL_TOPOLOGY: "t"},
            "managedFields": [{"manager": "kube-scheduler", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"nodeName": "a"},
        "status": {"phase": "Running"},
    }
    index: Any = handlers.pods_by_topology
    got = index(namespace=NS, labels=pod["metadata"]["labels"], body=kopf.Body(cast(Any, pod)))
    kept = got[(NS, "t")]
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {LABEL_TOPOLOGY: "t"}
    assert kept["spec"] == {"nodeName": "a"} and kept["status"] == {"phase": "Running"}
    assert "managedFields" in pod["metadata"]  # Kopf's own copy is not changed
