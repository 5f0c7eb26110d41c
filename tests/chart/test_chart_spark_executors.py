"""With a ``k8s://`` Spark master the re-optimization Job is Spark's driver (client mode) and
Spark creates its executor pods: in ``reoptimization.executorNamespace``, never in the release
namespace.

Why: a ServiceAccount that may create pods in a namespace can start a pod running as any
ServiceAccount of that namespace and mounting any of its Secrets. In the release namespace
that is the operator's ServiceAccount (pods everywhere it watches), the webhook's TLS Secret
and the object store Secret. So the Job's ServiceAccount keeps in the release namespace what
it has with a ``local[N]`` master (create its result ConfigMap) and gets pod rights only in a
namespace of its own, where the executors run as a ServiceAccount with no permissions and no
token. The tests render the chart (no cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backstop.controller.settings import Settings
from backstop.k8s.reoptjob import JobSettings, build_reopt_job
from tests.chart.test_chart import (  # noqa: F401
    CHART,
    container,
    env_of,
    helm,
    of_kind,
    one,
    render,
    rules_of,
    run_helm,
    values_file,
)

Doc = dict[str, Any]
RELEASE_NS = "backstop-system"
EXECUTOR_NS = "backstop-spark"
JOB_SA = "rel-backstop-reoptimize"
EXECUTOR_SA = "rel-backstop-spark-executor"
K8S: Doc = {
    "reoptimization": {
        "enabled": True,
        "sparkMaster": "k8s://https://kubernetes.default.svc:443",
        "executorNamespace": EXECUTOR_NS,
        "sparkConf": {"spark.executor.instances": "1"},
    }
}


def _matches(values: list[str], wanted: str) -> bool:
    return wanted in values or "*" in values


def grants(role: Doc, verb: str, resource: str, group: str = "") -> bool:
    """Whether a Role or ClusterRole allows ``verb`` on ``resource`` (wildcards count)."""
    return any(
        _matches(r.get("apiGroups", []), group)
        and _matches(r.get("resources", []), resource)
        and _matches(r.get("verbs", []), verb)
        for r in role.get("rules") or []
    )


def roles_bound_to(docs: list[Doc], sa: str, sa_namespace: str) -> list[tuple[str | None, Doc]]:
    """``(namespace or None for cluster-wide, role)`` of every binding naming the
    ServiceAccount."""
    out: list[tuple[str | None, Doc]] = []
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == sa_namespace
            for s in subjects
        ):
            continue
        ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = next(
            d
            for d in of_kind(docs, ref["kind"])
            if d["metadata"]["name"] == ref["name"]
            and (ref["kind"] == "ClusterRole" or d["metadata"].get("namespace") == ns)
        )
        out.append((ns, role))
    return out


@pytest.mark.helm
def test_k8s_master_creates_executor_pods_only_in_the_executor_namespace(
    helm: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    docs = render(helm, tmp_path, K8S, namespace=RELEASE_NS)
    operator_sa = "rel-backstop"

    # the release namespace: no Role there grants pods to anyone but the operator itself
    for role in of_kind(docs, "Role"):
        if role["metadata"]["namespace"] != RELEASE_NS or not grants(role, "create", "pods"):
            continue
        for binding in of_kind(docs, "RoleBinding"):
            if binding["roleRef"]["name"] == role["metadata"]["name"]:
                assert [s["name"] for s in binding["subjects"]] == [operator_sa], binding

    # the Job's ServiceAccount: in the release namespace what a local[N] master gives it, and
    # nothing cluster-wide
    bound = roles_bound_to(docs, JOB_SA, RELEASE_NS)
    assert None not in [ns for ns, _ in bound], "no ClusterRole for the Job"
    in_release = [role for ns, role in bound if ns == RELEASE_NS]
    assert [rules_of(r) for r in in_release] == [{("", "configmaps"): {"create"}}]
    assert not any(grants(r, "create", "pods") for r in in_release)
    local = render(helm, tmp_path, {"reoptimization": {"enabled": True}}, namespace=RELEASE_NS)
    assert [rules_of(r) for ns, r in roles_bound_to(local, JOB_SA, RELEASE_NS)] == [
        rules_of(r) for r in in_release
    ]

    # the executor namespace: a Role with what Spark's driver needs for its executors
    in_executors = [role for ns, role in bound if ns == EXECUTOR_NS]
    assert len(in_executors) == 1
    assert grants(in_executors[0], "create", "pods")
    assert rules_of(in_executors[0]) == {
        ("", "pods"): {"create", "get", "list", "watch", "delete", "deletecollection"},
        ("", "configmaps"): {"create", "get", "list", "delete", "deletecollection"},
        ("", "services"): {"create", "get", "delete"},
    }
    assert {ns for ns, _ in bound} == {RELEASE_NS, EXECUTOR_NS}

    # the executors' ServiceAccount: in that namespace, no token, bound to nothing
    sa = one(docs, "ServiceAccount", EXECUTOR_SA)
    assert sa["metadata"]["namespace"] == EXECUTOR_NS
    assert sa["automountServiceAccountToken"] is False
    assert roles_bound_to(docs, EXECUTOR_SA, EXECUTOR_NS) == []
    # the chart does not create the namespace unless asked (it must exist)
    assert of_kind(docs, "Namespace") == []


@pytest.mark.helm
def test_the_executor_namespace_reaches_the_jobs_spark_settings(
    helm: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The chart hands the namespace and the executors' ServiceAccount to the operator in
    BACKSTOP_SPARK_CONF; the Job the operator builds from it passes them to Spark, and does
    not name its own pod as the executors' owner (Spark would look for it in the executor
    namespace, and an owner cannot be in another namespace)."""
    env = env_of(container(render(helm, tmp_path, K8S, namespace=RELEASE_NS)))
    settings = Settings.from_env(env)
    assert settings.spark_conf == {
        "spark.executor.instances": "1",
        "spark.kubernetes.namespace": EXECUTOR_NS,
        "spark.kubernetes.authenticate.executor.serviceAccountName": EXECUTOR_SA,
    }
    assert settings.spark_image and settings.spark_service_account == JOB_SA
    job = build_reopt_job(
        "reopt-a-1",
        JobSettings(
            namespace=RELEASE_NS,
            image=settings.spark_image,
            spark_master=settings.spark_master,
            service_account=settings.spark_service_account,
            spark_conf=settings.spark_conf,
        ),
        {"metadata": {"name": "a", "namespace": "team-a"}},
        "/var/lib/backstop/a/metrics",
    )
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == RELEASE_NS and pod["serviceAccountName"] == JOB_SA
    args = pod["containers"][0]["args"]
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    last = dict(c.split("=", 1) for c in confs)  # the job keeps the last of each key
    assert last["spark.kubernetes.namespace"] == EXECUTOR_NS
    assert last["spark.kubernetes.authenticate.executor.serviceAccountName"] == EXECUTOR_SA
    assert "spark.kubernetes.driver.pod.name" not in last
    assert f"spark.kubernetes.namespace={RELEASE_NS}" not in confs


