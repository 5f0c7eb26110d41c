"""The pure parts of running re-optimization in-cluster: the Job manifest, the driver's
memory arithmetic, the approval decision and the Job's failure message."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace as NS
from typing import Any

import pytest

from backstop.controller.settings import Settings
from backstop.domain.approval import decide_approval, plan_fingerprint, recommendation_id
from backstop.domain.sparkmemory import MIB, MemoryTooSmall, driver_memory, local_cores
from backstop.k8s.reoptjob import (
    INPUT_MOUNT,
    LABEL_REOPT_TOPOLOGY,
    JobSettings,
    build_input_configmap,
    build_reopt_job,
    job_failure,
    job_name,
)

TOPOLOGY = {"metadata": {"name": "tw", "namespace": "prod", "generation": 3}, "spec": {}}


def _container(job: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return c


def _arg(c: dict[str, Any], flag: str) -> str:
    args: list[str] = c["args"]
    return args[args.index(flag) + 1]


# ------------------------------------------------------------------ memory arithmetic
def test_driver_heap_is_the_limit_minus_everything_else() -> None:
    # 3 GiB Job container, local[2]: 3072 - (256 driver + 320 JVM + 2 x 288 Python) = 1920
    assert driver_memory(3072 * MIB, workers=2, in_operator=False).heap_mib == 1920
    # in the operator's container the operator's 320 MiB come off too
    assert driver_memory(3072 * MIB, workers=2, in_operator=True).heap_mib == 1600
    # 2000 MiB - 1152 = 848 -> 832 (a multiple of 64)
    assert driver_memory(2000 * MIB, workers=2, in_operator=False).heap_mib == 832


def test_a_limit_that_cannot_hold_a_driver_names_the_limit_needed() -> None:
    with pytest.raises(MemoryTooSmall, match=r"512Mi leaves 0Mi .* at least 1984Mi"):
        driver_memory(512 * MIB, workers=2, in_operator=True)
    # the smallest limit it names fits exactly
    assert driver_memory(1984 * MIB, workers=2, in_operator=True).heap_mib == 512


def test_local_cores_follow_the_master() -> None:
    assert local_cores("local[4]") == 4 and local_cores("local[*]", 0.5) == 1
    assert local_cores("local[*]") == 2 and local_cores("k8s://https://k:443") == 0


# ------------------------------------------------------------------ the Job manifest
SETTINGS = JobSettings(
    namespace="backstop-system",
    image="backstop/spark:0.2.0",
    spark_master="local[*]",
    service_account="backstop-reoptimize",
    resources={"requests": {"cpu": "1", "memory": "3Gi"}, "limits": {"cpu": "3", "memory": "3Gi"}},
    metrics_claim="store",
    timeout_seconds=300,
)


def test_job_runs_the_job_with_the_settings_and_hands_back_a_configmap() -> None:
    name = job_name("prod", "tw")
    job = build_reopt_job(name, SETTINGS, TOPOLOGY, "/var/lib/backstop/tw/metrics")
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    c = _container(job)
    assert job["metadata"]["namespace"] == "backstop-system"
    assert c["image"] == "backstop/spark:0.2.0"
    assert pod["serviceAccountName"] == "backstop-reoptimize"
    assert c["resources"]["limits"] == {"cpu": "3", "memory": "3Gi"}
    assert c["command"] == ["python", "-m", "backstop.jobs.reoptimize"]
    assert _arg(c, "--metrics") == "/var/lib/backstop/tw/metrics"
    assert _arg(c, "--topologies") == f"{INPUT_MOUNT}/topology.json"
    assert _arg(c, "--result-configmap") == f"{name}-result"
    # local[*] would see the node's cores: three, the CPU limit; 3072-(256+320+3x288) = 1632
    # rounded down to 1600
    assert _arg(c, "--master") == "local[3]"
    assert "spark.driver.memory=1600m" in c["args"]
    # one attempt, killed at the timeout, removed after a while even without the operator
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 300
    assert spec["ttlSecondsAfterFinished"] > 0 and pod["restartPolicy"] == "Never"
    claim = next(v for v in pod["volumes"] if v["name"] == "metrics")
    assert claim["persistentVolumeClaim"] == {"claimName": "store", "readOnly": True}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["metrics"] == "/var/lib/backstop" and mounts["input"] == INPUT_MOUNT
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"  # local master: no lookup of the pod's name
    uid = next(e for e in c["env"] if e["name"] == "BACKSTOP_JOB_UID")
    assert "controller-uid" in uid["valueFrom"]["fieldRef"]["fieldPath"]
    # not the task-pod label: the operator must never take the Job's pod for a task
    labels = spec["template"]["metadata"]["labels"]
    assert labels[LABEL_REOPT_TOPOLOGY] == "tw" and "streams.backstop.dev/topology" not in labels
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_job_for_spark_on_kubernetes_and_a_host_path() -> None:
    s = JobSettings(namespace="ops", image="sp:1", spark_master="k8s://https://k:443",
                    service_account="drv", metrics_host_path="/srv/backstop")  # fmt: skip
    c = _container(build_reopt_job("j", s, TOPOLOGY, "/var/lib/backstop/tw/metrics"))
    for conf in ("spark.kubernetes.container.image=sp:1", "spark.kubernetes.namespace=ops",
                 "spark.kubernetes.authenticate.driver.serviceAccountName=drv"):  # fmt: skip
        assert conf in c["args"]
    assert _arg(c, "--master") == "k8s://https://k:443"
    # the executors mount the metrics where the driver has them: they read the files
    volume = "spark.kubernetes.executor.volumes.hostPath.metrics"
    for conf in (f"{volume}.mount.path=/var/lib/backstop", f"{volume}.mount.readOnly=true",
                 f"{volume}.options.path=/srv/backstop"):  # fmt: skip
        assert conf in c["args"]
    claim = JobSettings(namespace="ops", image="sp:1", spark_master="k8s://https://k:443",
                        metrics_claim="store")  # fmt: skip
    args = _container(build_reopt_job("j", claim, TOPOLOGY, "/var/lib/backstop/tw/m"))["args"]
    assert (
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.metrics.options.claimName"
        "=store" in args
    )
    # no Python workers in the driver: 2048 - (256 + 320) = 1472 -> 1472
    assert "spark.driver.memory=1472m" in c["args"]


def test_an_in_cluster_master_needs_no_cluster_dns() -> None:
    # the local cluster's real nodes have no cluster DNS (their kubelets have no clusterDNS:
    # pods get the host's resolv.conf, where kubernetes.default.svc does not resolve); the
    # kubelet's service variables name the same Service by its IP
    service = "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    for master in (
        "k8s://https://kubernetes.default.svc:443",
        "k8s://https://kubernetes.default.svc",
    ):
        s = JobSettings(namespace="ops", image="sp:1", spark_master=master)
        c = _container(build_reopt_job("j", s, TOPOLOGY, "/m"))
        assert _arg(c, "--master") == service
        # $(VAR) in args is expanded by the kubelet only from variables it knows of; it
        # injects KUBERNETES_SERVICE_* itself, the container must not shadow them
        assert not {e["name"] for e in c["env"]} & {
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT",
        }
    # any other API server address is left as it is
    other = JobSettings(namespace="ops", image="sp:1", spark_master="k8s://https://10.0.0.1:443")
    assert _arg(_container(build_reopt_job("j", other, TOPOLOGY, "/m")), "--master") == (
        "k8s://https://10.0.0.1:443"
    )


def test_spark_conf_reaches_the_job_after_the_builders_own() -> None:
    conf = {"spark.executor.instances": "1", "spark.kubernetes.executor.request.cores": "100m",
            "spark.executor.memory": "512m"}  # fmt: skip
    s = JobSettings(namespace="ops", image="sp:1", spark_master="k8s://https://k:443",
                    spark_conf=conf)  # fmt: skip
    args: list[str] = _container(build_reopt_job("j", s, TOPOLOGY, "/m"))["args"]
    given = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    assert given[-3:] == ["spark.executor.instances=1",
                          "spark.kubernetes.executor.request.cores=100m",
                          "spark.executor.memory=512m"]  # fmt: skip
    # the job applies --conf in order: a setting given here overrides the builder's
    assert given.index("spark.kubernetes.namespace=ops") < given.index("spark.executor.memory=512m")


def test_job_refuses_a_memory_limit_without_room_for_a_driver() -> None:
    s = JobSettings(namespace="ops", image="sp:1",
                    resources={"limits": {"memory": "512Mi"}})  # fmt: skip
    with pytest.raises(MemoryTooSmall, match="at least"):
        build_reopt_job("j", s, TOPOLOGY, "/m")


def test_one_job_name_per_topology() -> None:
    assert job_name("prod", "tw") == job_name("prod", "tw")
    assert job_name("prod", "tw") != job_name("test", "tw")
    assert len(job_name("n", "a" * 63)) <= 63


def test_input_configmap_holds_the_three_inputs() -> None:
    cm = build_input_configmap("j", SETTINGS, TOPOLOGY, [{"name": "n1", "cpu": 2.0}], None)
    assert set(cm["data"]) == {"topology.json", "nodes.json", "current.json"}
    assert cm["metadata"]["namespace"] == "backstop-system"
    assert cm["data"]["current.json"] == "{}"


def _job(reason: str | None) -> Any:
    conds = [NS(type="Failed", status="True", reason=reason, message="m")] if reason else []
    return NS(status=NS(conditions=conds), spec=NS(active_deadline_seconds=300))


def _pod(message: str, reason: str = "Error", code: int = 2) -> Any:
    done = NS(message=message, reason=reason, exit_code=code)
    return NS(status=NS(container_statuses=[NS(state=NS(terminated=done))]))


def test_job_failure_names_the_cause() -> None:
    assert job_failure(_job(None), []) is None
    assert "within 300s" in (job_failure(_job("DeadlineExceeded"), []) or "")
    msg = job_failure(_job("BackoffLimitExceeded"),
                      [_pod("warn\nerror: --metrics /m is not a directory\n")])  # fmt: skip
    assert msg == "the job failed (2): error: --metrics /m is not a directory"
    oom = job_failure(_job("BackoffLimitExceeded"), [_pod("", "OOMKilled", 137)])
    assert oom is not None and "limits.memory" in oom


def test_job_failure_names_the_deepest_exception_of_a_stack_trace() -> None:
    # a Spark driver that fails in the JVM leaves a stack trace as its log's last lines;
    # the message was its last frames ("at io.netty... ... 1 more"), which name no cause
    # (a k8s:// run on real nodes recorded exactly that). This log is written for the test.
    log = "\n".join([
        "py4j.protocol.Py4JJavaError: An error occurred while calling None.JavaSparkContext.",
        "\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:1)",
        "Caused by: io.fabric8.kubernetes.client.KubernetesClientException: Operation: [get]",
        "\tat io.fabric8.kubernetes.client.dsl.internal.OperationSupport.x(O.java:1)",
        "Caused by: java.net.UnknownHostException: kubernetes.default.svc.cluster.local",
        "\tat io.netty.util.concurrent.FastThreadLocalRunnable.run(F.java:30)",
        "\t... 1 more",
    ])  # fmt: skip
    msg = job_failure(_job("BackoffLimitExceeded"), [_pod(log, "Error", 1)])
    cause = "java.net.UnknownHostException: kubernetes.default.svc.cluster.local"
    assert msg == f"the job failed (1, Error): {cause}"
    # a log without an exception keeps its last two lines
    plain = job_failure(_job("BackoffLimitExceeded"), [_pod("a\nb\nc\n", "Error", 1)])
    assert plain == "the job failed (1, Error): b c"


# ------------------------------------------------------------------ approval
PLAN = {"assignment": {"a-0": "n1", "b-0": "n1"}, "backups": ["a-0"]}
NEW = {"assignment": {"a-0": "n1", "b-0": "n2"}, "backups": []}


def _state(**over: Any) -> dict[str, Any]:
    base = plan_fingerprint(PLAN)
    rec = {"id": recommendation_id(NEW, base, "t0"), "base": base, **NEW, "plan": NEW}
    return {"result": "Suggested", "applied": False, "generation": 3, "recommendation": rec,
            **over}  # fmt: skip


def test_approval_applies_the_stored_plan_when_nothing_changed() -> None:
    s = _state()
    d = decide_approval(s["recommendation"]["id"], s, 3, PLAN, ready_nodes=frozenset({"n1", "n2"}))
    assert d.action == "apply"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"generation": 4}, "SpecChanged"),
        ({"plan": {"assignment": {"a-0": "n2", "b-0": "n2"}, "backups": []}}, "PlanChanged"),
        ({"approved": "other"}, "UnknownRecommendation"),
        ({"state": {"result": "Applied", "applied": True}}, "NotApplicable"),
        ({"state": {"recommendation": {}}}, "NoRecommendation"),
        ({"ready": frozenset({"n1"})}, "NodesGone"),
    ],
)
def test_approval_is_refused_with_the_reason(change: dict[str, Any], reason: str) -> None:
    s = _state(**change.get("state", {}))
    approved = change.get("approved") or (s["recommendation"] or {}).get("id") or "x"
    d = decide_approval(approved, s, change.get("generation", 3), change.get("plan", PLAN),
                        ready_nodes=change.get("ready", frozenset({"n1", "n2"})))  # fmt: skip
    assert (d.action, d.reason) == ("refuse", reason), d.message


def test_approval_waits_for_a_recovery_and_is_decided_once() -> None:
    s = _state()
    rid = s["recommendation"]["id"]
    assert decide_approval(rid, s, 3, PLAN, recovering=True).action == "wait"
    done = {**s, "approval": {"id": rid, "result": "Refused", "reason": "PlanChanged"}}
    assert decide_approval(rid, done, 3, PLAN).action == "none"


def test_recommendation_ids_differ_per_run_and_per_plan() -> None:
    base = plan_fingerprint(PLAN)
    assert recommendation_id(NEW, base, "t0") != recommendation_id(NEW, base, "t1")
    assert recommendation_id(NEW, base, "t0") != recommendation_id(PLAN, base, "t0")


def test_spark_conf_is_read_from_the_environment_and_bad_json_names_the_variable() -> None:
    got = Settings.from_env({"BACKSTOP_SPARK_CONF": '{"spark.executor.instances": "1"}'})
    assert got.spark_conf == {"spark.executor.instances": "1"}
    assert Settings.from_env({}).spark_conf is None
    for bad in ("{not json", '["spark.executor.instances=1"]', '{"spark.executor.instances": 1}'):
        with pytest.raises(ValueError, match="BACKSTOP_SPARK_CONF"):
            Settings.from_env({"BACKSTOP_SPARK_CONF": bad})


def test_the_job_pod_takes_pull_secrets_and_placement_and_nothing_else() -> None:
    """``reoptimization.imagePullSecrets``, ``nodeSelector``, ``tolerations``, ``affinity``
    and ``priorityClassName`` reach the Job's pod; a field that would change what the pod
    may do (``hostNetwork``) is not taken from there."""
    pod = {
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"pool": "batch"},
        "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "low",
        "affinity": {},
        "hostNetwork": True,
    }
    s = replace(SETTINGS, pod=pod)
    spec = build_reopt_job("j", s, TOPOLOGY, "/m")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["nodeSelector"] == {"pool": "batch"} and spec["priorityClassName"] == "low"
    assert spec["tolerations"] == pod["tolerations"]
    assert "hostNetwork" not in spec and "affinity" not in spec  # empty: left out
    plain = build_reopt_job("j", SETTINGS, TOPOLOGY, "/m")["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations"} & set(plain)
