"""The Helm chart (charts/backstop) and the operator image (operator/Dockerfile).

Rendering tests parse ``helm template`` output and assert on the manifests (security
context, probe, resources, RBAC rules, namespaces); the cluster test installs the chart
into the local control plane and runs the operator out of cluster with the chart's own
ServiceAccount token, proving the RBAC is enough for the demo scenario and refuses the rest.

helm comes from ``make tools`` (hack/get-helm.sh, into .tools/bin). When it is missing
these tests fail with that instruction; they never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.cli import app
from backstop.controller.settings import Settings
from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.cluster import api_client
from backstop_testkit.sim.nodesim import NodeShape, Simulator
from backstop_testkit.support.chartrights import (
    helm_binary,
    service_account_token,
    token_kubeconfig,
)
from backstop_testkit.support.kubetools import (
    ROOT,
    condition,
    create_namespace,
    free_port,
    stop_operator,
    topology_manifest,
    wait_for,
)

CHART = ROOT / "charts" / "backstop"
DOCKERFILE = ROOT / "operator" / "Dockerfile"
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
Doc = dict[str, Any]
Rules = dict[tuple[str, str], set[str]]

# What the operator may do in each watched namespace: nothing more, nothing less.
NAMESPACED_RULES: Rules = {
    (GROUP, "streamtopologies"): {"get", "list", "watch", "patch"},
    (GROUP, "streamtopologies/status"): {"get", "patch"},
    (GROUP, "streamtopologies/finalizers"): {"update"},
    (GROUP, "recoveryplans"): {"create", "get", "list", "patch", "delete"},
    (GROUP, "recoveryplans/status"): {"get", "patch"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},  # patch: promotion
    ("", "configmaps"): {"get", "create", "patch", "update"},
    ("", "secrets"): {"get", "create"},  # each topology's peer token (PUT /peers)
    ("", "events"): {"create"},
    ("policy", "poddisruptionbudgets"): {"get", "create", "patch"},
}
# The replicas' leader election: one Lease in the release namespace.
LEASE_RULES: Rules = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
# What it may do cluster-wide when it watches only some namespaces: read cluster-scoped
# Nodes; pods only with rbac.clusterWidePods (the capacity ledger: every workload's requests).
CLUSTER_RULES_NAMESPACED_MODE: Rules = {("", "nodes"): {"get", "list", "watch"}}
CLUSTER_RULES_WITH_ALL_PODS: Rules = {
    **CLUSTER_RULES_NAMESPACED_MODE,
    ("", "pods"): {"list", "watch"},
}


# ---------------------------------------------------------------- helm plumbing
@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary: on PATH, or in .tools/bin. Missing helm fails loudly."""
    found = helm_binary()
    if found is None:
        pytest.fail(
            "helm is not installed: run `make tools` (hack/get-helm.sh puts a pinned helm v3 "
            "into .tools/bin), then `make test` or `PATH=.tools/bin:$PATH pytest`"
        )
    return found


LOCAL_IMAGES = Path(__file__).with_name("local-images.yaml")
"""``image.registry: backstop``: the images built and loaded here (the chart has no default)."""
RENDERS = frozenset({"template", "install", "upgrade", "lint"})


def run_helm(
    helm: str, *args: str, check: bool = True, local_images: bool = True
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS``; a render, install, upgrade or lint takes :data:`LOCAL_IMAGES` as its
    first values file unless ``local_images`` is false."""
    if local_images and args and args[0] in RENDERS:
        args = (args[0], "-f", str(LOCAL_IMAGES), *args[1:])
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def values_file(tmp_path: Path, values: Doc) -> Path:
    path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def render(
    helm: str, tmp_path: Path, values: Doc | None = None, namespace: str = "ops"
) -> list[Doc]:
    args = ["template", "rel", str(CHART), "--namespace", namespace]
    if values is not None:
        args += ["-f", str(values_file(tmp_path, values))]
    docs = [d for d in yaml.safe_load_all(run_helm(helm, *args).stdout) if d]
    return docs


def running(docs: list[Doc]) -> list[Doc]:
    """The release's objects that stay, without Helm hooks (the CRD upgrade's, which go
    once they ran)."""
    return [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def rules_of(role: Doc) -> Rules:
    """A Role's rules as {(apiGroup, resource): verbs}; fails on wildcards or resourceNames."""
    out: Rules = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"] and not rule.get("resourceNames"), rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault((group, res), set()).update(rule["verbs"])
    return out


def container(docs: list[Doc]) -> Doc:
    dep = one(docs, "Deployment")
    containers = dep["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: Doc = containers[0]
    return c


def env_of(c: Doc) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in c.get("env", [])}


def operator_command() -> Any:
    """The click command behind ``backstop operator`` (typer vendors its own click)."""
    group: Any = typer.main.get_command(app)
    return group.commands["operator"]


# ---------------------------------------------------------------- no helm needed
def test_chart_crds_are_identical_to_the_repository_crds() -> None:
    repo = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert repo, "crds/ is empty"
    assert sorted(chart) == sorted(repo), "charts/backstop/crds must mirror crds/"
    stale = [name for name in repo if chart[name] != repo[name]]
    assert stale == [], f"copy crds/ into charts/backstop/crds/ again: {stale} differ"


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions (continuations joined), split into stages."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest.strip()))
    return stages


