"""Issue 12, item 10 (RecoveryPlans): the newest N per topology are kept, older ones deleted.

Before, every step of every recovery, restore and consolidation left a RecoveryPlan forever.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner, build_recoveryplan
from tests.support.kubetools import install_crds

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
