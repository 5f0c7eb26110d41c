"""The re-optimization run as a Kubernetes Job (``reoptimization.mode: job``): manifests and I/O.

Why a Job: the Spark driver (a JVM of a GiB or more, plus Python workers) then runs in its
own pod, with its own image (``backstop/spark``: pyspark and a JRE; the operator image is
lean), its own memory limit and ServiceAccount, instead of inside the operator's 512 MiB
container. The operator writes the inputs (the topology, its nodes and current plan) to a
ConfigMap the Job mounts, creates the Job, and reads the result from a second ConfigMap
that the Job writes with its ServiceAccount, which may only *create* ConfigMaps in that
namespace (it can read or change nothing). Both ConfigMaps are owned by the Job, so the
garbage collector removes them with it; the operator deletes the Job once it has read the
result, and ``ttlSecondsAfterFinished`` does so if the operator never comes back.

The Job's name is derived from the topology (:func:`job_name`), so the API server itself
refuses a second Job for one topology: one run at a time per topology.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from backstop.domain.constants import STORE_MOUNT
from backstop.domain.sparkmemory import driver_memory, local_cores
from backstop.k8s.jobfailure import deepest_exception, job_failure, job_stuck

__all__ = [
    "DEFAULT_RESOURCES",
    "INPUT_MOUNT",
    "LABEL_REOPT_TOPOLOGY",
    "RESULT_KEY",
    "JobSettings",
    "build_input_configmap",
    "build_reopt_job",
    "build_result_configmap",
    "deepest_exception",
    "job_failure",
    "job_name",
    "publish_result",
]

INPUT_MOUNT = "/etc/backstop/reoptimize"
RESULT_KEY = "recommendation.json"
LABEL_REOPT_TOPOLOGY = "reoptimization.backstop.dev/topology"
"""Not ``streams.backstop.dev/topology``: the operator would take the Job's pod for a task
pod of a topology of the same name in the operator's namespace."""
ANN_REOPT_NAMESPACE = "reoptimization.backstop.dev/namespace"
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "2Gi"},
    "limits": {"cpu": "2", "memory": "2Gi"},
}
TTL_SECONDS = 600
"""The Job is gone this long after it finished, had the operator not deleted it."""
UID = 65532


@dataclass(frozen=True)
class JobSettings:
    """The operator-wide settings of ``mode: job`` runs (the chart's ``reoptimization.*``)."""

    namespace: str
    image: str
    spark_master: str = "local[2]"
    service_account: str | None = None
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: DEFAULT_RESOURCES)
    metrics_claim: str | None = None
    metrics_host_path: str | None = None
    timeout_seconds: float = 900.0
    time_limit: float = 2.0
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    """More ``--conf`` settings, after the builder's own (``reoptimization.sparkConf``)."""
    store_secret: str | None = None
    """The Secret with the object store credentials of Jobs that read ``s3://`` metrics of
    topologies in other namespaces (:func:`backstop.domain.metricspath.job_store_env`)."""
    pod: Mapping[str, Any] = field(default_factory=dict)
    """More fields of the Job's pod spec: :data:`POD_FIELDS` only (pull secrets, placement)."""


POD_FIELDS = ("imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName")
"""What :attr:`JobSettings.pod` may set: nothing that changes what the pod may do."""


def job_name(namespace: str, name: str) -> str:
    """The Job of one topology: the same name for every run, at most 63 characters.

    >>> job_name("prod", "twitter-sentiment")[:-6]
    'reopt-twitter-sentiment-'
    >>> len(job_name("p", "x" * 63))
    63
    """
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:6]
    return f"reopt-{name[:50].rstrip('-')}-{digest}"


def _labels(namespace: str, name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "backstop",
        "app.kubernetes.io/component": "reoptimize",
        LABEL_REOPT_TOPOLOGY: name,
    }


def build_input_configmap(
    job: str,
    settings: JobSettings,
    manifest: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ConfigMap the Job mounts at :data:`INPUT_MOUNT`: the job's three input files."""
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{job}-input",
            "namespace": settings.namespace,
            "labels": _labels(ns, name),
            "annotations": {ANN_REOPT_NAMESPACE: ns},
        },
        "data": {
            "topology.json": json.dumps(manifest),
            "nodes.json": json.dumps({name: list(nodes)}),
            "current.json": json.dumps({name: current} if current else {}),
        },
    }