def test_dockerfile_is_multistage_non_root_lean_and_runs_the_operator() -> None:
    text = DOCKERFILE.read_text()
    # a `# syntax=` line would make the builder pull a frontend image from a registry
    assert not re.search(r"^#\s*syntax=", text, re.M | re.I)
    assert re.search(r"^ARG BASE_IMAGE=", text, re.M), "the base image is a build argument"
    stages = _dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: a build stage and a slim runtime stage"
    assert all(stage[0] == ("FROM", stage[0][1]) for stage in stages)
    assert all(stage[0][1].startswith("${BASE_IMAGE}") for stage in stages)
    final = stages[-1]
    users = [arg for word, arg in final if word == "USER"]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, f"USER must be a numeric non-root uid, not {user!r}"
    # the chart's securityContext runs as the same uid
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(user)
    entry = [json.loads(arg) for word, arg in final if word == "ENTRYPOINT"]
    assert entry, "ENTRYPOINT in exec (JSON) form"
    assert entry[-1][-1].endswith("/backstop"), entry[-1]
    cmd = [json.loads(arg) for word, arg in final if word == "CMD"]
    assert cmd and cmd[-1][0] == "operator"
    # lean: the operator only; the Spark job (pyspark + a JRE) is not in this image
    runs = " ".join(arg for stage in stages for word, arg in stage if word == "RUN")
    assert "jre" not in runs and "[spark]" not in runs and "pyspark" not in runs
    # the project: a wheel built without its dependencies, installed on the locked ones
    assert re.search(r"pip wheel [^&]*--no-deps [^&]*\.(\s|$)", runs), "the project's wheel"
    assert re.search(r"pip install [^&]*--no-deps [^&]*\.whl", runs), "the project, on its deps"
    assert any(w == "COPY" and a.startswith("--from=") for w, a in final)
    for stage in stages:  # every COPY source from the build context exists
        for word, arg in stage:
            if word == "COPY" and not arg.startswith("--from="):
                for src in arg.split()[:-1]:
                    assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    # hack/images.sh sends exactly these paths as the build context
    images = (ROOT / "hack" / "images.sh").read_text()
    assert "operator/Dockerfile . pyproject.toml README.md planners operator runtime" in images
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text()
    assert "**/.venv" in ignore and "**/.tools" in ignore


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.spark"])
def test_operator_images_copy_every_package_root_the_project_installs(dockerfile: str) -> None:
    """`pip install .` finds packages under each ``where`` root; a root left out of the image's
    build context installs silently without its packages, and the operator then fails at import
    (CI: ``No module named 'backstop_runtime'`` once the operator shared the runtime's decoder)."""
    roots = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"][
        "find"
    ]["where"]
    text = (DOCKERFILE.parent / dockerfile).read_text()
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ")}
    images = (ROOT / "hack" / "images.sh").read_text()
    line = images.split(f"operator/{dockerfile} . ", 1)[1]
    context = line.split(";", 1)[0].split("\n")[0].split()
    for root in roots:
        if root == ".":  # top-level packages: planners
            continue
        if root == "testkit":  # the test kit: never in an image (tests/unit/test_layout.py)
            assert root not in copied and root not in context, f"{dockerfile} gets the test kit"
            continue
        assert root in copied, f"{dockerfile} does not COPY {root}/"
        assert root in context, f"hack/images.sh does not send {root}/ to {dockerfile}"


