"""The operator of a test with the chart's own rights, not the cluster admin's.

:func:`chart_rights` renders the chart's RBAC with the real ``helm template`` (release
namespace = the operator's namespace, values matching the operator's arguments and
environment: watched namespaces, ``--all-namespaces``, leader election, the webhook, a
re-optimization Job), applies the chart's ServiceAccount and the Roles, ClusterRoles and
bindings that give it rights, and writes a kubeconfig with that ServiceAccount's token. An
operator started on it is refused (403) whatever the chart does not grant, as it would be
after ``helm install``. The admin kubeconfig stays for what a test itself does.

Cluster-scoped objects (ClusterRoles, their bindings, the webhook configuration) are owned
by the release namespace (an owner reference to the Namespace): the garbage collector
removes them once the namespace is gone, whoever deletes it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.k8s.cluster import api_client

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "backstop"
Doc = dict[str, Any]
_CACHE: dict[tuple[str, str, str, str], Path] = {}


def helm_binary() -> str | None:
    """The helm binary: on PATH, or in .tools/bin (``make tools``); ``None`` if neither."""
    tools = ROOT / ".tools" / "bin" / "helm"
    return shutil.which("helm") or (str(tools) if os.access(tools, os.X_OK) else None)


def release_name(namespace: str) -> str:
    """The test release of ``namespace``: one per namespace, since its ClusterRoles are
    cluster-scoped (it contains the chart's name, so it is also the chart's full name)."""
    return f"backstop-{namespace}"[:53]


def webhook_configuration(namespace: str) -> str:
    """The ValidatingWebhookConfiguration the chart names for the release of ``namespace``."""
    return f"{release_name(namespace)}.{namespace}.backstop.dev"


@dataclass(frozen=True)
class OperatorRights:
    """What an operator started with ``args`` and ``env`` needs the chart to grant."""

    namespaces: tuple[str, ...]
    all_namespaces: bool
    capacity_all_namespaces: bool
    leader_elect: bool
    webhook: bool
    reoptimize_job: bool
    job_service_account: str | None

    @classmethod
    def of(cls, args: Sequence[str], env: Mapping[str, str]) -> OperatorRights:
        namespaces: list[str] = []
        for i, a in enumerate(args):
            if a in ("--namespace", "-n") and i + 1 < len(args):
                namespaces.append(args[i + 1])
            elif a.startswith("--namespace="):
                namespaces.append(a.split("=", 1)[1])
        port = _option(args, "--webhook-port") or env.get("BACKSTOP_WEBHOOK_PORT", "0")
        job = env.get("BACKSTOP_REOPTIMIZE", "true") == "true" and (
            env.get("BACKSTOP_REOPTIMIZE_MODE") == "job"
        )
        return cls(
            namespaces=tuple(dict.fromkeys(namespaces)),
            all_namespaces="--all-namespaces" in args or "-A" in args,
            capacity_all_namespaces="--capacity-all-namespaces" in args
            or env.get("BACKSTOP_CAPACITY_ALL_NAMESPACES") == "true",
            leader_elect="--leader-elect" in args or env.get("BACKSTOP_LEADER_ELECT") == "true",
            webhook=int(port) > 0,
            reoptimize_job=job,
            job_service_account=env.get("BACKSTOP_SPARK_SERVICE_ACCOUNT") if job else None,
        )

    def values(self, release_namespace: str) -> Doc:
        """The chart's values for these rights, the release in ``release_namespace``."""
        reopt: Doc = {"enabled": self.reoptimize_job, "mode": "job"}
        if self.job_service_account:
            reopt["driverServiceAccount"] = {"name": self.job_service_account}
        return {
            "image": {"registry": "backstop"},  # required by the chart; the images built here
            "watchNamespaces": [n for n in self.namespaces if n != release_namespace],
            "watchAllNamespaces": self.all_namespaces,
            "rbac": {"clusterWidePods": self.capacity_all_namespaces and not self.all_namespaces},
            "leaderElection": {"enabled": self.leader_elect},
            "replicas": 2 if self.leader_elect else 1,
            "webhook": {"enabled": self.webhook},
            "reoptimization": reopt,
        }


