"""``helm upgrade`` from the previous chart version with a topology running.

The previous version is the chart and operator of :data:`PREVIOUS` (chart 0.1.0), taken
from this repository's history with ``git archive``: its chart is installed, its operator
(its own code, on its own chart's ServiceAccount and RBAC) plans and runs a topology on
simulated nodes and stores what it stores (a status with its copy of the spec, Kopf's
last-handled annotation, pods pinned by hostname, its webhook certificate). Then the
upgrade, as a user runs it: the CRDs replaced as the chart's pre-upgrade hook does
(``backstop crd --apply``; no kubelet here runs the hook's image, so ``--no-hooks``), then
``helm upgrade`` to this chart and this operator. The running topology must be taken
over as it is: no task pod replaced or restarted, Ready kept, the admission webhook
answering with the old certificate Secret, the upgraded RBAC enough (no 403), and a spec
edit planned by the new operator.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop_testkit.sim.nodesim import NodeShape, Simulator
from backstop_testkit.support.chartrights import service_account_token, token_kubeconfig
from backstop_testkit.support.kubetools import (
    ROOT,
    condition,
    stop_operator,
    topology_manifest,
    wait_for,
)
from tests.chart.test_chart import (
    CHART,
    _webhook_refuses_a_cycle,
    helm,
    namespaces,
    one,
    run_helm,
    start_chart_operator,
    values_file,
    webhook_env,
)

__all__ = ["helm", "namespaces"]  # fixtures used here

PREVIOUS = "1e0d259"
"""The commit of chart 0.1.0, the chart version this one upgrades from: its status keeps a
copy of the spec, its pods are pinned by hostname, its webhook certificate is of the old
format."""

Doc = dict[str, Any]
PLURAL = "streamtopologies"
NAME = "senti"


@pytest.fixture
def previous(tmp_path: Path) -> Path:
    """The previous version's chart, operator, planners, runtime and examples."""
    out = tmp_path / "previous"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "charts", "operator", "planners",
         "runtime", "examples"],
        capture_output=True,
        check=False,
    )  # fmt: skip
    if archive.returncode != 0:  # a shallow clone: the test cannot run, and must not pass
        pytest.fail(f"git archive {PREVIOUS} failed (a shallow clone?): {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def start_operator(
    deployment: Doc, kubeconfig: Path, log: Path, code: Path | None
) -> subprocess.Popen[bytes]:
    """Run ``backstop operator`` out of cluster with the Deployment's args and webhook
    settings; ``code``: the tree to run it from (``None``: this one)."""
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return start_chart_operator(args, kubeconfig, log, webhook_env(deployment), code=code)


def task_pods(core: client.CoreV1Api, ns: str) -> dict[str, tuple[str, int]]:
    """Pod name -> (uid, restarts) of the topology's task pods."""
    pods = core.list_namespaced_pod(ns, label_selector=f"{GROUP}/topology={NAME}").items
    return {
        p.metadata.name: (
            p.metadata.uid,
            sum(c.restart_count for c in (p.status.container_statuses or [])),
        )
        for p in pods
    }


def apply_crds(code: Path | None, kubeconfig: str) -> None:
    """Create or replace the CRDs of ``code`` (``None``: this tree), as the chart's
    pre-upgrade hook does."""
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    if code is None:
        argv = [sys.executable, "-m", "backstop", "crd", "--apply"]
    else:  # the previous version predates `crd --apply`: its CRD files, applied
        argv = ["kubectl", "apply", "--server-side", "--force-conflicts", "-f"]
        argv.append(str(code / "charts" / "backstop" / "crds"))
    subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True)


@pytest.mark.helm
@pytest.mark.cluster
def test_helm_upgrade_from_the_previous_version_keeps_a_running_topology(
    helm: str,
    cluster: str,
    kube: client.ApiClient,
    simulator: Simulator,
    namespaces: tuple[str, str],
    node_prefix: str,
    tmp_path: Path,
    previous: Path,
) -> None:
    release_ns, watched_ns = namespaces
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    release = f"bu{uuid.uuid4().hex[:5]}"
    kc = ["--kubeconfig", cluster]
    values = values_file(
        tmp_path,
        {"watchNamespaces": [watched_ns], "nodeSelector": {"backstop.dev/no-such-node": "true"}},
    )
    for i in range(4):
        simulator.create(f"{node_prefix}-{i}", NodeShape(cpu="4"), zone=f"zone-{i % 2}")
    proc: subprocess.Popen[bytes] | None = None
    try:
        apply_crds(previous, cluster)  # a cluster that has run the previous version
        chart = str(previous / "charts" / "backstop")
        # chart 0.1.0 had no image.registry (its schema refuses the key)
        run_helm(helm, "install", release, chart, "-n", release_ns, "-f", str(values), *kc,
                 local_images=False)  # fmt: skip
        old_log = tmp_path / "previous.log"
        deployment = _deployment(helm, release, release_ns, kc)
        kubeconfig = _sa(kube, cluster, deployment, release_ns, tmp_path)
        proc = start_operator(deployment, kubeconfig, old_log, previous)
        doc = topology_manifest(previous / "examples" / "twitter-sentiment.yaml", NAME)
        custom.create_namespaced_custom_object(GROUP, VERSION, watched_ns, PLURAL, doc)
        _wait_ready(custom, watched_ns, proc, old_log, "under the previous operator")
        before = wait_for(lambda: _all_running(core, watched_ns), 60, "the task pods Running")
        stop_operator(proc)
        proc = None

        apply_crds(None, cluster)  # the pre-upgrade hook's work
        run_helm(helm, "upgrade", release, str(CHART), "-n", release_ns, "-f", str(values),
                 "--no-hooks", *kc)  # fmt: skip
        new_log = tmp_path / "upgraded.log"
        deployment = _deployment(helm, release, release_ns, kc)
        kubeconfig = _sa(kube, cluster, deployment, release_ns, tmp_path)
        proc = start_operator(deployment, kubeconfig, new_log, None)
        obj = _wait_taken_over(custom, watched_ns, proc, new_log)
        time.sleep(5)  # a new operator that replaced or restarted a pod has begun by now
        assert task_pods(core, watched_ns) == before, "task pods changed across the upgrade"
        ready = condition(obj, "Ready")
        assert ready is not None and ready["status"] == "True"
        refusal = _webhook_refuses_a_cycle(custom, watched_ns, doc)
        assert refusal.startswith("spec.operators[0].inputs: the topology has a cycle"), refusal

        _edit_is_planned(custom, watched_ns, obj, proc, new_log)
        lines = new_log.read_text().splitlines()
        denied = [ln for ln in lines if re.search(r"forbidden|\b403\b", ln, re.I)]
        assert denied == [], "the upgraded operator hit RBAC denials:\n" + "\n".join(denied)
        custom.delete_namespaced_custom_object(GROUP, VERSION, watched_ns, PLURAL, NAME)
        wait_for(lambda: _gone(custom, watched_ns), 60, f"{NAME} deleted")
    finally:
        if proc is not None:
            stop_operator(proc)
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, watched_ns, PLURAL, NAME, {"metadata": {"finalizers": None}}
            )
        run_helm(helm, "uninstall", release, "-n", release_ns, "--wait", *kc, check=False)
        apply_crds(None, cluster)  # the tests after this one run on this tree's CRDs
        for i in range(4):
            with contextlib.suppress(ApiException):
                core.delete_node(f"{node_prefix}-{i}")


def _deployment(helm: str, release: str, ns: str, kc: list[str]) -> Doc:
    manifest = yaml.safe_load_all(run_helm(helm, "get", "manifest", release, "-n", ns, *kc).stdout)
    return one([d for d in manifest if d], "Deployment")


def _sa(kube: client.ApiClient, cluster: str, deployment: Doc, ns: str, tmp_path: Path) -> Path:
    """A kubeconfig with the token of the Deployment's operator ServiceAccount."""
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = service_account_token(client.CoreV1Api(kube), ns, sa)
    return token_kubeconfig(cluster, token, tmp_path / f"{uuid.uuid4().hex[:6]}.kubeconfig")


def _get(custom: client.CustomObjectsApi, ns: str) -> Doc:
    obj: Doc = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
    return obj


def _alive(proc: subprocess.Popen[bytes], log: Path) -> None:
    assert proc.poll() is None, "operator exited:\n" + log.read_text()[-5000:]


def _wait_ready(
    custom: client.CustomObjectsApi, ns: str, proc: subprocess.Popen[bytes], log: Path, how: str
) -> Doc:
    def ready() -> Doc | None:
        _alive(proc, log)
        obj = _get(custom, ns)
        c = condition(obj, "Ready")
        return obj if c and c["status"] == "True" else None

    obj = wait_for(ready, 120, f"{NAME} Ready {how}")
    assert obj is not None
    return obj


def _all_running(core: client.CoreV1Api, ns: str) -> dict[str, tuple[str, int]] | None:
    pods = core.list_namespaced_pod(ns, label_selector=f"{GROUP}/topology={NAME}").items
    if not pods or any(p.status.phase != "Running" for p in pods):
        return None
    return task_pods(core, ns)


def _wait_taken_over(
    custom: client.CustomObjectsApi, ns: str, proc: subprocess.Popen[bytes], log: Path
) -> Doc:
    """Ready under the new operator, which has handled the object (its own records)."""

    def handled() -> Doc | None:
        _alive(proc, log)
        obj = _get(custom, ns)
        c = condition(obj, "Ready")
        plan = obj.get("status", {}).get("plan", {})
        fresh = "spec" not in plan and plan.get("specHash")  # the spec stored once
        return obj if c and c["status"] == "True" and fresh else None

    obj = wait_for(handled, 120, f"{NAME} Ready and its status rewritten after the upgrade")
    assert obj is not None
    return obj


def _edit_is_planned(
    custom: client.CustomObjectsApi, ns: str, obj: Doc, proc: subprocess.Popen[bytes], log: Path
) -> None:
    """An edit after the upgrade gets a new plan: the taken-over state is operable."""
    old_hash = obj["status"]["plan"]["specHash"]
    bound = float(obj["spec"]["recoveryLatencyBound"]) + 1
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, NAME, {"spec": {"recoveryLatencyBound": bound}}
    )

    def replanned() -> bool:
        _alive(proc, log)
        cur = _get(custom, ns)
        c = condition(cur, "Ready")
        fresh = cur["status"]["plan"].get("specHash") != old_hash
        return fresh and c is not None and c["status"] == "True"

    wait_for(replanned, 120, "the edit planned and Ready under the upgraded operator")


def _gone(custom: client.CustomObjectsApi, ns: str) -> bool:
    try:
        _get(custom, ns)
    except ApiException as err:
        return bool(err.status == 404)
    return False


def test_the_previous_version_is_older_than_this_chart() -> None:
    """The upgrade above is from an older chart version than this one."""
    here = yaml.safe_load((CHART / "Chart.yaml").read_text())
    was = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{PREVIOUS}:charts/backstop/Chart.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    old = yaml.safe_load(was)
    assert tuple(map(int, old["version"].split("."))) < tuple(map(int, here["version"].split(".")))