def test_kind_config_has_zoned_workers_and_make_kind_demo_uses_it() -> None:
    cfg = yaml.safe_load((ROOT / "hack" / "kind-config.yaml").read_text())
    assert (cfg["kind"], cfg["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles.count("control-plane") == 1 and roles.count("worker") >= 2
    zones = {
        n["labels"]["topology.kubernetes.io/zone"] for n in cfg["nodes"] if n["role"] == "worker"
    }
    assert len(zones) >= 2, "workers span failure domains"
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nkind-demo:", 1)[1].split("\n\n", 1)[0]
    assert "--config hack/kind-config.yaml" in recipe
    assert "hack/images.sh" in recipe and "charts/backstop" in recipe


# ---------------------------------------------------------------- helm template / lint
NON_DEFAULT: Doc = {
    "image": {"repository": "registry.example/backstop", "tag": "9.9.9", "pullPolicy": "Always"},
    "watchNamespaces": ["team-a", "team-b"],
    "logLevel": "debug",
    "logFormat": "plain",
    "recovery": {"gracePeriodSeconds": 45, "utilizationCap": 0.7},
    "reoptimization": {
        "enabled": True,
        "mode": "job",
        "sparkMaster": "k8s://https://kubernetes.default.svc",
        "executorNamespace": "backstop-spark",
        "sparkImage": "registry.example/spark:3.5",
        "sparkConf": {"spark.executor.instances": "1", "spark.executor.memory": "512m"},
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "4", "memory": "8Gi"},
        },
        "driverServiceAccount": {"name": "spark-driver"},
        "metricsVolume": {"existingClaim": "backstop-store"},
    },
    "metrics": {"enabled": True, "port": 9464},
    "health": {"port": 8081},
    "resources": {
        "requests": {"cpu": "200m", "memory": "300Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    },
}


@pytest.mark.helm
@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_helm_lint_strict(helm: str, tmp_path: Path, values: Doc | None) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values is not None:
        args += ["-f", str(values_file(tmp_path, values))]
    proc = run_helm(helm, *args)
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.helm
def test_fault09_default_render_is_hardened_and_watches_only_the_release_namespace(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    dep = one(docs, "Deployment")
    assert dep["metadata"]["namespace"] == "ops"
    assert dep["spec"]["replicas"] == 2  # two replicas and a Lease (test_fault07_chart_...)
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate"}
    pod = dep["spec"]["template"]["spec"]
    sa = one(docs, "ServiceAccount", "rel-backstop")
    assert pod["serviceAccountName"] == sa["metadata"]["name"] == "rel-backstop"
    assert sa["metadata"]["namespace"] == "ops"
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(docs)
    # the image `make images` builds here; IfNotPresent: a node that has it never pulls
    assert c["image"] == f"backstop/operator:{chart['appVersion']}"
    assert c["imagePullPolicy"] == "IfNotPresent"
    csc = c["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False and csc["privileged"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    # a read-only root needs a writable /tmp for Spark and Python
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in vols[mounts["/tmp"]]
    assert env_of(c)["HOME"] == "/tmp"
    res = c["resources"]
    assert set(res["requests"]) == set(res["limits"]) == {"cpu", "memory"}
    # the liveness probe hits the endpoint the operator is told to serve
    probe = c["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert probe["path"] == "/healthz" and ports[probe["port"]] == 8080
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in c["args"]
    assert c["args"][0] == "operator" and "--all-namespaces" not in c["args"]
    # no cluster-wide Namespace/CRD observation, so the RBAC needs no access to them
    assert "--no-cluster-scanning" in c["args"]
    assert [a for a in c["args"] if a.startswith("--namespace")] == ["--namespace=ops"]
    assert "--grace-period-seconds=30" in c["args"] and "--utilization-cap=0.8" in c["args"]
    env = env_of(c)
    assert env["BACKSTOP_REOPTIMIZE"] == "false"  # until its image is configured
    # once on, the Job runs the Spark image, not the lean operator image
    env = env_of(container(render(helm, tmp_path, {"reoptimization": {"enabled": True}})))
    assert env["BACKSTOP_REOPTIMIZE_MODE"] == "job"
    assert env["BACKSTOP_SPARK_IMAGE"] == f"backstop/spark:{chart['appVersion']}" != c["image"]
    assert "BACKSTOP_METRICS_PORT" not in env
    # RBAC: pods, ConfigMaps, events, ... in the release namespace only (a Role);
    # cluster-wide nothing but reads of Nodes
    # (and the leader election's Lease, also in the release namespace)
    roles = {r["metadata"]["name"]: r for r in of_kind(docs, "Role")}
    # (the webhook's Role and ClusterRole: test_webhook_objects_render_with_a_shared_...)
    assert set(roles) == {
        "rel-backstop",
        "rel-backstop-leader-election",
        "rel-backstop-webhook",
    }
    role = roles["rel-backstop"]
    assert role["metadata"]["namespace"] == "ops"
    assert rules_of(role) == NAMESPACED_RULES
    assert rules_of(roles["rel-backstop-leader-election"]) == LEASE_RULES
    binding = one(docs, "RoleBinding", "rel-backstop")
    assert binding["metadata"]["namespace"] == "ops"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "rel-backstop",
    }
    cluster_role = one(docs, "ClusterRole", "rel-backstop-cluster")
    assert rules_of(cluster_role) == CLUSTER_RULES_NAMESPACED_MODE
    for verbs in rules_of(cluster_role).values():
        assert verbs <= {"get", "list", "watch"}, "cluster-wide: read-only"
    crb = one(docs, "ClusterRoleBinding", "rel-backstop-cluster")
    assert crb["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert crb["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-backstop", "namespace": "ops"}
    ]
    services = [d["metadata"]["name"] for d in of_kind(docs, "Service")]
    assert services == ["rel-backstop-webhook"], "no metrics Service unless metrics.enabled"


@pytest.mark.helm
def test_non_default_values_render_namespaced_rbac_spark_and_metrics(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path, NON_DEFAULT, namespace="backstop-system")
    c = container(docs)
    assert c["image"] == "registry.example/backstop:9.9.9" and c["imagePullPolicy"] == "Always"
    assert c["resources"] == NON_DEFAULT["resources"]
    args = c["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=backstop-system",
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert "--all-namespaces" not in args
    assert {"--log-level=debug", "--log-format=plain"} <= set(args)
    assert {"--grace-period-seconds=45", "--utilization-cap=0.7"} <= set(args)
    assert "--liveness=http://0.0.0.0:8081/healthz" in args
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8081, "metrics": 9464, "webhook": 9443}
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    env = env_of(c)
    assert env["BACKSTOP_REOPTIMIZE_MODE"] == "job"
    assert env["BACKSTOP_METRICS_CLAIM"] == "backstop-store"
    assert env["BACKSTOP_SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    assert env["BACKSTOP_SPARK_IMAGE"] == "registry.example/spark:3.5"
    assert env["BACKSTOP_SPARK_SERVICE_ACCOUNT"] == "spark-driver"
    assert json.loads(env["BACKSTOP_SPARK_RESOURCES"]) == NON_DEFAULT["reoptimization"]["resources"]
    conf = {
        "spark.executor.instances": "1",
        "spark.executor.memory": "512m",
        # k8s:// master: the executors' namespace and ServiceAccount, set by the chart
        "spark.kubernetes.namespace": "backstop-spark",
        "spark.kubernetes.authenticate.executor.serviceAccountName": "rel-backstop-spark-executor",
    }
    assert Settings.from_env({"BACKSTOP_SPARK_CONF": env["BACKSTOP_SPARK_CONF"]}).spark_conf == conf
    assert env["BACKSTOP_METRICS_PORT"] == "9464"
    svc = one(docs, "Service", "rel-backstop-metrics")
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert svc["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]

    # namespaced mode: a Role + RoleBinding in each watched namespace, exactly the rules
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in of_kind(docs, "Role")}
    assert set(roles) == {
        ("backstop-system", "rel-backstop"),
        ("team-a", "rel-backstop"),
        ("team-b", "rel-backstop"),
        ("backstop-system", "rel-backstop-reoptimize"),
        ("backstop-system", "rel-backstop-reoptimize-job"),
        ("backstop-system", "rel-backstop-leader-election"),
        ("backstop-system", "rel-backstop-webhook"),
        ("backstop-spark", "rel-backstop-spark-executors"),
    }
    assert rules_of(roles[("backstop-system", "rel-backstop-leader-election")]) == LEASE_RULES
    for ns in ("backstop-system", "team-a", "team-b"):
        assert rules_of(roles[(ns, "rel-backstop")]) == NAMESPACED_RULES
    bindings = {
        (b["metadata"]["namespace"], b["roleRef"]["name"]): b for b in of_kind(docs, "RoleBinding")
    }
    for ns in ("team-a", "team-b"):
        assert bindings[(ns, "rel-backstop")]["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-backstop", "namespace": "backstop-system"}
        ]
    # cluster-wide: read-only nodes, nothing else (but the webhook's own configuration, by
    # name: test_webhook_objects_render_with_a_shared_...); no ClusterRole grants pods
    cluster_role = one(docs, "ClusterRole", "rel-backstop-cluster")
    assert rules_of(cluster_role) == CLUSTER_RULES_NAMESPACED_MODE
    for role in of_kind(docs, "ClusterRole"):
        for rule in role.get("rules") or []:
            assert not {"pods", "*"} & set(rule["resources"]), role["metadata"]["name"]
    assert "--capacity-all-namespaces" not in args
    bound = {b["roleRef"]["name"] for b in of_kind(running(docs), "ClusterRoleBinding")}
    operator_roles = [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] in bound]
    assert len(operator_roles) == 2  # the users' roles are bound by Kubernetes' own
    crb = one(docs, "ClusterRoleBinding", "rel-backstop-cluster")
    assert crb["roleRef"]["name"] == cluster_role["metadata"]["name"]

    # re-optimization as a Job: Jobs only in the release namespace (and deleting the Job's
    # ConfigMaps there; creating and reading them is in the namespaced rules)
    reopt = roles[("backstop-system", "rel-backstop-reoptimize")]
    assert rules_of(reopt) == {
        ("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
        ("", "configmaps"): {"delete"},
    }
    assert bindings[("backstop-system", "rel-backstop-reoptimize")]["subjects"][0]["name"] == (
        "rel-backstop"
    )
    # the Job's pod (the Spark driver with a k8s:// master) has its own ServiceAccount: it
    # creates its result ConfigMap in the release namespace, and executor pods only in
    # reoptimization.executorNamespace (test_chart_spark_executors.py), where the executors
    # run as a ServiceAccount of their own
    sas = {s["metadata"]["name"]: s for s in of_kind(running(docs), "ServiceAccount")}
    assert set(sas) == {"rel-backstop", "spark-driver", "rel-backstop-spark-executor"}
    assert sas["rel-backstop-spark-executor"]["metadata"]["namespace"] == "backstop-spark"
    spark_binding = bindings[("backstop-system", "rel-backstop-reoptimize-job")]
    assert spark_binding["subjects"][0]["name"] == "spark-driver"
    spark_role = roles[("backstop-system", "rel-backstop-reoptimize-job")]
    assert rules_of(spark_role) == {("", "configmaps"): {"create"}}
    executors_binding = bindings[("backstop-spark", "rel-backstop-spark-executors")]
    assert executors_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "spark-driver", "namespace": "backstop-system"}
    ]
    executor_rules = rules_of(roles[("backstop-spark", "rel-backstop-spark-executors")])
    assert {"create", "delete", "watch"} <= executor_rules[("", "pods")]
    assert ("", "secrets") not in executor_rules


@pytest.mark.helm
def test_pods_of_every_namespace_only_when_asked_for(helm: str, tmp_path: Path) -> None:
    """rbac.clusterWidePods: a cluster-wide pod list/watch, read-only, and the operator told
    to count every namespace's pods; with watchAllNamespaces the operator reads them anyway
    (its ClusterRole), so the value adds nothing there."""
    docs = render(
        helm, tmp_path, {"watchNamespaces": ["team-a"], "rbac": {"clusterWidePods": True}}
    )
    assert rules_of(one(docs, "ClusterRole", "rel-backstop-cluster")) == CLUSTER_RULES_WITH_ALL_PODS
    args = container(docs)["args"]
    assert "--capacity-all-namespaces" in args
    ctx = operator_command().make_context("operator", list(args[1:]))
    assert ctx.params["capacity_all_namespaces"] is True
    assert ctx.params["namespace"] == ["ops", "team-a"]
    every = render(helm, tmp_path, {"watchAllNamespaces": True, "rbac": {"clusterWidePods": True}})
    assert "--capacity-all-namespaces" not in container(every)["args"]
    assert rules_of(one(every, "ClusterRole", "rel-backstop-cluster")) == (
        CLUSTER_RULES_NAMESPACED_MODE
    )


@pytest.mark.helm
def test_fault09_cluster_wide_only_when_asked_for_by_name(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"watchAllNamespaces": True})
    args = container(docs)["args"]
    assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)
    # no namespaced Role but the leader election's Lease and the webhook's certificate
    # Secret in the release namespace (and the re-optimization Jobs', once they are on)
    assert sorted(r["metadata"]["name"] for r in of_kind(docs, "Role")) == [
        "rel-backstop-leader-election",
        "rel-backstop-webhook",
    ]
    assert rules_of(one(docs, "ClusterRole", "rel-backstop")) == NAMESPACED_RULES
    assert rules_of(one(docs, "ClusterRole", "rel-backstop-cluster")) == {
        ("", "nodes"): {"get", "list", "watch"}
    }
    # both at once is a contradiction the chart refuses
    proc = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "-f",
        str(values_file(tmp_path, {"watchAllNamespaces": True, "watchNamespaces": ["a"]})),
        check=False,
    )
    assert proc.returncode != 0 and "leave watchNamespaces empty" in proc.stderr


