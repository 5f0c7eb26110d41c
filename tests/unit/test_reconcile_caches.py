"""A reconcile reads the cluster from the watch caches, not by LIST.

Why: listing every node and every pod of the cluster on each reconcile costs seconds
and hundreds of MiB at thousands of pods. Here the reconcile handler runs with Kopf's arguments (the
node index, the pod index, the shared ledger) against a client whose every API
call is recorded: it must plan and create the pods with no ``list_*`` call at all.
The expected pod count and nodes come from the test's own topology and nodes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, cast
from unittest import mock

import kopf
import pytest
from kubernetes import client

from backstop.controller import handlers, metrics
from backstop.controller import memo as topology_memo
from backstop.domain.constants import ANN_NODE, LABEL_TOPOLOGY
from backstop.domain.incidents import node_info
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import CapacityLedger

NS = "team"
GI = 2**30

PEERS_SECRET = client.V1Secret(data={"token": "dG9r"})
"""The topology's peer-token Secret, as the API returns it (read before any pod)."""


def real_creations(kube: Any) -> int:
    """Pods created for real (a new spec's server-side dry runs are not pods)."""
    calls = kube.core.create_namespaced_pod.call_args_list
    return len([c for c in calls if not c.kwargs.get("dry_run")])


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
    "store": {"objectStore": {"bucket": "state", "secretRef": {"name": "s3"}}},
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
    kube.core.read_namespaced_secret.return_value = PEERS_SECRET  # the peer token
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
    created = [
        c.args[1]
        for c in kube.core.create_namespaced_pod.call_args_list
        if not c.kwargs.get("dry_run")
    ]
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
    got = asyncio.run(
        index(namespace=NS, labels=pod["metadata"]["labels"], body=kopf.Body(cast(Any, pod)))
    )
    kept = got[(NS, "t")]
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {LABEL_TOPOLOGY: "t"}
    assert kept["spec"] == {"nodeName": "a"} and kept["status"] == {"phase": "Running"}
    assert "managedFields" in pod["metadata"]  # Kopf's own copy is not changed


