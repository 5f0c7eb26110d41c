"""``reoptimization.mode: job`` on REAL nodes: Spark in its own image reads the tasks' metrics.

Not part of ``make test`` (the Spark image is 1.5 GB and its first build takes minutes, and
CI is at 25 of its 30 minutes): ``make test-spark-job`` runs it. What it runs, end to end:

- two real nodes (kubelet + containerd each, ``hack/real-node.sh``) that import the task-runtime
  image and the Spark image (``IMAGES=spark hack/images.sh``: ``backstop/spark:0.2.0``), and
  kube-proxy on the host, so that a pod reaches the API server at ``10.0.0.1:443``;
- the operator (a host process, as in the other operator tests) in ``mode: job``, with the
  chart's Job ServiceAccount (it may only create ConfigMaps) and the metrics volume the
  chart mounts (``reoptimization.metricsHostPath``: the shared store's host directory);
- the word count example on the task runtime, its tasks writing their metrics
  (``<store>/<namespace>/<topology>/<uid>/metrics/{tasks,nodes}/*.jsonl``, every second
  here) while words flow;
- then ``spec.reoptimization`` (``apply: suggest``): the operator creates the Job, its pod runs
  ``python -m backstop.jobs.reoptimize`` in the Spark image on a real node, reads the metrics
  from the mounted volume, and hands the recommendation back through the result ConfigMap;
  the operator records it (``Suggested``), deletes the Job and its ConfigMaps, and
  ``backstop reoptimize NAME --approve`` applies it: ``status.plan`` is the recommended plan,
  every task pod runs on the node it names, and the bound holds under the failure-effect
  evaluator with the estimated latencies.

Needs root; outside CI it skips without it, under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import expand, parse_topology
from backstop.k8s.reoptjob import job_name
from backstop_testkit.support.kubetools import (
    create_namespace,
    install_crds,
    start_operator,
    stop_operator,
    wait_for,
)
from backstop_testkit.support.realnodes import (
    CACHE,
    ROOT,
    build_runtime_image,
    real_node,
    real_node_pool,
    require_root,
)
from backstop_testkit.support.runtime_data import WORDCOUNT, write_input
from planners.evaluate import worst_node_failure

pytestmark = [pytest.mark.cluster, pytest.mark.spark_image, pytest.mark.timeout(2700)]

POOL = "test.backstop.dev/spark-pool"
SA = "reopt-job"
SPARK_IMAGE = "backstop/spark:0.2.0"
IN_POD = "/var/lib/backstop"
NAME = "wcspark"
PLURAL = "streamtopologies"
OPERATORS = {"source": 2, "tokenize": 2, "count": 2, "sink": 1}  # examples/wordcount.yaml


def build_spark_image(into: Path) -> None:
    """``IMAGES=spark hack/images.sh`` (warm: the pip layer cached; cold: minutes); the
    archive is linked into ``into``, which the real nodes import when they start."""
    env = {**os.environ, "IMAGES": "spark", "K8S_RUN_DIR": str(CACHE / "no-cluster")}
    t = time.monotonic()
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "images.sh")],
        capture_output=True, text=True, timeout=1800, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"IMAGES=spark hack/images.sh:\n{proc.stderr[-4000:]}"
    print(f"spark image: {time.monotonic() - t:.0f}s")
    for name in ("spark.tar", "spark.id"):
        (into / name).symlink_to(CACHE / "images" / name)


@dataclass
class Env:
    cluster: str
    kube: client.ApiClient
    namespace: str
    nodes: list[str]
    store: Path
    operator_log: Path
    operator: subprocess.Popen[bytes]

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.kube)

    def alive(self) -> None:
        assert self.operator.poll() is None, "operator exited:\n" + self.operator_log.read_text()

    def topology(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, NAME
        )
        return obj


JOB_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]  # fmt: skip
"""The chart's Job ServiceAccount with a ``local`` master: it may create ConfigMaps, no more."""


