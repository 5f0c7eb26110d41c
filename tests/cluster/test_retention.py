"""RecoveryPlans (the newest N per topology are kept, so steps do not pile up) and deletion
with no operator running (no finalizer that only a running operator removes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner, build_recoveryplan
from backstop_testkit.sim.nodesim import Simulator
from backstop_testkit.support.kubetools import (
    EXAMPLE,
    Env,
    install_crds,
    stop_operator,
    topology_env,
    topology_manifest,
    wait_for,
)

STEP = {
    "algorithm": "auto",
    "recover": {"a-0": "n1"},
    "pending": [],
    "recoveredQueries": ["a-0"],
    "recoveredPriority": 1.0,
    "failedPriority": 0.0,
}


def topology(custom: client.CustomObjectsApi, namespace: str, name: str) -> Owner:
    doc = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "img",
            "recoveryLatencyBound": 2,
            "operators": [{"name": "a", "reprocessingLatency": 1}],
        },
    }
    obj = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "streamtopologies", doc)
    return Owner(name=name, namespace=namespace, uid=obj["metadata"]["uid"])


@pytest.mark.cluster
def test_fault10_recoveryplans_keep_the_newest_twenty_per_topology(
    kube: client.ApiClient, namespace: str
) -> None:
    install_crds(kube)
    custom = client.CustomObjectsApi(kube)
    busy, quiet = topology(custom, namespace, "busy"), topology(custom, namespace, "quiet")
    k = Kube(kube)  # the default history: 20
    for step in range(1, 24):  # one session of 23 steps
        plan = build_recoveryplan(
            busy, session="s1000", step_no=step, trigger="NodeReady", lost=["n9"], step=STEP
        )
        k.put_recoveryplan(plan, "Issued")
    for step in (1, 2):
        plan = build_recoveryplan(
            quiet, session="s1000", step_no=step, trigger="NodeLost", lost=["n9"], step=STEP
        )
        k.put_recoveryplan(plan, "Issued")

    def steps(topology: str) -> list[int]:
        items = custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "recoveryplans",
            label_selector=f"{GROUP}/topology={topology}",
        )["items"]
        return sorted(int(p["spec"]["step"]) for p in items)

    assert steps("busy") == list(range(4, 24)), "the 20 newest steps"
    assert steps("quiet") == [1, 2], "another topology's plans are its own"


@pytest.fixture
def env(
    cluster: str, kube: client.ApiClient, simulator: Simulator, tmp_path: Path
) -> Iterator[Env]:
    yield from topology_env(cluster, kube, simulator, tmp_path, node_cpu="4", nodes=4)


@pytest.mark.cluster
def test_fault10_delete_while_the_operator_is_down_removes_the_topology_and_its_pods(
    env: Env,
) -> None:
    """No finalizer: the API server deletes the object at once and the garbage collector
    its pods (owner references), with no operator running. Why: a Kopf finalizer would
    keep the object Terminating until an operator came back."""
    env.create(topology_manifest(EXAMPLE, "orphan"))
    obj = env.wait_condition("orphan", "Ready", "True", timeout=90)
    assert env.pods("orphan"), "the topology runs"
    assert obj["metadata"].get("finalizers") in (None, []), obj["metadata"]["finalizers"]
    assert env.proc is not None
    stop_operator(env.proc)
    env.proc = None
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", "orphan"
    )

    def deleted() -> bool:
        try:
            env.get("orphan")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    wait_for(deleted, 15, "the topology gone without an operator")
    # the garbage collector deletes the pods; no kubelet confirms on simulated nodes
    wait_for(
        lambda: all(p.metadata.deletion_timestamp for p in env.pods("orphan")),
        60,
        "every pod of the topology deleted by the garbage collector",
    )
    env.created.clear()


@pytest.mark.cluster
def test_a_topology_with_an_older_operators_finalizer_is_released_at_start(env: Env) -> None:
    """A topology that an older operator (whose Kopf daemons asked a finalizer) left with
    Kopf's finalizer loses it when this operator starts, and then deletes without one."""
    assert env.proc is not None
    stop_operator(env.proc)
    doc = topology_manifest(EXAMPLE, "older")
    doc["metadata"]["finalizers"] = [f"{GROUP}/finalizer"]
    env.create(doc)
    env.restart_operator()  # a new operator process finds the topology in its listing
    wait_for(
        lambda: env.get("older")["metadata"].get("finalizers") in (None, []),
        60,
        "Kopf's finalizer removed by the operator",
    )
    env.wait_condition("older", "Ready", "True", timeout=90)
    stop_operator(env.proc)
    env.proc = None
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", "older"
    )

    def deleted() -> bool:
        try:
            env.get("older")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    wait_for(deleted, 15, "the topology gone without an operator")
    env.created.clear()