def test_concurrent_reconciles_of_many_topologies_never_overbook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reconciles of different topologies run at once (Kopf's threads)
    against one ledger. Six topologies of 4 × 500m CPU race for 3 nodes of 2 CPU
    (room for three): the pods created, summed per node by the test from the manifests,
    never exceed a node, and every topology that got pods got all of them."""
    kube = Kube(client.ApiClient())
    kube.core = mock.MagicMock(spec=client.CoreV1Api)
    kube.core.read_namespaced_secret.return_value = PEERS_SECRET  # the peer token
    kube.custom = mock.MagicMock(spec=client.CustomObjectsApi)
    monkeypatch.setattr(handlers, "kube", lambda: kube)
    monkeypatch.setattr(handlers, "post_event", lambda *a, **k: None)
    ledger = CapacityLedger()
    ledger.replace_pods([])
    nodes = [node(n, "2") for n in ("a", "b", "c")]
    node_index = {n["metadata"]["name"]: [node_info(n)] for n in nodes}
    memo = kopf.Memo(ledger=ledger, metrics=metrics.OperatorMetrics())
    start = threading.Barrier(6)
    outcome: dict[str, str] = {}

    def run(i: int) -> None:
        meta = {"name": f"t{i}", "namespace": NS, "uid": f"u{i}", "generation": 1}
        reconcile: Any = handlers.reconcile
        start.wait()
        try:
            reconcile(
                body={"metadata": meta, "spec": SPEC}, spec=SPEC, meta=meta, status={},
                name=f"t{i}", namespace=NS, patch=kopf.Patch(), logger=logging.getLogger("t"),
                memo=memo, node_index=node_index, pods_by_topology={},
            )  # fmt: skip
            outcome[f"t{i}"] = "placed"
        except kopf.TemporaryError as err:
            outcome[f"t{i}"] = str(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    created = [
        c.args[1]
        for c in kube.core.create_namespaced_pod.call_args_list
        if not c.kwargs.get("dry_run")
    ]
    per_node: dict[str, float] = {}
    per_topology: dict[str, int] = {}
    for p in created:
        cpu = p["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        assert cpu == "500m"
        where = p["metadata"]["annotations"][ANN_NODE]
        per_node[where] = per_node.get(where, 0.0) + 0.5
        topo = p["metadata"]["labels"][LABEL_TOPOLOGY]
        per_topology[topo] = per_topology.get(topo, 0) + 1
    assert per_node and all(cpu <= 2.0 for cpu in per_node.values()), per_node
    assert set(per_topology.values()) == {4}, per_topology
    assert len(per_topology) == 3  # 6 CPU of room, 2 CPU per topology
    assert sorted(per_topology) == sorted(t for t, o in outcome.items() if o == "placed")


def test_a_reconcile_before_the_first_pod_listing_is_retried_soon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a cluster with thousands of pods the feed's first listing takes a while; the
    reconcile waited 30 s in the booking, failed with ``Overcommitted`` and Kopf retried
    it only after its default 60 s (found by scale-e2e's 10k-task runs)."""
    kube = Kube(client.ApiClient())
    kube.core = mock.MagicMock(spec=client.CoreV1Api)
    kube.core.read_namespaced_secret.return_value = PEERS_SECRET  # the peer token
    kube.custom = mock.MagicMock(spec=client.CustomObjectsApi)
    monkeypatch.setattr(handlers, "kube", lambda: kube)
    monkeypatch.setattr(handlers, "post_event", lambda *a, **k: None)
    ledger = CapacityLedger()  # never listed
    nodes = [node("a", "2"), node("b", "2")]
    meta = {"name": "t", "namespace": NS, "uid": "u1", "generation": 1}
    reconcile: Any = handlers.reconcile
    with pytest.raises(kopf.TemporaryError, match="not listed the pods yet") as err:
        reconcile(
            body={"metadata": meta, "spec": SPEC}, spec=SPEC, meta=meta, status={}, name="t",
            namespace=NS, patch=kopf.Patch(), logger=logging.getLogger("t"),
            memo=kopf.Memo(ledger=ledger, metrics=metrics.OperatorMetrics()),
            node_index={n["metadata"]["name"]: [node_info(n)] for n in nodes},
            pods_by_topology={},
        )  # fmt: skip
    assert err.value.delay is not None and err.value.delay <= 5
    assert real_creations(kube) == 0


def test_the_indexes_are_updated_while_every_executor_thread_is_busy() -> None:
    """A fleet being created holds all of Kopf's handler threads with reconciles (and
    each supervise daemon one more). The pod and node indexes are async functions, which
    Kopf runs on its event loop, so no pod event or node NotReady waits in the executor's
    queue behind those threads. Invoked here as Kopf invokes a handler, with the
    executor's only thread blocked."""
    from kopf._core.actions import invocation

    async def main() -> tuple[float, list[Any]]:
        settings = kopf.OperatorSettings()
        settings.execution.max_workers = 1
        release = threading.Event()
        loop = asyncio.get_running_loop()
        loop.run_in_executor(settings.execution.executor, release.wait)
        loop.call_later(5.0, release.set)  # the busy thread is done in 5 s
        t0 = time.monotonic()
        try:
            pod = {"metadata": {"namespace": NS, "name": "p", "labels": {LABEL_TOPOLOGY: "t"}}}
            body = kopf.Body(cast(Any, node("a", "2")))
            memo = kopf.Memo(node_watch=watch)
            calls = [
                invocation.invoke(handlers.node_index, settings=settings,
                                  kwargs={"name": "a", "body": body, "memo": memo}),
                invocation.invoke(handlers.pods_by_topology, settings=settings,
                                  kwargs={"namespace": NS, "labels": {LABEL_TOPOLOGY: "t"},
                                          "body": kopf.Body(cast(Any, pod))}),
                invocation.invoke(handlers.topologies, settings=settings,
                                  kwargs={"namespace": NS, "name": "t", "uid": "u"}),
            ]  # fmt: skip
            got = list(await asyncio.gather(*calls))
            return time.monotonic() - t0, got
        finally:
            release.set()

    watch = topology_memo.NodeWatch()
    waited, got = asyncio.run(main())
    assert watch.changes == 1  # a new node: the supervise daemons look at once
    assert waited < 2.5, f"the index updates waited {waited:.1f} s for the busy executor"
    assert got[0]["a"].name == "a" and got[0]["a"].ready
    assert (NS, "t") in got[1] and got[2] == {(NS, "t"): "u"}