@pytest.mark.helm
def test_users_roles_aggregate_into_view_edit_and_admin(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path)
    view, edit = (
        one(docs, "ClusterRole", "rel-backstop-view"),
        one(docs, "ClusterRole", "rel-backstop-edit"),
    )
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    assert {
        k for k, v in view["metadata"]["labels"].items() if k.startswith(agg) and v == "true"
    } == {
        agg + "view",
        agg + "edit",
        agg + "admin",
    }
    assert {
        k for k, v in edit["metadata"]["labels"].items() if k.startswith(agg) and v == "true"
    } == {
        agg + "edit",
        agg + "admin",
    }
    read = {"get", "list", "watch"}
    assert rules_of(view) == {
        (GROUP, "streamtopologies"): read,
        (GROUP, "streamtopologies/status"): read,
        (GROUP, "recoveryplans"): read,
        (GROUP, "recoveryplans/status"): read,
    }
    assert rules_of(edit) == {
        (GROUP, "streamtopologies"): {"create", "update", "patch", "delete", "deletecollection"}
    }
    off = render(helm, tmp_path, {"rbac": {"userRoles": False}})
    names = [r["metadata"]["name"] for r in of_kind(off, "ClusterRole")]
    assert "rel-backstop-view" not in names and "rel-backstop-edit" not in names


