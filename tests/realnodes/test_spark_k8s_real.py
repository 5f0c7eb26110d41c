"""The re-optimization Job with a ``k8s://`` master on REAL nodes: Spark's executors are pods.

Not part of ``make test`` (CI has no room for it): ``make test-spark-k8s`` runs it. The same
two real nodes, word count and store as ``test_spark_job_real.py`` (whose fixture it shares),
but the operator's ``BACKSTOP_SPARK_MASTER`` is ``k8s://https://kubernetes.default.svc:443``
(the chart's ``reoptimization.sparkMaster``) and the Job's ServiceAccount has the chart's
rules for it (pods, a Service, ConfigMaps). The Job's pod is the Spark driver (client mode) on
a real node; Spark asks the API server for one small executor pod
(``BACKSTOP_SPARK_CONF``: 100m CPU, 512 MiB heap), from the Spark image with its ``executor``
entrypoint, which mounts the store's host path like the driver and reads the metrics there;
the result ConfigMap comes back and the operator records ``Suggested`` with every operator's
latency measured. The test watches the executor pods while the Job runs (which real node,
which phase) and the peak resident memory of the driver and executor JVMs on the host.

Needs root; outside CI it skips without it, under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.reoptjob import job_name
from tests.realnodes.test_spark_job_real import (
    IN_POD,
    JOB_RULES,
    NAME,
    OPERATORS,
    PLURAL,
    SPARK_IMAGE,
    Env,
    _wordcount,
    spark_env,
)
from tests.support.kubetools import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark_image, pytest.mark.timeout(2700)]

MASTER = "k8s://https://kubernetes.default.svc:443"
K8S_RULES: list[dict[str, Any]] = [
    *JOB_RULES,  # charts/backstop/templates/reoptimization-rbac.yaml, sparkOnK8s
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["get", "list", "delete", "deletecollection"]},
]  # fmt: skip
SPARK_CONF = {
    "spark.executor.instances": "1",
    "spark.executor.cores": "1",
    "spark.kubernetes.executor.request.cores": "100m",
    "spark.executor.memory": "512m",
    "spark.executor.memoryOverhead": "384m",
}


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    extra = {"BACKSTOP_SPARK_MASTER": MASTER, "BACKSTOP_SPARK_CONF": json.dumps(SPARK_CONF)}
    with spark_env(cluster, kube, tmp_path_factory, K8S_RULES, extra) as e:
        yield e


def _jvm_rss_kib() -> dict[str, int]:
    """Resident KiB of the host's Spark JVMs of this run, by role (driver, executor)."""
    out = subprocess.run(
        ["ps", "-eo", "rss=,args="], capture_output=True, text=True, check=True
    ).stdout
    rss = {"driver": 0, "executor": 0}
    for line in out.splitlines():
        size, _, args = line.strip().partition(" ")
        if "java" not in args.split(" ", 1)[0]:
            continue
        if "KubernetesExecutorBackend" in args:
            rss["executor"] = max(rss["executor"], int(size))
        elif "backstop.jobs.reoptimize" in args or "pyspark-shell" in args:
            rss["driver"] = max(rss["driver"], int(size))
    return rss


def test_a_k8s_master_runs_executor_pods_on_real_nodes_and_the_operator_suggests(
    env: Env,
) -> None:
    t0 = time.monotonic()
    doc = _wordcount(env.store)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, doc)
    metrics = env.store / NAME / "metrics"

    def metered() -> bool:  # every task has written a few rows
        env.alive()
        files = list((metrics / "tasks").glob("*.jsonl"))
        tasks = {p.name.split(".")[0] for p in files}
        return len(tasks) == sum(OPERATORS.values()) and all(
            len(p.read_text().splitlines()) >= 5 for p in files
        )

    wait_for(metered, 300, f"every task of {NAME} writing metrics", 1.0)
    print(f"topology running, metrics written: {time.monotonic() - t0:.0f}s")
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, NAME, {
        "spec": {"reoptimization": {"apply": "suggest", "intervalSeconds": 86400,
                                    "metricsPath": f"{IN_POD}/{NAME}/metrics"}}})  # fmt: skip
    job = job_name(env.namespace, NAME)
    batch = client.BatchV1Api(env.kube)
    wait_for(lambda: batch.read_namespaced_job(job, env.namespace), 60, "the Job")
    t_job = time.monotonic()
    drivers: dict[str, str] = {}  # pod -> node
    executors: dict[str, tuple[str, str]] = {}  # pod -> (node, last phase seen)
    peak = {"driver": 0, "executor": 0}

    def look() -> None:
        for p in env.core.list_namespaced_pod(env.namespace).items:
            labels = p.metadata.labels or {}
            if labels.get("job-name") == job and p.spec.node_name:
                drivers[p.metadata.name] = p.spec.node_name
                assert p.spec.containers[0].image == SPARK_IMAGE
            if labels.get("spark-role") == "executor" and p.spec.node_name:
                executors[p.metadata.name] = (p.spec.node_name, p.status.phase)
        for role, kib in _jvm_rss_kib().items():
            peak[role] = max(peak[role], kib)

    def concluded() -> dict[str, Any] | None:
        env.alive()
        look()
        state = (env.topology().get("status") or {}).get("reoptimization") or {}
        return state if state.get("result") and not state.get("running") else None

    try:  # the Job's own deadline is the operator's BACKSTOP_REOPT_TIMEOUT, 900 s
        state = wait_for(concluded, 960, "the operator to read the Job's recommendation", 1.0)
    except AssertionError:
        for pod in [*drivers, *executors]:  # what the driver and executors said, to see why
            with contextlib.suppress(ApiException):
                print(f"--- {pod}:\n" + env.core.read_namespaced_pod_log(pod, env.namespace))
        raise
    finally:
        print(f"driver pods: {drivers}; executor pods: {executors}; peak RSS KiB: {peak}")
    assert state is not None
    print(f"the Job's run: {time.monotonic() - t_job:.0f}s ({state.get('durationSeconds')}s "
          "recorded)")  # fmt: skip
    assert state["result"] == "Suggested", (state["result"], state.get("message"))
    ops = {o["operator"]: o for o in state["recommendation"]["operators"]}
    assert set(ops) == set(OPERATORS)
    assert all(o["measured"] for o in ops.values()), ops  # the metrics were read
    # the driver ran in the Job's pod on a real node, the executor as a pod of its own
    assert len(drivers) == 1 and set(drivers.values()) <= set(env.nodes), drivers
    assert executors, "Spark started no executor pod"
    assert {node for node, _ in executors.values()} <= set(env.nodes), executors
    assert any(phase in ("Running", "Succeeded") for _, phase in executors.values()), executors
    wait_for(lambda: not batch.list_namespaced_job(env.namespace).items, 60, "the Job deleted")

    def executors_gone() -> bool:  # owned by the driver's pod: deleted with the Job
        pods = env.core.list_namespaced_pod(env.namespace, label_selector="spark-role=executor")
        return not pods.items

    wait_for(executors_gone, 120, "the executor pods deleted with the Job")
    print(f"whole test: {time.monotonic() - t0:.0f}s")