@contextlib.contextmanager
def spark_env(
    cluster: str,
    kube: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
    rules: list[dict[str, Any]],
    extra_env: dict[str, str],
) -> Iterator[Env]:
    """Two real nodes with both images, the word count's store, the operator in ``mode: job``
    with ``extra_env`` on top, the Job's ServiceAccount with ``rules``; all gone after."""
    require_root()
    images = build_runtime_image()
    build_spark_image(images)
    run_dir = Path(cluster).parent
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    install_crds(kube)
    ns = f"sj-{uuid.uuid4().hex[:6]}"
    create_namespace(core, ns)
    # the chart's Job ServiceAccount: it may create ConfigMaps in the namespace, nothing else
    core.create_namespaced_service_account(ns, {"metadata": {"name": SA}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": SA}, "rules": rules})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]})  # fmt: skip
    store = Path(tempfile.mkdtemp(prefix="backstop-spark-store-"))
    store.chmod(0o1777)  # the tasks (uid 65532) write, the Job (uid 65532) reads
    write_input(store / "input", files=2, per_file=100_000)
    names = [f"sj{uuid.uuid4().hex[:4]}-{i}" for i in range(2)]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc: subprocess.Popen[bytes] | None = None
    t = time.monotonic()
    try:
        with real_node_pool(run_dir, names, env={"REAL_NODE_IMAGES": str(images)}) as nodes:
            print(f"2 real nodes with both images: {time.monotonic() - t:.0f}s")
            real_node(run_dir, "proxy-up")  # the Job's pod reaches the API server
            for n in nodes:
                core.patch_node(n, {"metadata": {"labels": {POOL: NAME}}})
            resources = {"requests": {"cpu": "200m", "memory": "1Gi"},
                         "limits": {"cpu": "2", "memory": "2Gi"}}  # fmt: skip
            proc = start_operator(cluster, ns, log, extra_env={
                "BACKSTOP_REOPT_TICK": "1", "BACKSTOP_REOPTIMIZE_MODE": "job",
                "BACKSTOP_SPARK_IMAGE": SPARK_IMAGE, "BACKSTOP_SPARK_SERVICE_ACCOUNT": SA,
                "BACKSTOP_OPERATOR_NAMESPACE": ns, "BACKSTOP_REOPT_TIME_LIMIT": "0.5",
                "BACKSTOP_SPARK_RESOURCES": json.dumps(resources),
                "BACKSTOP_METRICS_HOST_PATH": str(store), **extra_env})  # fmt: skip
            e = Env(cluster, kube, ns, nodes, store, log, proc)
            try:
                yield e
            finally:
                with contextlib.suppress(ApiException):
                    e.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)

                def deleted() -> bool:
                    items = e.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
                    return not items["items"]

                with contextlib.suppress(AssertionError):
                    wait_for(deleted, 90, "the topology deleted")
                stop_operator(proc)
                print(log.read_text()[-3000:])
    finally:
        with contextlib.suppress(AssertionError):
            real_node(run_dir, "proxy-down")
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(images, ignore_errors=True)


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    with spark_env(cluster, kube, tmp_path_factory, JOB_RULES, {}) as e:
        yield e


def _wordcount(store: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"] = {"name": NAME}
    spec = doc["spec"]
    spec["store"] = {"hostPath": {"path": str(store), "type": "Directory"}}
    spec["nodeSelector"] = {POOL: NAME}
    # metrics every second (the runtime's own setting; 5 s by default), so a run has rows soon
    every_second = {"name": "BACKSTOP_METRICS_INTERVAL", "value": "1"}
    spec["podTemplate"] = {"spec": {"containers": [{"name": "task", "env": [every_second]}]}}
    for op in spec["operators"]:
        if op["name"] == "source":
            op["config"].update(path=f"{IN_POD}/input", bounded=False, maxRecordsPerSecond=200.0)
        if op["name"] == "sink":
            op["config"]["path"] = f"{IN_POD}/{NAME}/output"
    return doc


def _rows(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.glob("*.jsonl"))


def test_a_job_in_the_spark_image_on_a_real_node_recommends_and_the_approval_applies(
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

    def job_pod() -> Any:
        env.alive()
        pods = env.core.list_namespaced_pod(env.namespace, label_selector=f"job-name={job}")
        running = [p for p in pods.items if p.status.phase in ("Running", "Succeeded")]
        return running[0] if running else None

    pod = wait_for(job_pod, 180, "the Job's pod running")
    assert pod.spec.node_name in env.nodes, "the Job runs on a real node"
    assert pod.spec.containers[0].image == SPARK_IMAGE
    t_job = time.monotonic()
    rows_then = _rows(metrics / "tasks")

    def concluded() -> dict[str, Any] | None:
        env.alive()
        state = (env.topology().get("status") or {}).get("reoptimization") or {}
        return state if state.get("result") and not state.get("running") else None

    try:  # the Job's own deadline is the operator's BACKSTOP_REOPT_TIMEOUT, 900 s
        state = wait_for(concluded, 960, "the operator to read the Job's recommendation", 1.0)
    except AssertionError:
        with contextlib.suppress(ApiException):  # what the Job's pod said, to see why
            print(env.core.read_namespaced_pod_log(pod.metadata.name, env.namespace))
        raise
    assert state is not None
    print(f"the Job's run: {time.monotonic() - t_job:.0f}s ({state.get('durationSeconds')}s "
          f"recorded), {rows_then} task rows when it started")  # fmt: skip
    # (a run on a host at load 20 ended Infeasible here: the message says why)
    assert state["result"] == "Suggested", (state["result"], state.get("message"))
    rec = state["recommendation"]
    ops = {o["operator"]: o for o in rec["operators"]}
    assert set(ops) == set(OPERATORS)
    # the Job read the metrics: every operator's latency is an estimate from them, not the spec's
    assert all(o["measured"] for o in ops.values()), ops
    wait_for(lambda: not batch.list_namespaced_job(env.namespace).items, 60, "the Job deleted")

    # the suggestion is approved with the CLI, which waits until the operator applied it
    cli = subprocess.run(
        [sys.executable, "-m", "backstop", "reoptimize", NAME, "-n", env.namespace,
         "--approve", "--timeout", "120"],
        capture_output=True, text=True, env={**os.environ, "KUBECONFIG": env.cluster},
        check=False, timeout=180,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    status = env.topology()["status"]
    plan = status["plan"]
    assert plan["assignment"] == rec["assignment"] and plan["backups"] == rec["backups"]
    assert status["reoptimization"]["approval"]["result"] == "Applied"

    # the recommended plan keeps the bound under the latencies the Job estimated, by the
    # failure-effect evaluator, and the task pods run where it says
    est = json.loads(json.dumps(doc))
    for op in est["spec"]["operators"]:
        op["reprocessingLatency"] = ops[op["name"]]["latency"]
    topo = parse_topology(est)
    worst, _ = worst_node_failure(expand(topo.spec), plan["backups"], plan["assignment"])
    assert worst <= topo.spec.planning_bound + 1e-9, (worst, topo.spec.planning_bound)

    def placed() -> bool:
        env.alive()
        pods = env.core.list_namespaced_pod(
            env.namespace, label_selector=f"{GROUP}/topology={NAME}"
        ).items
        where = {p.metadata.labels[f"{GROUP}/task"]: p.spec.node_name for p in pods
                 if not p.metadata.deletion_timestamp and p.status.phase == "Running"}  # fmt: skip
        return bool(where == plan["assignment"])

    wait_for(placed, 300, "every task pod running on the node of the applied plan", 1.0)
    print(f"whole test: {time.monotonic() - t0:.0f}s")
