"""The re-optimization timer on the local control plane: suggest, and apply with auto.

The operator runs with both handler modules (``kopf run -m backstop.controller.handlers -m
backstop.controller.handlers_reopt``), so this works before handlers.py imports
handlers_reopt itself.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import load_topology
from backstop_testkit.sim.metricsgen import GeneratorParams, write_metrics
from backstop_testkit.sim.nodesim import Simulator
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    ROOT,
    condition,
    create_namespace,
    install_crds,
    labelled_nodes,
    start_operator,
    stop_operator,
    topology_manifest,
    wait_for,
)

pytestmark = pytest.mark.cluster
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
PLURAL = "streamtopologies"


class Env:
    def __init__(self, kube: client.ApiClient, namespace: str, metrics: Path, pool: str) -> None:
        self.pool = pool
        self.core = client.CoreV1Api(kube)
        self.custom = client.CustomObjectsApi(kube)
        self.namespace = namespace
        self.metrics = metrics

    def get(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return obj

    def pods(self, name: str) -> dict[str, Any]:
        items = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{GROUP}/topology={name}"
        ).items
        return {p.metadata.name: p for p in items if p.metadata.deletion_timestamp is None}

    def create(self, name: str, apply: str, min_improvement: float = 0.1) -> None:
        doc = topology_manifest(EXAMPLE, name)
        doc["spec"]["nodeSelector"] = {POOL_LABEL: self.pool}  # only this module's nodes
        doc["spec"]["reoptimization"] = {
            "apply": apply,
            "minImprovement": min_improvement,
            "metricsPath": str(self.metrics),
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, doc)

    def reoptimized(self, name: str, timeout: float = 180) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            obj = self.get(name)
            state = (obj.get("status") or {}).get("reoptimization") or {}
            return obj if state.get("result") and not state.get("running") else None

        found = wait_for(done, timeout, f"{name}: a finished re-optimization run", interval=1)
        assert found is not None
        return found

    def ready(self, name: str, timeout: float = 90) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            obj = self.get(name)
            c = condition(obj, "Ready")
            return obj if c and c["status"] == "True" else None

        found = wait_for(ok, timeout, f"{name}: Ready")
        assert found is not None
        return found


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: client.ApiClient, simulator: Simulator, tmp_path_factory: Any
) -> Iterator[Env]:
    install_crds(kube)
    core = client.CoreV1Api(kube)
    ns = f"ro-{uuid.uuid4().hex[:6]}"
    create_namespace(core, ns)
    pool = f"ro{uuid.uuid4().hex[:4]}"
    names = labelled_nodes(core, simulator, pool, 4, "4", wait=False)
    metrics = tmp_path_factory.mktemp("reopt-metrics")
    topo = load_topology(EXAMPLE)
    fleet = [
        topo.model_copy(update={"metadata": topo.metadata.model_copy(update={"name": n})})
        for n in ("suggest", "auto")
    ]
    write_metrics(metrics, fleet, GeneratorParams(rows=20_000, seed=5), "jsonl")
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    # `backstop operator` on the chart's rights (mode: local: Spark in the operator process)
    proc = start_operator(cluster, ns, log, extra_env={
        "BACKSTOP_REOPT_TICK": "2", "BACKSTOP_SPARK_MASTER": "local[2]",
        "BACKSTOP_REOPT_TIME_LIMIT": "0.5"})  # fmt: skip
    try:
        yield Env(kube, ns, metrics, pool)
    finally:
        # delete the topologies while the operator runs: it removes Kopf's finalizer
        custom = client.CustomObjectsApi(kube)
        for name in ("suggest", "auto"):
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        wait_for(
            lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"],
            60,
            "the topologies to be deleted",
        )
        stop_operator(proc)
        print(log.read_text()[-3000:])
        core.delete_namespace(ns)
        for n in names:
            with contextlib.suppress(ApiException):
                core.delete_node(n)


def test_suggest_records_the_recommendation_and_moves_nothing(env: Env) -> None:
    env.create("suggest", "suggest")
    before = env.ready("suggest")
    uids = {n: p.metadata.uid for n, p in env.pods("suggest").items()}
    obj = env.reoptimized("suggest")
    state = obj["status"]["reoptimization"]
    assert state["result"] == "Suggested", state
    assert state["applied"] is False
    rec = state["recommendation"]
    # the generator's true latencies are half the spec's: the recommendation needs fewer backups
    assert rec["backupCount"] < obj["status"]["plan"]["backupCount"]
    assert rec["boundSatisfied"] is True and state["improvement"] > 0
    assert {op["operator"] for op in rec["operators"]} == {
        op["name"] for op in obj["spec"]["operators"]
    }
    assert all(op["latency"] < op["specLatency"] for op in rec["operators"])
    assert obj["status"]["plan"] == before["status"]["plan"]
    assert {n: p.metadata.uid for n, p in env.pods("suggest").items()} == uids
    events = [
        e.reason
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.involved_object.name == "suggest"
    ]
    assert "Reoptimized" in events
    env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, "suggest")
    wait_for(lambda: not env.pods("suggest"), 60, "the suggest topology's pods to go")


def test_auto_applies_the_plan_moving_only_pods_that_must_move(env: Env) -> None:
    env.create("auto", "auto")
    first = env.ready("auto")
    plan_before = first["status"]["plan"]
    pods_before = env.pods("auto")
    obj = env.reoptimized("auto")
    state = obj["status"]["reoptimization"]
    assert state["result"] == "Applied", (state, plan_before)
    assert state["applied"] is True
    plan = obj["status"]["plan"]
    assert plan["generation"] == obj["metadata"]["generation"]
    assert plan["backupCount"] < plan_before["backupCount"]
    assert plan["assignment"] == state["recommendation"]["assignment"]

    def placed() -> dict[str, Any] | None:
        o = env.get("auto")
        c, r = condition(o, "Placed"), condition(o, "Ready")
        pods = env.pods("auto")
        on_plan = all(
            p.spec.node_name == plan["assignment"][p.metadata.labels[f"{GROUP}/task"]]
            for p in pods.values()
        )
        ok = c and c["status"] == "True" and r and r["status"] == "True"
        return o if ok and on_plan and len(pods) == len(plan["assignment"]) else None

    wait_for(placed, 90, "the pods to follow the re-optimized plan")
    after = env.pods("auto")
    for name, pod in after.items():
        task = pod.metadata.labels[f"{GROUP}/task"]
        old = pods_before[name]
        env_old = {v.name: v.value for v in old.spec.containers[0].env}
        env_new = {v.name: v.value for v in pod.spec.containers[0].env}
        unchanged = old.spec.node_name == plan["assignment"][task] and env_old == env_new
        if unchanged:
            assert pod.metadata.uid == old.metadata.uid, f"{name} was moved without a reason"
        else:
            assert pod.metadata.uid != old.metadata.uid
        assert env_new["BACKSTOP_UPSTREAM_BACKUP"] == (
            "true" if task in plan["backups"] else "false"
        )
