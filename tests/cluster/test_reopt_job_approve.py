"""``reoptimization.mode: job`` and approving a suggestion, on the local control plane.

The operator runs in ``mode: job``: for a due run it creates the input ConfigMap and a
batch/v1 Job in its own namespace, with the Spark image, resources and ServiceAccount of
its settings. Simulated nodes run no containers, so the test plays the Job's part (a
simulated run, not Spark): it reads the inputs the operator wrote, computes the
recommendation with the same domain code the Spark job distributes
(:func:`backstop.domain.recommend.recommend_topology`), hands it back with the Job's own
:func:`backstop.k8s.reoptjob.publish_result` *as the Job's ServiceAccount* (impersonated, with
the chart's one rule: create ConfigMaps), and marks the Job's pod Succeeded; the Job
controller then completes the Job. The operator must read the result, record the
suggestion and delete the Job and its ConfigMaps. Then the suggestion is approved: an
unknown id is refused (condition ``RecommendationApproved`` False), and ``backstop
reoptimize NAME --approve`` applies exactly the recommended plan.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import ANN_APPROVE, GROUP, VERSION
from backstop.domain.recommend import PlanParams, recommend_topology
from backstop.k8s.reoptjob import job_name, publish_result
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
from planners.placement import Node

pytestmark = pytest.mark.cluster
PLURAL = "streamtopologies"
SA = "reopt-job"
IMAGE = "backstop/spark:test"
NAME = "appr"


@pytest.fixture(scope="module")
def env(cluster: str, kube: client.ApiClient, simulator: Simulator, tmp_path_factory: Any
        ) -> Iterator[dict[str, Any]]:  # fmt: skip
    install_crds(kube)
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    ns = f"rj-{uuid.uuid4().hex[:6]}"
    create_namespace(core, ns)
    # the chart's Job ServiceAccount: it may create ConfigMaps, nothing else
    core.create_namespaced_service_account(ns, {"metadata": {"name": SA}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": SA}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]})  # fmt: skip
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]})  # fmt: skip
    pool = f"rj{uuid.uuid4().hex[:4]}"
    nodes = labelled_nodes(core, simulator, pool, 4, "4", wait=False)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
    # `backstop operator` on the chart's rights for mode: job (its Role for Jobs)
    proc = start_operator(cluster, ns, log, extra_env={
        "BACKSTOP_REOPT_TICK": "1", "BACKSTOP_REOPTIMIZE_MODE": "job",
        "BACKSTOP_SPARK_IMAGE": IMAGE, "BACKSTOP_SPARK_SERVICE_ACCOUNT": SA,
        "BACKSTOP_OPERATOR_NAMESPACE": ns, "BACKSTOP_SPARK_RESOURCES": json.dumps(resources),
        "BACKSTOP_METRICS_HOST_PATH": "/srv/backstop"})  # fmt: skip
    custom = client.CustomObjectsApi(kube)
    try:
        yield {"ns": ns, "pool": pool, "core": core, "custom": custom, "cluster": cluster,
               "batch": client.BatchV1Api(kube), "kube": kube}  # fmt: skip
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
        wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)[
            "items"], 60, "the topology to be deleted")  # fmt: skip
        stop_operator(proc)
        print(log.read_text()[-3000:])
        core.delete_namespace(ns)
        for n in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(n)


def _as_job_account(kube: client.ApiClient, ns: str) -> client.ApiClient:
    """An API client that acts as the Job's ServiceAccount (impersonation by the admin)."""
    api = client.ApiClient(kube.configuration)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:{SA}")
    return api


def _simulate_job(env: dict[str, Any], job: str) -> dict[str, Any]:
    """Do what the Job's container does, from the inputs the operator gave it."""
    ns, core = env["ns"], env["core"]
    data = core.read_namespaced_config_map(f"{job}-input", ns).data
    manifest = json.loads(data["topology.json"])
    nodes = [Node(n["name"], n["cpu"], n.get("domain"))
             for n in json.loads(data["nodes.json"])[NAME]]  # fmt: skip
    current = json.loads(data["current.json"]).get(NAME)
    # the "measured" latencies are half the spec's, as the metrics generator's truth
    est = [{"operator": o["name"], "reprocessing_latency": o["reprocessingLatency"] / 2,
            "cpu_quantile": 0.05, "failure_rate": 1e-4, "mtbf_seconds": 1e4,
            "checkpoint_duration": 0.1, "checkpoint_interval": 4.0, "young_interval": 44.7,
            "tuples_in_rate": 10.0, "tuples_out_rate": 10.0, "observed_seconds": 3600.0}
           for o in manifest["spec"]["operators"]]  # fmt: skip
    rec = recommend_topology(manifest, est, nodes, current, PlanParams(time_limit=0.5))
    assert rec["result"] == "Recommended", rec
    as_job = _as_job_account(env["kube"], ns)
    with pytest.raises(ApiException) as denied:  # least privilege: it cannot even read
        client.CoreV1Api(as_job).read_namespaced_config_map(f"{job}-input", ns)
    assert denied.value.status == 403
    uid = env["batch"].read_namespaced_job(job, ns).metadata.uid
    publish_result(as_job, f"{job}-result", ns, rec, uid)
    pod = wait_for(lambda: core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items,
                   30, "the Job's pod")[0]  # fmt: skip
    wait_for(lambda: core.read_namespaced_pod(pod.metadata.name, ns).status.phase == "Running",
             30, "the simulator to run the Job's pod")  # fmt: skip
    done = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            "name": "reoptimize", "ready": False, "restartCount": 0, "image": IMAGE,
            "imageID": ""}  # fmt: skip
    core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {
        "phase": "Succeeded", "containerStatuses": [done]}})  # fmt: skip
    return rec


def test_job_mode_runs_a_job_and_an_approval_applies_the_suggestion(
    env: dict[str, Any],
) -> None:
    ns, custom, batch = env["ns"], env["custom"], env["batch"]
    doc = topology_manifest(ROOT / "examples" / "twitter-sentiment.yaml", NAME)
    doc["spec"]["nodeSelector"] = {POOL_LABEL: env["pool"]}
    doc["spec"]["reoptimization"] = {"apply": "suggest", "metricsPath": "/var/lib/backstop/m"}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, doc)
    job = job_name(ns, NAME)
    created = wait_for(lambda: batch.read_namespaced_job(job, ns), 60, "the re-optimization Job")
    pod = created.spec.template.spec
    c = pod.containers[0]
    assert c.image == IMAGE and pod.service_account_name == SA
    assert c.command == ["python", "-m", "backstop.jobs.reoptimize"]
    assert c.args[c.args.index("--metrics") + 1] == "/var/lib/backstop/m"
    assert "spark.driver.memory=896m" in c.args  # 2Gi - (256 + 320 + 2 x 288) MiB
    assert c.resources.limits == {"memory": "2Gi"}
    assert [v.host_path.path for v in pod.volumes if v.host_path] == ["/srv/backstop"]
    running = wait_for(lambda: (custom.get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, NAME).get("status") or {}).get("reoptimization", {}).get(
        "job"), 30, "status.reoptimization.job")  # fmt: skip
    assert running == f"{ns}/{job}"

    rec = _simulate_job(env, job)

    def suggested() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
        state = (obj.get("status") or {}).get("reoptimization") or {}
        return obj if state.get("result") and not state.get("running") else {}

    obj = wait_for(suggested, 60, "the operator to read the Job's result")
    state = obj["status"]["reoptimization"]
    assert state["result"] == "Suggested", state
    stored = state["recommendation"]
    assert stored["assignment"] == rec["plan"]["assignment"] and stored["id"]
    plan_before = obj["status"]["plan"]
    # cleaned up: the Job and both ConfigMaps
    wait_for(lambda: not batch.list_namespaced_job(ns).items, 30, "the Job to be deleted")

    def leftovers() -> list[str]:
        items = env["core"].list_namespaced_config_map(ns).items
        return [c.metadata.name for c in items if c.metadata.name.startswith(job)]

    wait_for(lambda: not leftovers(), 30, "the Job's ConfigMaps to be deleted")

    # an approval of another recommendation is refused, and says why
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME,
        {"metadata": {"annotations": {ANN_APPROVE: "not-this-one"}}})  # fmt: skip

    def refused() -> dict[str, Any]:
        o = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
        c = condition(o, "RecommendationApproved")
        return c if c and c["status"] == "False" else {}

    cond = wait_for(refused, 30, "the refusal's condition")
    assert cond["reason"] == "UnknownRecommendation" and stored["id"] in cond["message"]
    now = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
    assert now["status"]["plan"]["assignment"] == plan_before["assignment"]

    # the CLI approves the stored one, watching until the operator applied it
    cli = subprocess.run(
        [sys.executable, "-m", "backstop", "reoptimize", NAME, "-n", ns, "--approve",
         "--timeout", "60"],
        capture_output=True, text=True, env={**os.environ, "KUBECONFIG": env["cluster"]},
        check=False, timeout=90,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert f"approved recommendation {stored['id']}" in cli.stderr and "applied" in cli.stderr
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
    plan = obj["status"]["plan"]
    assert plan["assignment"] == rec["plan"]["assignment"]
    assert plan["backups"] == rec["plan"]["backups"]
    assert plan["backupCount"] < plan_before["backupCount"]
    approval = obj["status"]["reoptimization"]["approval"]
    assert approval["result"] == "Applied" and approval["id"] == stored["id"]
    applied = condition(obj, "RecommendationApproved")
    assert applied is not None and applied["status"] == "True"
