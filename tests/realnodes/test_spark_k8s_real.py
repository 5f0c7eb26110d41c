"""The re-optimization Job with a ``k8s://`` master on REAL nodes: Spark's executors are pods.

Not part of ``make test`` (CI has no room for it): ``make test-spark-k8s`` runs it. The same
two real nodes, word count and store as ``test_spark_job_real.py`` (whose fixture it shares),
but the operator's ``BACKSTOP_SPARK_MASTER`` is ``k8s://https://kubernetes.default.svc:443``
(the chart's ``reoptimization.sparkMaster``) and the Job's ServiceAccount has the chart's
rules for it (pods, a Service, ConfigMaps). The Job's pod is the Spark driver (client mode) on
a real node; Spark asks the API server for two small executor pods (``BACKSTOP_SPARK_CONF``:
100m CPU, 512 MiB heap + 768 MiB overhead each), from the Spark image with its ``executor``
entrypoint, which mount the store's host path like the driver and read the metrics there
(their logs name the files they read). The executors' node selector puts them on the real
node the driver is not on (the test labels that node once the driver's pod is placed). The
result ConfigMap comes back and the operator records ``Suggested`` with every operator's
latency measured. The test watches the executor pods while the Job runs (which real node,
which phase) and the peak memory of the driver's and the executors' containers (their memory
cgroups' ``max_usage_in_bytes`` on the host, page cache included) and JVMs (resident).

Needs root; outside CI it skips without it, under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.reoptjob import job_name
from backstop_testkit.support.kubetools import wait_for
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
EXECUTORS = "test.backstop.dev/spark-executors"
"""The executors' node selector: the test puts it on the real node the driver is NOT on, so
the executors run on another node than the driver (Spark's traffic crosses nodes); left to
the scheduler, both runs before this put them beside the driver."""
SPARK_CONF = {
    f"spark.kubernetes.executor.node.selector.{EXECUTORS}": "yes",
    "spark.executor.instances": "2",
    "spark.executor.cores": "1",
    "spark.kubernetes.executor.request.cores": "100m",
    "spark.executor.memory": "512m",
    "spark.executor.memoryOverhead": "768m",  # the JVM beyond its heap and a Python worker
}


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    extra = {"BACKSTOP_SPARK_MASTER": MASTER, "BACKSTOP_SPARK_CONF": json.dumps(SPARK_CONF)}
    with spark_env(cluster, kube, tmp_path_factory, K8S_RULES, extra) as e:
        yield e


CGROUP = Path("/sys/fs/cgroup/memory/k8s.io")
"""Where the real nodes' containerd puts a container's memory cgroup (cgroup v1, cgroupfs)."""


def _cgroup_peak_mib(pod: Any) -> float:
    """The pod's largest container memory peak so far, MiB (0 once the cgroup is gone)."""
    peak = 0.0
    for st in pod.status.container_statuses or []:
        if st.container_id:
            f = CGROUP / st.container_id.split("://")[-1] / "memory.max_usage_in_bytes"
            with contextlib.suppress(OSError, ValueError):
                peak = max(peak, int(f.read_text()) / 2**20)
    return peak


def _jvm_rss_kib() -> dict[str, int]:
    """Resident KiB of the host's Spark JVMs of this run, by role (driver, executor)."""
    out = subprocess.run(  # -ww: whole command lines (the class names come after the classpath)
        ["ps", "-ww", "-eo", "rss=,args="], capture_output=True, text=True, check=True
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
    created = env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, doc)
    # the runtime's part of the store: <store>/<namespace>/<name>/<uid> (TaskConfig.root)
    metrics = env.store / env.namespace / NAME / created["metadata"]["uid"] / "metrics"

    def metered() -> bool:  # every task has written a few rows
        env.alive()
        files = list((metrics / "tasks").glob("*.jsonl"))
        tasks = {p.name.split(".")[0] for p in files}
        return len(tasks) == sum(OPERATORS.values()) and all(
            len(p.read_text().splitlines()) >= 5 for p in files
        )

    wait_for(metered, 300, f"every task of {NAME} writing metrics", 1.0)
    print(f"topology running, metrics written: {time.monotonic() - t0:.0f}s")
    in_pod = IN_POD + "/{namespace}/{name}/{uid}/metrics"  # the operator fills them in
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, NAME, {
        "spec": {"reoptimization": {"apply": "suggest", "intervalSeconds": 86400,
                                    "metricsPath": in_pod}}})  # fmt: skip
    job = job_name(env.namespace, NAME)
    batch = client.BatchV1Api(env.kube)
    wait_for(lambda: batch.read_namespaced_job(job, env.namespace), 60, "the Job")
    t_job = time.monotonic()
    drivers: dict[str, str] = {}  # pod -> node
    executors: dict[str, tuple[str, str]] = {}  # pod -> (node, last phase seen)
    logs: dict[str, str] = {}  # executor pod -> its log when last seen running
    peak = {"driver": 0, "executor": 0}
    cgroup_mib = {"driver": 0.0, "executor": 0.0}

    def look() -> None:
        for p in env.core.list_namespaced_pod(env.namespace).items:
            labels = p.metadata.labels or {}
            role = "driver" if labels.get("job-name") == job else labels.get("spark-role")
            if role not in cgroup_mib or not p.spec.node_name:
                continue
            cgroup_mib[role] = max(cgroup_mib[role], _cgroup_peak_mib(p))
            if role == "driver":
                if not drivers:  # the executors' node: the other one
                    other = next(n for n in env.nodes if n != p.spec.node_name)
                    env.core.patch_node(other, {"metadata": {"labels": {EXECUTORS: "yes"}}})
                drivers[p.metadata.name] = p.spec.node_name
                assert p.spec.containers[0].image == SPARK_IMAGE
                continue
            executors[p.metadata.name] = (p.spec.node_name, p.status.phase)
            if p.status.phase == "Running":
                with contextlib.suppress(ApiException):
                    logs[p.metadata.name] = env.core.read_namespaced_pod_log(
                        p.metadata.name, env.namespace
                    )
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
        print(f"driver pods: {drivers}; executor pods: {executors}; JVM peak RSS KiB: {peak}; "
              f"container peak MiB (cgroup, page cache included): {cgroup_mib}")  # fmt: skip
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
    assert {node for node, _ in executors.values()} <= set(env.nodes) - set(drivers.values()), (
        executors
    )
    assert any(phase in ("Running", "Succeeded") for _, phase in executors.values()), executors
    # the executors read the metrics from their own mount of the store (Spark's FileScanRDD
    # logs every file split it reads, in the executor that reads it)
    where = f"/var/lib/backstop/{NAME}/metrics/"
    read = [ln for text in logs.values() for ln in text.splitlines()
            if "Reading File path: " in ln and where in ln]  # fmt: skip
    assert read, {k: v[-2000:] for k, v in logs.items()}
    print(f"{len(read)} metrics files read in the executors, e.g. {read[0]}")
    wait_for(lambda: not batch.list_namespaced_job(env.namespace).items, 60, "the Job deleted")

    def executors_gone() -> bool:  # owned by the driver's pod: deleted with the Job
        pods = env.core.list_namespaced_pod(env.namespace, label_selector="spark-role=executor")
        return not pods.items

    wait_for(executors_gone, 120, "the executor pods deleted with the Job")
    print(f"whole test: {time.monotonic() - t0:.0f}s")