@pytest.mark.helm
def test_fault07_chart_renders_replicas_lease_spreading_and_fast_replacement(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = container(docs)
    for arg in (
        "--leader-elect",
        "--leader-elect-namespace=ops",
        "--leader-elect-name=rel-backstop",
        "--lease-duration=15",
        "--renew-deadline=10",
        "--retry-period=2",
    ):
        assert arg in c["args"], arg
    assert any(e["name"] == "POD_NAME" for e in c["env"])  # the Lease names the holder
    binding = one(docs, "RoleBinding", "rel-backstop-leader-election")
    assert binding["metadata"]["namespace"] == "ops"
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = spread[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    quick = {t["key"]: t for t in pod["tolerations"]}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        assert quick[key]["effect"] == "NoExecute" and quick[key]["tolerationSeconds"] == 30
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": dep["spec"]["selector"]}
    # the rendered flags are the operator's own, and its timing checks accept them
    ctx = operator_command().make_context("operator", list(c["args"][1:]), resilient_parsing=True)
    assert ctx.params["leader_elect"] is True and ctx.params["lease_duration"] == 15

    hard = render(
        helm,
        tmp_path,
        {
            "podAntiAffinity": "hard",
            "nodeFailureTolerationSeconds": 5,
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        },
    )
    hpod = one(hard, "Deployment")["spec"]["template"]["spec"]
    required = hpod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0]["topologyKey"] == "kubernetes.io/hostname"
    keys = {t["key"]: t.get("tolerationSeconds") for t in hpod["tolerations"]}
    assert keys == {
        "node.kubernetes.io/not-ready": 5,
        "node.kubernetes.io/unreachable": 5,
        "dedicated": None,
    }

    single = render(
        helm,
        tmp_path,
        {
            "replicas": 1,
            "leaderElection": {
                "enabled": False,
                "leaseDuration": 15,
                "renewDeadline": 10,
                "retryPeriod": 2,
            },
        },
    )
    sdep = one(single, "Deployment")
    assert sdep["spec"]["replicas"] == 1 and sdep["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(a.startswith("--leader-elect") for a in container(single)["args"])
    assert sorted(r["metadata"]["name"] for r in of_kind(single, "Role")) == [
        "rel-backstop",
        "rel-backstop-webhook",
    ]
    assert of_kind(single, "PodDisruptionBudget") == []
    assert "affinity" not in sdep["spec"]["template"]["spec"]


@pytest.mark.helm
@pytest.mark.parametrize(
    ("values", "needle"),
    [
        (
            {
                "leaderElection": {
                    "enabled": False,
                    "leaseDuration": 15,
                    "renewDeadline": 10,
                    "retryPeriod": 2,
                }
            },
            "replicas > 1 needs leaderElection.enabled",
        ),
        (
            {
                "leaderElection": {
                    "enabled": True,
                    "leaseDuration": 10,
                    "renewDeadline": 10,
                    "retryPeriod": 2,
                }
            },
            "renewDeadline must be shorter",
        ),
        ({"podAntiAffinity": "sometimes"}, "podAntiAffinity"),
        ({"replicas": 0}, "replicas"),
    ],
)
def test_fault07_chart_refuses_unsafe_ha_values(
    helm: str, tmp_path: Path, values: Doc, needle: str
) -> None:
    args = ["template", "rel", str(CHART), "-f", str(values_file(tmp_path, values))]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr


@pytest.mark.helm
def test_reoptimization_is_off_until_asked_for(helm: str, tmp_path: Path) -> None:
    """Its image is built here, published nowhere: the default runs no Job, grants no Job
    RBAC, and says so to the operator."""
    docs = render(helm, tmp_path)
    env = env_of(container(docs))
    assert env["BACKSTOP_REOPTIMIZE"] == "false" and "BACKSTOP_SPARK_IMAGE" not in env
    names = {r["metadata"]["name"] for r in of_kind(docs, "Role")}
    assert not {"rel-backstop-reoptimize", "rel-backstop-reoptimize-job"} & names


@pytest.mark.helm
def test_the_job_pod_gets_pull_secrets_and_placement(helm: str, tmp_path: Path) -> None:
    placement = {
        "nodeSelector": {"pool": "batch"},
        "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "low",
    }
    on = {"imagePullSecrets": [{"name": "chart-wide"}], "reoptimization": {"enabled": True}}
    env = env_of(
        container(render(helm, tmp_path, {**on, "reoptimization": {"enabled": True, **placement}}))
    )
    assert json.loads(env["BACKSTOP_REOPT_POD"]) == {
        "imagePullSecrets": [{"name": "chart-wide"}],  # the chart's, by default
        **placement,
    }
    own = {"enabled": True, "imagePullSecrets": [{"name": "spark-registry"}]}
    env = env_of(container(render(helm, tmp_path, {**on, "reoptimization": own})))
    assert json.loads(env["BACKSTOP_REOPT_POD"]) == {
        "imagePullSecrets": [{"name": "spark-registry"}]
    }
    env = env_of(container(render(helm, tmp_path, {"reoptimization": {"enabled": True}})))
    assert "BACKSTOP_REOPT_POD" not in env


@pytest.mark.helm
def test_reoptimization_job_rbac_env_and_mounts_follow_the_mode(helm: str, tmp_path: Path) -> None:
    job = render(helm, tmp_path, {"reoptimization": {"enabled": True}})  # mode: job by default
    lease = "rel-backstop-leader-election"  # the leader election's Role is always there
    webhook = "rel-backstop-webhook"  # and the webhook's (its certificate Secret)
    names = [
        "rel-backstop",
        lease,
        webhook,
        "rel-backstop-reoptimize",
        "rel-backstop-reoptimize-job",
    ]
    assert sorted(r["metadata"]["name"] for r in of_kind(job, "Role")) == sorted(names)
    # least privilege: the Job's ServiceAccount may only create (its result ConfigMap)
    assert rules_of(one(job, "Role", "rel-backstop-reoptimize-job")) == {
        ("", "configmaps"): {"create"}
    }
    one(job, "ServiceAccount", "rel-backstop-reoptimize")
    env = env_of(container(job))
    assert env["BACKSTOP_REOPTIMIZE_MODE"] == "job" and env["BACKSTOP_SPARK_MASTER"] == "local[2]"
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert env["BACKSTOP_SPARK_IMAGE"] == f"backstop/spark:{app_version}"
    assert env["BACKSTOP_SPARK_SERVICE_ACCOUNT"] == "rel-backstop-reoptimize"
    assert json.loads(env["BACKSTOP_SPARK_RESOURCES"])["limits"]["memory"] == "2Gi"
    assert "BACKSTOP_MEMORY_LIMIT" not in env and "BACKSTOP_METRICS_CLAIM" not in env

    local = render(helm, tmp_path, {"reoptimization": {"enabled": True,
        "mode": "local", "metricsVolume": {"hostPath": "/srv/backstop"}}})  # fmt: skip
    assert sorted(r["metadata"]["name"] for r in of_kind(local, "Role")) == sorted(
        ["rel-backstop", lease, webhook]
    )
    assert len(of_kind(running(local), "ServiceAccount")) == 1, "no Job ServiceAccount (local)"
    c = container(local)
    limit = next(e for e in c["env"] if e["name"] == "BACKSTOP_MEMORY_LIMIT")
    assert limit["valueFrom"]["resourceFieldRef"] == {
        "containerName": "operator", "resource": "limits.memory"}  # fmt: skip
    assert "BACKSTOP_SPARK_IMAGE" not in env_of(c)
    mount = next(m for m in c["volumeMounts"] if m["name"] == "metrics")
    assert mount == {"name": "metrics", "mountPath": "/var/lib/backstop", "readOnly": True}
    pod = one(local, "Deployment")["spec"]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == "metrics")
    assert vol["hostPath"] == {"path": "/srv/backstop", "type": "Directory"}

    off = render(helm, tmp_path, {"reoptimization": {"enabled": False, "mode": "job"}})
    assert sorted(r["metadata"]["name"] for r in of_kind(off, "Role")) == [
        "rel-backstop",
        lease,
        webhook,
    ]
    env = env_of(container(off))
    assert env["BACKSTOP_REOPTIMIZE"] == "false" and "BACKSTOP_SPARK_MASTER" not in env


@pytest.mark.helm
@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_rendered_operator_args_are_accepted_by_the_cli(
    helm: str, tmp_path: Path, values: Doc | None
) -> None:
    """The chart and ``backstop operator`` cannot drift: every rendered flag must parse."""
    args = container(render(helm, tmp_path, values))["args"]
    assert args[0] == "operator"
    ctx = operator_command().make_context("operator", list(args[1:]))
    assert ctx.params["log_level"] in ("info", "debug")
    assert ctx.params["utilization_cap"] in (0.8, 0.7)
    assert ctx.params["cluster_scanning"] is False
    with pytest.raises(typer.BadParameter):
        operator_command().make_context("operator", ["--utilization-cap=1.5"])
    with pytest.raises(typer.TyperException, match="No such option"):
        operator_command().make_context("operator", [*args[1:], "--no-such-flag=1"])


@pytest.mark.helm
@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"recovery": {"utilizationCap": 1.5}}, "utilizationCap"),
        ({"recovery": {"gracePeriodSeconds": -1}}, "gracePeriodSeconds"),
        ({"logLevel": "loud"}, "logLevel"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
        ({"reoptimization": {"interval": "1h"}}, "interval"),
        ({"reoptimization": {"mode": "local", "sparkMaster": "k8s://https://k8s:443"}}, "mode"),
        (
            {"reoptimization": {"metricsVolume": {"existingClaim": "a", "hostPath": "/b"}}},
            "metricsVolume",
        ),
        ({"reoptimization": {"sparkMaster": "yarn"}}, "sparkMaster"),
        ({"resources": {"requests": {"cpu": "lots", "memory": "1Gi"}}}, "cpu"),
        ({"replicaCount": 3}, "replicaCount"),
        ({"metrics": {"port": 80}}, "port"),
        ({"rbac": {"create": True, "clusterWidePods": "yes"}}, "clusterWidePods"),
    ],
    ids=[
        "cap>1",
        "negative-grace",
        "log-level",
        "namespace-name",
        "interval-removed",
        "k8s-master-needs-job",
        "claim-or-hostpath",
        "yarn",
        "cpu-quantity",
        "unknown-key",
        "privileged-port",
        "cluster-wide-pods-bool",
    ],
)
def test_schema_rejects_bad_values(helm: str, tmp_path: Path, values: Doc, needle: str) -> None:
    proc = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "-f",
        str(values_file(tmp_path, values)),
        check=False,
    )
    assert proc.returncode != 0, f"accepted bad values {values}"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert needle in proc.stderr


@pytest.mark.helm
def test_metrics_port_must_differ_from_health_port(helm: str, tmp_path: Path) -> None:
    values = {"metrics": {"enabled": True, "port": 8080}}
    proc = run_helm(
        helm, "template", "rel", str(CHART), "-f", str(values_file(tmp_path, values)), check=False
    )
    assert proc.returncode != 0 and "metrics.port and health.port must differ" in proc.stderr


# ---------------------------------------------------------------- install + RBAC proof
def start_chart_operator(
    args: list[str],
    kubeconfig: Path,
    log: Path,
    extra_env: dict[str, str] | None = None,
    code: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Run ``backstop`` out of cluster with the Deployment's own args (liveness on a free port);
    ``code``: another tree of the repository to run it from (its packages first on the path,
    not the checkout's, the working directory included)."""
    port = free_port()
    argv = [
        f"--liveness=http://127.0.0.1:{port}/healthz" if a.startswith("--liveness=") else a
        for a in args
    ]
    argv = [a for a in argv if not a.startswith("--log-format=")] + ["--log-format=plain"]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), **(extra_env or {})}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(code / p) for p in ("operator", ".", "runtime"))
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "backstop", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=None if code is None else code,
        )


def webhook_env(deployment: Doc) -> dict[str, str]:
    """The Deployment's webhook settings for an operator run on this host: served at
    127.0.0.1 on a free port (no kube-proxy here to reach the Service)."""
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"].startswith("BACKSTOP_WEBHOOK_") and "value" in e
    }
    env.pop("BACKSTOP_WEBHOOK_SERVICE", None)
    env.update(BACKSTOP_WEBHOOK_PORT=str(free_port()), BACKSTOP_WEBHOOK_ADDR="127.0.0.1")
    return env


def _as_user(kube: client.ApiClient, cluster: str, ns: str, role: str, path: Path) -> Any:
    """A CustomObjectsApi as a fresh ServiceAccount of ``ns`` bound to Kubernetes' own
    ClusterRole ``role`` (view, edit, admin) in ``ns``."""
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    name = f"user-{role}"
    core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
    )
    token = service_account_token(core, ns, name)
    return client.CustomObjectsApi(api_client(str(token_kubeconfig(cluster, token, path))))


def _users_get_the_default_roles(
    kube: client.ApiClient, cluster: str, ns: str, tmp_path: Path
) -> None:
    """The chart's aggregated ClusterRoles: a user who may view the namespace lists its
    topologies and plans but creates none; one who may edit it creates one (a dry run)."""
    viewer = _as_user(kube, cluster, ns, "view", tmp_path / "view.kubeconfig")
    editor = _as_user(kube, cluster, ns, "edit", tmp_path / "edit.kubeconfig")
    doc = topology_manifest(EXAMPLE, "by-editor")

    def listed() -> bool:  # the aggregation controller folds the roles in within seconds
        return not forbidden(
            lambda: viewer.list_namespaced_custom_object(GROUP, VERSION, ns, "streamtopologies")
        ) and not forbidden(
            lambda: viewer.list_namespaced_custom_object(GROUP, VERSION, ns, "recoveryplans")
        )

    wait_for(listed, 30, "a viewer listing StreamTopologies and RecoveryPlans")

    def create(api: Any) -> Any:
        return api.create_namespaced_custom_object(
            GROUP, VERSION, ns, "streamtopologies", doc, dry_run="All"
        )

    assert forbidden(lambda: create(viewer)), "a viewer created a StreamTopology"
    wait_for(lambda: not forbidden(lambda: create(editor)), 30, "an editor creating one")
    assert forbidden(
        lambda: editor.delete_namespaced_custom_object(GROUP, VERSION, ns, "recoveryplans", "x")
    ), "RecoveryPlans are the operator's record"


def forbidden(call: Any) -> bool:
    try:
        call()
    except ApiException as err:
        return bool(err.status == 403)
    return False


@pytest.fixture
def namespaces(kube: client.ApiClient) -> Iterator[tuple[str, str]]:
    """(release namespace, watched namespace), both fresh, deleted afterwards."""
    core = client.CoreV1Api(kube)
    suffix = uuid.uuid4().hex[:6]
    pair = (f"bs-{suffix}", f"bw-{suffix}")
    for ns in pair:
        create_namespace(core, ns)
    yield pair
    for ns in pair:
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)


@pytest.mark.helm
@pytest.mark.cluster
def test_install_then_operator_runs_on_the_chart_service_account_alone(
    helm: str,
    cluster: str,
    kube: client.ApiClient,
    simulator: Simulator,
    namespaces: tuple[str, str],
    node_prefix: str,
    tmp_path: Path,
) -> None:
    release_ns, watched_ns = namespaces
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    release = f"bk{uuid.uuid4().hex[:5]}"
    values = {
        "watchNamespaces": [watched_ns],
        # no kubelet can run the image here: keep the Deployment's pod Pending, off the nodes
        "nodeSelector": {"backstop.dev/no-such-node": "true"},
    }
    nodes = [f"{node_prefix}-{i}" for i in range(6)]
    for i, n in enumerate(nodes):
        simulator.create(n, NodeShape(cpu="4"), zone=f"zone-{i % 2}")
    kc = ["--kubeconfig", cluster]
    run_helm(
        helm,
        "install",
        release,
        str(CHART),
        "--namespace",
        release_ns,
        "-f",
        str(values_file(tmp_path, values)),
        *kc,
    )
    proc: subprocess.Popen[bytes] | None = None
    log = tmp_path / "operator.log"
    try:
        manifest = list(
            yaml.safe_load_all(
                run_helm(helm, "get", "manifest", release, "-n", release_ns, *kc).stdout
            )
        )
        deployment = one([d for d in manifest if d], "Deployment")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        sa_name = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        token = service_account_token(core, release_ns, sa_name)
        as_sa = api_client(str(token_kubeconfig(cluster, token, tmp_path / "sa.kubeconfig")))
        sa_core = client.CoreV1Api(as_sa)
        sa_custom = client.CustomObjectsApi(as_sa)

        # refused: everything the chart does not grant
        assert forbidden(lambda: sa_core.delete_node(nodes[0])), "deleting Nodes"
        assert forbidden(lambda: sa_core.list_namespaced_secret(watched_ns)), "reading Secrets"
        assert forbidden(lambda: sa_core.list_namespaced_secret(release_ns))
        # pod specs (inline secrets included) only in the watched namespaces: the operator
        # below plans on these rights, and the log check at the end shows it never tried more
        assert forbidden(lambda: sa_core.list_pod_for_all_namespaces()), "listing every pod"
        assert forbidden(lambda: sa_core.list_namespaced_pod("kube-system")), "kube-system pods"
        assert sa_core.list_namespaced_pod(watched_ns).items == []
        assert forbidden(
            lambda: sa_core.create_namespaced_pod(
                "kube-system",
                {
                    "metadata": {"name": "intruder"},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            )
        ), "creating pods outside the watched namespaces"
        assert forbidden(
            lambda: sa_custom.list_namespaced_custom_object(
                GROUP, VERSION, "default", "streamtopologies"
            )
        ), "topologies outside the watched namespaces"
        assert forbidden(
            lambda: sa_core.patch_namespaced_config_map(
                "extension-apiserver-authentication", "kube-system", {"data": {}}
            )
        ), "ConfigMaps of kube-system"
        assert forbidden(lambda: sa_core.patch_node(nodes[0], {"metadata": {"labels": {"x": "y"}}}))
        assert core.read_node(nodes[0]).metadata.name == nodes[0]

        _users_get_the_default_roles(kube, cluster, watched_ns, tmp_path)

        # sufficient: the demo scenario with the operator on that token alone, serving the
        # admission webhook with the chart's settings (its self-signed certificate Secret and
        # its configuration), at a URL on this host: no kube-proxy here to reach the Service
        env = webhook_env(deployment)
        proc = start_chart_operator(args, tmp_path / "sa.kubeconfig", log, env)
        doc = topology_manifest(EXAMPLE, "senti")
        custom.create_namespaced_custom_object(GROUP, VERSION, watched_ns, "streamtopologies", doc)

        def ready() -> Doc | None:
            assert proc is not None and proc.poll() is None, "operator exited:\n" + log.read_text()
            obj: Doc = custom.get_namespaced_custom_object(
                GROUP, VERSION, watched_ns, "streamtopologies", "senti"
            )
            c = condition(obj, "Ready")
            return obj if c and c["status"] == "True" else None

        obj = wait_for(ready, 120, "senti Ready=True under the chart's RBAC")
        assert obj is not None
        refusal = _webhook_refuses_a_cycle(custom, watched_ns, doc)
        assert refusal.startswith("spec.operators[0].inputs: the topology has a cycle"), refusal
        tls = core.read_namespaced_secret(
            env["BACKSTOP_WEBHOOK_CERT_SECRET"].split("/")[1], release_ns
        )
        assert set(tls.data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}, "CA and certificate"
        [owner] = tls.metadata.owner_references  # what makes helm uninstall remove it
        assert (owner.kind, owner.name) == (
            "ValidatingWebhookConfiguration",
            env["BACKSTOP_WEBHOOK_CONFIGURATION"],
        )
        assignment = obj["status"]["plan"]["assignment"]
        pods = core.list_namespaced_pod(watched_ns, label_selector=f"{GROUP}/topology=senti").items
        assert sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods) == sorted(assignment)
        for pod in pods:
            assert pod.status.phase == "Running"
            assert pod.spec.node_name == assignment[pod.metadata.labels[f"{GROUP}/task"]]
        events = core.list_namespaced_event(watched_ns).items
        assert any(e.reason == "Planned" and e.involved_object.name == "senti" for e in events)
        forbidden_lines = [
            line
            for line in log.read_text().splitlines()
            if re.search(r"forbidden|\b403\b", line, re.I)
        ]
        assert forbidden_lines == [], "the operator hit RBAC denials:\n" + "\n".join(
            forbidden_lines
        )

        # delete while the operator runs, so kopf can release its finalizer
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, watched_ns, "streamtopologies", "senti"
        )

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(
                    GROUP, VERSION, watched_ns, "streamtopologies", "senti"
                )
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait_for(gone, 60, "senti deleted")
    finally:
        if proc is not None:
            stop_operator(proc)
        # after a failure the topology may still carry kopf's finalizer: drop it so the
        # namespace can go
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                watched_ns,
                "streamtopologies",
                "senti",
                {"metadata": {"finalizers": None}},
            )
        run_helm(helm, "uninstall", release, "--namespace", release_ns, "--wait", *kc, check=False)
        for n in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(n)
    rbac = client.RbacAuthorizationV1Api(kube)
    leftovers = [
        r.metadata.name
        for r in rbac.list_cluster_role().items
        if r.metadata.name.startswith(release)
    ]
    assert leftovers == [], "helm uninstall removes the ClusterRoles"
    configs = client.AdmissionregistrationV1Api(kube).list_validating_webhook_configuration()
    leftover = [c.metadata.name for c in configs.items if c.metadata.name.startswith(release)]
    assert leftover == [], "helm uninstall removes the webhook configuration the operator filled"

    def secrets_left() -> list[str]:  # the garbage collector follows the owner: not at once
        items = core.list_namespaced_secret(release_ns).items
        return [s.metadata.name for s in items if s.metadata.name.startswith(release)]

    wait_for(lambda: secrets_left() == [], 30, "the webhook certificate Secret to go")


def _webhook_refuses_a_cycle(custom: client.CustomObjectsApi, namespace: str, doc: Doc) -> str:
    """Create a copy of ``doc`` with a cycle (as the admin); the webhook's one line."""
    bad = {**doc, "metadata": {"name": "cyclic"}}
    ops = [dict(o) for o in doc["spec"]["operators"]]
    ops[0] = {**ops[0], "inputs": [{"operator": ops[-1]["name"]}]}
    bad["spec"] = {**doc["spec"], "operators": ops}

    def refused() -> str | None:  # the webhook may still be starting: Ignore admits then
        try:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "streamtopologies", bad
            )
        except ApiException as err:
            message = str(json.loads(err.body)["message"])
            return message.split("denied the request: ", 1)[-1]
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "streamtopologies", "cyclic"
        )
        return None

    line = wait_for(refused, 30, "the webhook refusing a cycle")
    assert line is not None
    return line