def _option(args: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def render_rights(namespace: str, values: Doc) -> list[Doc]:
    """The chart's ServiceAccount of the release of ``namespace``, and the roles bound to it
    with their bindings (``helm template``); nothing else (the webhook configuration aside)."""
    helm = helm_binary()
    if helm is None:
        raise AssertionError("helm is not installed: run `make tools` (.tools/bin/helm)")
    release = release_name(namespace)
    proc = subprocess.run(
        [helm, "template", release, str(CHART), "--namespace", namespace, "-f", "-"],
        input=yaml.safe_dump(values), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"helm template of the chart's RBAC failed:\n{proc.stderr}")
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [
        d
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and {"kind": "ServiceAccount", "name": sa, "namespace": namespace} in d["subjects"]
    ]
    roles = {
        (b["roleRef"]["kind"], b["roleRef"]["name"], b["metadata"].get("namespace"))
        for b in bindings
    }
    keep = [
        d
        for d in docs
        if (d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa)
        or (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) in roles
        or (d["kind"] == "ValidatingWebhookConfiguration")
    ]
    return [*keep, *bindings]


def _put(api: client.ApiClient, doc: Doc) -> None:
    """Create ``doc``, or patch it to this content when it exists."""
    kind, name, ns = doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    ops: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "ServiceAccount": (
            lambda: core.create_namespaced_service_account(ns, doc),
            lambda: core.patch_namespaced_service_account(name, ns, doc),
        ),
        "Role": (
            lambda: rbac.create_namespaced_role(ns, doc),
            lambda: rbac.patch_namespaced_role(name, ns, doc),
        ),
        "RoleBinding": (
            lambda: rbac.create_namespaced_role_binding(ns, doc),
            lambda: rbac.patch_namespaced_role_binding(name, ns, doc),
        ),
        "ClusterRole": (
            lambda: rbac.create_cluster_role(doc),
            lambda: rbac.patch_cluster_role(name, doc),
        ),
        "ClusterRoleBinding": (
            lambda: rbac.create_cluster_role_binding(doc),
            lambda: rbac.patch_cluster_role_binding(name, doc),
        ),
        "ValidatingWebhookConfiguration": (
            lambda: admission.create_validating_webhook_configuration(doc),
            lambda: None,  # the operator keeps its entry: leave it as it is
        ),
    }
    create, patch = ops[kind]
    try:
        create()
    except ApiException as err:
        if err.status != 409:
            raise
        patch()


def _poll(pred: Callable[[], str | None], what: str, timeout: float = 30) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = pred()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def service_account_token(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The token from the SA's auto-created Secret (v1.20's token controller)."""

    def secret_name() -> str | None:
        sa = core.read_namespaced_service_account(name, namespace)
        for ref in sa.secrets or []:
            if ref.name.startswith(f"{name}-token-"):
                return str(ref.name)
        return None

    secret = _poll(secret_name, f"the token Secret of ServiceAccount {namespace}/{name}")

    def token() -> str | None:
        data = core.read_namespaced_secret(secret, namespace).data or {}
        return str(data["token"]) if data.get("token") else None

    return base64.b64decode(_poll(token, "the token in its Secret")).decode()


def token_kubeconfig(admin_kubeconfig: str, token: str, path: Path) -> Path:
    """A kubeconfig that authenticates with ``token`` against the admin config's server/CA."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster["server"],
                    "certificate-authority-data": cluster["certificate-authority-data"],
                },
            }
        ],
        "users": [{"name": "backstop-operator", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "backstop-operator"}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def chart_rights(
    admin_kubeconfig: str, namespace: str, rights: OperatorRights, workdir: Path
) -> Path:
    """A kubeconfig (in ``workdir``) of the chart's ServiceAccount of the release of
    ``namespace``, with the chart's rights for ``rights``; made once per namespace and
    rights (a restart of the operator reuses it)."""
    api = api_client(admin_kubeconfig)
    try:
        core = client.CoreV1Api(api)
        owner = core.read_namespace(namespace).metadata
        values = rights.values(namespace)
        key = (admin_kubeconfig, namespace, owner.uid, json.dumps(values, sort_keys=True))
        cached = _CACHE.get(key)
        if cached is not None and cached.exists():
            return cached
        docs = render_rights(namespace, values)
        ref = {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": owner.uid}
        for doc in docs:
            if "namespace" not in doc["metadata"]:  # cluster-scoped: goes with the namespace
                doc["metadata"]["ownerReferences"] = [ref]
            _put(api, doc)
        [sa] = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
        token = service_account_token(core, namespace, sa)
        path = workdir / f"{release_name(namespace)}-{len(_CACHE)}.kubeconfig"
        _CACHE[key] = token_kubeconfig(admin_kubeconfig, token, path)
        return _CACHE[key]
    finally:
        api.close()


def chart_operator_settings(namespace: str, rights: OperatorRights) -> dict[str, str]:
    """The environment the chart's Deployment gives the operator for ``rights`` that the
    RBAC depends on (the webhook's configuration and certificate Secret are named)."""
    if not rights.webhook:
        return {}
    release = release_name(namespace)
    return {
        "BACKSTOP_WEBHOOK_CONFIGURATION": webhook_configuration(namespace),
        "BACKSTOP_WEBHOOK_CERT_SECRET": f"{namespace}/{release}-webhook-tls",
    }


def chart_operator(
    admin_kubeconfig: str,
    namespace: str,
    args: Sequence[str],
    env: Mapping[str, str],
    workdir: Path,
) -> tuple[str, list[str], dict[str, str]]:
    """The kubeconfig, arguments and environment that run ``backstop operator ARGS`` (with
    ``env``) as the chart's ServiceAccount of the release of ``namespace``: as the chart's
    Deployment does, it serves the given namespaces only (``--no-cluster-scanning``) and
    names its webhook configuration and certificate Secret after the release."""
    rights = OperatorRights.of(args, {**os.environ, **env})
    kubeconfig = chart_rights(admin_kubeconfig, namespace, rights, workdir)
    scanning = any(a in ("--cluster-scanning", "--no-cluster-scanning") for a in args)
    argv = [*args] if scanning else [*args, "--no-cluster-scanning"]
    return str(kubeconfig), argv, {**chart_operator_settings(namespace, rights), **env}