def _memory_bytes(resources: Mapping[str, Mapping[str, str]]) -> int | None:
    limit = (resources.get("limits") or {}).get("memory")
    return int(parse_quantity(limit)) if limit else None


def _cpus(resources: Mapping[str, Mapping[str, str]]) -> float | None:
    cpu = (resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get("cpu")
    return float(parse_quantity(cpu)) if cpu else None


IN_CLUSTER_API = "https://kubernetes.default.svc"
"""The API server's in-cluster name: it needs cluster DNS, which not every cluster's pods
have (the local cluster's real nodes have none)."""


def _master(settings: JobSettings) -> str:
    """``local[*]`` would see every core of the node: pin it to the container's CPU limit.

    ``k8s://https://kubernetes.default.svc[:443]`` becomes the address the kubelet gives every
    pod for that same Service (``$(KUBERNETES_SERVICE_HOST)``, expanded in the args by the
    kubelet), so the driver reaches the API server without cluster DNS; the server's
    certificate names the Service's IP as well as its name.

    >>> s = JobSettings(namespace="ops", image="i", spark_master="k8s://https://kubernetes.default.svc:443")
    >>> _master(s)
    'k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)'
    """
    master = settings.spark_master
    if master == "local[*]":
        return f"local[{local_cores('local[*]', _cpus(settings.resources))}]"
    if master in (f"k8s://{IN_CLUSTER_API}", f"k8s://{IN_CLUSTER_API}:443"):
        return "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    return master


def _volumes(job: str, settings: JobSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "input", "configMap": {"name": f"{job}-input"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "input", "mountPath": INPUT_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if settings.metrics_claim:
        source: dict[str, Any] = {
            "persistentVolumeClaim": {"claimName": settings.metrics_claim, "readOnly": True}
        }
    elif settings.metrics_host_path:
        source = {"hostPath": {"path": settings.metrics_host_path, "type": "Directory"}}
    else:
        return volumes, mounts
    volumes.append({"name": "metrics", **source})
    mounts.append({"name": "metrics", "mountPath": STORE_MOUNT, "readOnly": True})
    return volumes, mounts


def _spark_on_k8s(settings: JobSettings) -> tuple[list[str], list[dict[str, Any]]]:
    """Spark's own Kubernetes scheduler: the Job's pod is the driver (client mode), the
    executors are pods of the same image with the metrics volume mounted where the driver
    has it (Spark reads the files in the executors, not in the driver).

    The executors run in ``spark.kubernetes.namespace`` of :attr:`JobSettings.spark_conf`
    (the chart's ``reoptimization.executorNamespace``), else beside the Job. In another
    namespace the Job's pod is not named as their owner: Spark looks the driver's pod up in
    the executors' namespace, and an owner must be in the same namespace. Nor is the Job's
    ServiceAccount named (the executors would fall back to an account of that name there).

    >>> s = JobSettings(namespace="ops", image="i", spark_master="k8s://https://k:443",
    ...                 service_account="sa", spark_conf={"spark.kubernetes.namespace": "spark"})
    >>> args, _ = _spark_on_k8s(s)
    >>> [a.split("=")[0] for a in args if a.startswith("spark.kubernetes.")]
    ['spark.kubernetes.container.image', 'spark.kubernetes.namespace']
    >>> "spark.kubernetes.namespace=spark" in args
    True
    """
    executors = settings.spark_conf.get("spark.kubernetes.namespace") or settings.namespace
    conf = {
        "spark.kubernetes.container.image": settings.image,
        "spark.kubernetes.namespace": executors,
        "spark.driver.host": "$(POD_IP)",
    }
    if executors == settings.namespace:
        conf["spark.kubernetes.driver.pod.name"] = "$(POD_NAME)"
        if settings.service_account:
            conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = (
                settings.service_account
            )
    # the executors read the metrics files too: the same volume, at the same path, in each
    volume = None
    if settings.metrics_claim:
        volume = ("persistentVolumeClaim", "claimName", settings.metrics_claim)
    elif settings.metrics_host_path:
        volume = ("hostPath", "path", settings.metrics_host_path)
    if volume is not None:
        kind, option, value = volume
        prefix = f"spark.kubernetes.executor.volumes.{kind}.metrics"
        conf[f"{prefix}.mount.path"] = STORE_MOUNT
        conf[f"{prefix}.mount.readOnly"] = "true"
        conf[f"{prefix}.options.{option}"] = value
    args = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    return args, env


def build_reopt_job(
    job: str,
    settings: JobSettings,
    topology: Mapping[str, Any],
    metrics_path: str,
    store_env: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Job that runs ``python -m backstop.jobs.reoptimize`` for one topology.

    ``store_env`` is the object store's endpoint, region and credentials, added to the
    container's environment for an ``s3://`` metrics path
    (:func:`backstop.domain.metricspath.job_store_env`).

    The driver's heap is derived from the container's memory limit
    (:func:`backstop.domain.sparkmemory.driver_memory`); a limit too small for a driver
    raises :class:`~backstop.domain.sparkmemory.MemoryTooSmall` before anything is created.

    Examples
    --------
    >>> s = JobSettings(namespace="ops", image="backstop/spark:1", service_account="sa")
    >>> job = build_reopt_job("reopt-a-1", s, {"metadata": {"name": "a", "namespace": "p"}},
    ...                       "/var/lib/backstop/a/metrics")
    >>> c = job["spec"]["template"]["spec"]["containers"][0]
    >>> c["command"][:3], c["args"][c["args"].index("--master") + 1]
    (['python', '-m', 'backstop.jobs.reoptimize'], 'local[2]')
    >>> [a for a in c["args"] if a.startswith("spark.driver.memory")]
    ['spark.driver.memory=896m']
    """
    meta = topology["metadata"]
    workers = local_cores(settings.spark_master, _cpus(settings.resources))
    memory = driver_memory(_memory_bytes(settings.resources), workers=workers, in_operator=False)
    args, env = _driver_args(job, settings, metrics_path, memory.conf)
    pod = _pod_spec(job, settings, args, env + [dict(e) for e in store_env])
    labels = _labels(meta["namespace"], meta["name"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {
                ANN_REOPT_NAMESPACE: meta["namespace"],
                "reoptimization.backstop.dev/driver-memory": memory.arithmetic,
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, math.ceil(settings.timeout_seconds)),
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _driver_args(
    job: str, settings: JobSettings, metrics_path: str, memory: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """The job's command-line arguments and its container's environment.

    ``memory`` is the driver's heap (``spark.driver.memory``); with a ``k8s://`` master the
    executors' settings and the pod's own address join them.
    """
    args = [
        "--metrics", metrics_path,
        "--topologies", f"{INPUT_MOUNT}/topology.json",
        "--nodes-json", f"{INPUT_MOUNT}/nodes.json",
        "--current", f"{INPUT_MOUNT}/current.json",
        "--out", "/tmp/out",
        "--master", _master(settings),
        "--time-limit", f"{settings.time_limit:g}",
        "--conf", f"spark.driver.memory={memory}",
        "--result-configmap", f"{job}-result",
    ]  # fmt: skip
    env: list[dict[str, Any]] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        # the Job's uid (the Job controller labels its pods with it): the result's owner
        {
            "name": "BACKSTOP_JOB_UID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['controller-uid']"}},
        },
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONWARNINGS", "value": "ignore::FutureWarning"},
    ]
    if settings.spark_master.startswith("k8s://"):
        extra, pod_env = _spark_on_k8s(settings)
        args, env = args + extra, env + pod_env
    else:  # everything in this pod: Spark need not resolve the pod's own name (it fails
        # to start without a resolvable hostname)
        env += [{"name": "SPARK_LOCAL_IP", "value": "127.0.0.1"},
                {"name": "SPARK_LOCAL_HOSTNAME", "value": "localhost"}]  # fmt: skip
    args += [a for k, v in settings.spark_conf.items() for a in ("--conf", f"{k}={v}")]
    return args, env


def _pod_spec(
    job: str, settings: JobSettings, args: list[str], env: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Job's pod: one non-root container with a read-only root filesystem."""
    volumes, mounts = _volumes(job, settings)
    container = {
        "name": "reoptimize",
        "image": settings.image,
        "command": ["python", "-m", "backstop.jobs.reoptimize"],
        "args": args,
        "env": env,
        "resources": {k: dict(v) for k, v in settings.resources.items()},
        "volumeMounts": mounts,
        # a failed run's last log lines (its `error:` line) become the pod's message
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    pod.update({k: v for k, v in settings.pod.items() if k in POD_FIELDS and v})
    return pod


def build_result_configmap(
    name: str, namespace: str, recommendation: Mapping[str, Any], owner_uid: str | None = None
) -> dict[str, Any]:
    """The ConfigMap the Job writes its recommendation to, owned by the Job when its uid is
    known (so it goes with the Job).

    >>> cm = build_result_configmap("reopt-a-1-result", "ops", {"result": "NoMetrics"}, "u1")
    >>> cm["metadata"]["ownerReferences"][0]["name"], json.loads(cm["data"][RESULT_KEY])
    ('reopt-a-1', {'result': 'NoMetrics'})
    """
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name.removesuffix("-result"),
             "uid": owner_uid}
        ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {RESULT_KEY: json.dumps(recommendation)},
    }


def publish_result(
    api: client.ApiClient,
    name: str,
    namespace: str,
    recommendation: Mapping[str, Any],
    owner_uid: str | None,
) -> None:
    """Create the result ConfigMap (the Job's only write; its ServiceAccount may only create)."""
    body = build_result_configmap(name, namespace, recommendation, owner_uid)
    client.CoreV1Api(api).create_namespaced_config_map(namespace, body)


# ------------------------------------------------------------------ I/O (the operator's side)
class JobRunner:
    """The operator's calls around one topology's Job (synchronous; run them in a thread)."""

    def __init__(self, api: client.ApiClient, settings: JobSettings) -> None:
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.settings = settings

    def remove(self, job: str, wait: float = 30.0) -> None:
        """Delete the Job (its pods and ConfigMaps go with it) and wait until it is gone."""
        ns = self.settings.namespace
        with contextlib.suppress(ApiException):
            self.batch.delete_namespaced_job(job, ns, propagation_policy="Background")
        for cm in (f"{job}-input", f"{job}-result"):
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_config_map(cm, ns)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                self.batch.read_namespaced_job(job, ns)
            except ApiException as err:
                if err.status == 404:
                    return
                raise
            time.sleep(0.5)

    def start(self, job: str, configmap: Mapping[str, Any], manifest: Mapping[str, Any]) -> None:
        """Create the inputs and the Job (a leftover of an earlier run is removed first),
        then make the Job the inputs' owner."""
        ns = self.settings.namespace
        self.remove(job)
        self.core.create_namespaced_config_map(ns, configmap)
        created = self.batch.create_namespaced_job(ns, manifest)
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job,
                 "uid": created.metadata.uid}  # fmt: skip
        self.core.patch_namespaced_config_map(
            f"{job}-input", ns, {"metadata": {"ownerReferences": [owner]}}
        )

    def poll(self, job: str) -> tuple[bool, str | None]:
        """``(finished, failure)``: whether the Job is done, and why it failed if it did."""
        obj = self.batch.read_namespaced_job(job, self.settings.namespace)
        done = {c.type for c in (obj.status.conditions or []) if c.status == "True"}
        pods = self.core.list_namespaced_pod(
            self.settings.namespace, label_selector=f"job-name={job}"
        ).items
        if not done & {"Complete", "Failed"}:
            stuck = job_stuck(pods)
            return stuck is not None, stuck
        return True, job_failure(obj, pods)

    def result(self, job: str) -> dict[str, Any]:
        """The recommendation the Job wrote."""
        cm = self.core.read_namespaced_config_map(f"{job}-result", self.settings.namespace)
        rec: dict[str, Any] = json.loads((cm.data or {})[RESULT_KEY])
        return rec