# ---------------------------------------------------------------- the admission webhook
@pytest.mark.helm
def test_webhook_objects_render_with_a_shared_self_signed_certificate(
    helm: str, tmp_path: Path
) -> None:
    """A Service to every replica, the configuration the operator fills
    (rendered empty, so uninstall removes it), RBAC limited to those names, and the env the
    operator reads to serve it."""
    from backstop.controller.admission import Webhook

    docs = render(helm, tmp_path)
    c = container(docs)
    env = env_of(c)
    svc = one(docs, "Service", "rel-backstop-webhook")
    assert svc["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] == "webhook"
    assert {"name": "webhook", "containerPort": int(env["BACKSTOP_WEBHOOK_PORT"])} in c["ports"]
    assert env["BACKSTOP_WEBHOOK_ADDR"] == "0.0.0.0"
    assert env["BACKSTOP_WEBHOOK_SERVICE"] == "ops/rel-backstop-webhook"
    assert env["BACKSTOP_WEBHOOK_CERT_SECRET"] == "ops/rel-backstop-webhook-tls"
    assert "BACKSTOP_WEBHOOK_CERT_DIR" not in env
    # the certificate names what the API server calls: the Service's DNS name
    webhook = Webhook(port=9443, service=env["BACKSTOP_WEBHOOK_SERVICE"])
    assert "rel-backstop-webhook.ops.svc" in webhook.hostnames()

    name = env["BACKSTOP_WEBHOOK_CONFIGURATION"]
    vwc = one(docs, "ValidatingWebhookConfiguration", name)
    assert "webhooks" not in vwc, "the operator fills it; Helm upgrades must not reset it"
    assert of_kind(docs, "MutatingWebhookConfiguration") == []  # the webhook only validates
    cluster_role = one(docs, "ClusterRole", "rel-backstop-webhook")
    assert {tuple(r["resources"]) for r in cluster_role["rules"]} == {
        ("validatingwebhookconfigurations",)
    }
    by_names = [r for r in cluster_role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in by_names] == [[name]]
    assert sorted(by_names[0]["verbs"]) == ["get", "patch"]
    unnamed = [r for r in cluster_role["rules"] if not r.get("resourceNames")]
    assert [r["verbs"] for r in unnamed] == [["create"]]
    role = one(docs, "Role", "rel-backstop-webhook")
    assert role["metadata"]["namespace"] == "ops"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {"apiGroups": [""], "resources": ["secrets"],
         "resourceNames": ["rel-backstop-webhook-tls"], "verbs": ["get", "patch"]}
    ]  # fmt: skip
    one(docs, "ClusterRoleBinding", "rel-backstop-webhook")
    one(docs, "RoleBinding", "rel-backstop-webhook")
    assert of_kind(docs, "Certificate") == []


@pytest.mark.helm
def test_webhook_with_cert_manager_mounts_its_secret_and_injects_the_ca(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path, {"webhook": {"enabled": True, "port": 9443,
                                               "certificate": "cert-manager"}})  # fmt: skip
    c = container(docs)
    env = env_of(c)
    cert = one(docs, "Certificate", "rel-backstop-webhook-tls")
    assert "rel-backstop-webhook.ops.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(docs, "Issuer")["metadata"]["name"]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == env["BACKSTOP_WEBHOOK_CERT_DIR"])
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    vwc = one(docs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "ops/rel-backstop-webhook-tls"
    }
    assert "BACKSTOP_WEBHOOK_CERT_SECRET" not in env
    assert "rel-backstop-webhook" not in [r["metadata"]["name"] for r in of_kind(docs, "Role")]


@pytest.mark.helm
def test_webhook_disabled_renders_none_of_it(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"webhook": {"enabled": False, "port": 9443,
                                               "certificate": "self-signed"}})  # fmt: skip
    assert not [k for k in env_of(container(docs)) if k.startswith("BACKSTOP_WEBHOOK_")]
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    assert all(not d["metadata"]["name"].endswith("-webhook") for d in docs)


@pytest.mark.helm
def test_node_local_stores_are_admitted_only_when_the_value_says_so(
    helm: str, tmp_path: Path
) -> None:
    """``store.allowNodeLocal`` (single-host development) is the operator's
    ``BACKSTOP_ALLOW_NODE_LOCAL_STORE``; by default the variable is absent (refused)."""
    assert "BACKSTOP_ALLOW_NODE_LOCAL_STORE" not in env_of(container(render(helm, tmp_path)))
    on = env_of(container(render(helm, tmp_path, {"store": {"allowNodeLocal": True}})))
    assert on["BACKSTOP_ALLOW_NODE_LOCAL_STORE"] == "true"
    assert Settings.from_env(on).allow_node_local_store is True


def test_helm_upgrade_first_applies_the_new_images_crds(helm: str, tmp_path: Path) -> None:
    """Helm never upgrades ``crds/``: a pre-upgrade Job runs ``backstop crd --apply`` with the
    chart's image, as a ServiceAccount that may get and update the chart's two CRDs only,
    and everything of it goes once it succeeded. Its pod is no backend of the chart's
    Services."""
    docs = render(helm, tmp_path, {"metrics": {"enabled": True}})
    job = one(docs, "Job", "rel-backstop-crd-upgrade")
    hooked = [d for d in docs if "crd-upgrade" in d["metadata"]["name"]]
    assert {d["kind"] for d in hooked} == {
        "Job", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}  # fmt: skip
    for d in hooked:
        notes = d["metadata"]["annotations"]
        assert notes["helm.sh/hook"] == "pre-upgrade"
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooked}
    assert weight["ServiceAccount"] < weight["ClusterRoleBinding"] < weight["Job"]
    pod = job["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["args"] == ["crd", "--apply"] and c["image"] == container(docs)["image"]
    assert pod["serviceAccountName"] == "rel-backstop-crd-upgrade"
    assert pod["restartPolicy"] == "Never"
    [rule] = one(docs, "ClusterRole", "rel-backstop-crd-upgrade")["rules"]
    crds = sorted(yaml.safe_load(p.read_text())["metadata"]["name"]
                  for p in (CHART / "crds").glob("*.yaml"))  # fmt: skip
    assert sorted(rule["resourceNames"]) == crds
    assert sorted(rule["verbs"]) == ["get", "update"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    for svc in of_kind(docs, "Service"):
        selector = svc["spec"]["selector"]
        assert not all(labels.get(k) == v for k, v in selector.items()), svc["metadata"]["name"]
    off = render(helm, tmp_path, {"crds": {"upgrade": False}})
    assert not [d for d in off if "crd-upgrade" in d["metadata"]["name"]]