@pytest.mark.helm
def test_the_chart_renders_the_executor_namespace_only_when_asked(
    helm: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    values = json.loads(json.dumps(K8S))
    values["reoptimization"]["createExecutorNamespace"] = True
    docs = render(helm, tmp_path, values, namespace=RELEASE_NS)
    ns = one(docs, "Namespace", EXECUTOR_NS)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    # a local master has no executors: no namespace, no executor RBAC, whatever the flag
    values["reoptimization"]["sparkMaster"] = "local[2]"
    docs = render(helm, tmp_path, values, namespace=RELEASE_NS)
    assert of_kind(docs, "Namespace") == []
    assert {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]} == {
        RELEASE_NS
    }


@pytest.mark.helm
@pytest.mark.parametrize(
    ("reopt", "extra", "needle"),
    [
        ({"executorNamespace": ""}, {}, "reoptimization.executorNamespace is required"),
        ({"executorNamespace": RELEASE_NS}, {}, "must not be the release namespace"),
        ({}, {"watchNamespaces": [EXECUTOR_NS]}, "must not be a watched namespace"),
        (
            {"sparkConf": {"spark.kubernetes.namespace": "elsewhere"}},
            {},
            "set reoptimization.executorNamespace instead",
        ),
        ({"executorNamespace": "Not_A_Namespace"}, {}, "executorNamespace"),
    ],
    ids=["missing", "release-namespace", "watched", "sparkConf", "invalid"],
)
def test_the_executor_namespace_is_refused_where_it_would_grant_too_much(
    helm: str,  # noqa: F811
    tmp_path: Path,
    reopt: Doc,
    extra: Doc,
    needle: str,
) -> None:
    values = {**extra, "reoptimization": {**K8S["reoptimization"], **reopt}}
    args = ["template", "rel", str(CHART), "--namespace", RELEASE_NS]
    args += ["-f", str(values_file(tmp_path, values))]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr
