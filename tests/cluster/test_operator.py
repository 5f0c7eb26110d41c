"""The operator against the real control plane, scheduler and simulated nodes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from backstop.controller.settings import ENV_VARS
from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_testkit.support.kubetools import (
    EXAMPLE,
    POOL_LABEL,
    ROOT,
    Env,
    condition,
    env_fixture,
    topology_manifest,
    wait_for,
)
from planners.evaluate import check_plan, worst_node_failure

pytestmark = pytest.mark.cluster
OPERATOR_GRACE = 12.5  # the operator-wide default (Helm value recovery.gracePeriodSeconds)


env = env_fixture(
    "operator",
    node_cpu="4",
    nodes=6,
    operator_env={ENV_VARS["grace_period_seconds"]: str(OPERATOR_GRACE)},
)


@pytest.fixture(autouse=True)
def _cleanup(env: Env) -> Iterator[None]:
    yield
    env.cleanup()


def _env_of(pod: Any) -> dict[str, str]:
    return {v.name: v.value or "" for v in pod.spec.containers[0].env}


def _verify_against_evaluator(env: Env, obj: dict[str, Any]) -> None:
    """The status, the pods and the failure-effect evaluator agree."""
    spec = parse_spec(obj["spec"])
    graph = expand(spec)
    plan = obj["status"]["plan"]
    assignment, backups = plan["assignment"], plan["backups"]
    capacity = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"]) for n in env.core.list_node().items
    }
    assert (
        check_plan(
            graph,
            bound=spec.recovery_latency_bound,
            backups=backups,
            assignment=assignment,
            capacity=capacity,
        )
        == []
    )
    worst = worst_node_failure(graph, backups, assignment)[0]
    assert plan["worstRecoveryLatency"] == pytest.approx(worst)
    assert plan["tasks"] == len(graph) and plan["backupCount"] == len(backups)
    pods = [p for p in env.pods(obj["metadata"]["name"]) if p.metadata.deletion_timestamp is None]
    assert sorted(p.metadata.name for p in pods) == sorted(
        f"{obj['metadata']['name']}--{t}" for t in graph.tasks
    )
    for pod in pods:
        task = pod.metadata.labels[f"{GROUP}/task"]
        assert pod.spec.node_name == assignment[task], "the scheduler follows the affinity"
        assert pod.status.phase == "Running"
        term = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        expr = term.node_selector_terms[0].match_fields[0]
        assert (expr.key, expr.operator, expr.values) == ("metadata.name", "In", [assignment[task]])
        e = _env_of(pod)
        assert e["BACKSTOP_TASK_ID"] == task
        assert e["BACKSTOP_UPSTREAM_BACKUP"] == ("true" if task in backups else "false")
        upstream = [graph.tasks[u] for u in graph.preds[graph.index(task)]]
        assert e["BACKSTOP_UPSTREAM_TASKS"] == ",".join(upstream)
        assert pod.metadata.owner_references[0].uid == obj["metadata"]["uid"]


def test_apply_places_pods_on_planned_nodes_and_reports_ready(env: Env) -> None:
    doc = topology_manifest(EXAMPLE, "senti")
    doc["spec"]["recovery"] = {"mode": "incremental"}  # the grace period left to the operator
    env.create(doc)
    obj = env.wait_condition("senti", "Ready", "True")
    # field by field: the API server stores no default for the unset field, so the
    # operator-wide one applies although the topology sets spec.recovery
    stored = obj["spec"]["recovery"]
    assert stored["mode"] == "incremental" and stored["restartSeconds"] == 0  # CRD defaults
    assert "gracePeriodSeconds" not in stored and "utilizationCap" not in stored
    assert obj["status"]["plan"]["gracePeriodSeconds"] == OPERATOR_GRACE
    assert obj["status"]["plan"]["utilizationCap"] == 0.8  # neither sets it: the model's
    assert condition(obj, "BoundSatisfied")["status"] == "True"  # type: ignore[index]
    assert condition(obj, "Placed")["status"] == "True"  # type: ignore[index]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    _verify_against_evaluator(env, obj)
    reasons = {
        e.reason
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.involved_object.name == "senti"
    }
    assert "Planned" in reasons


def test_spec_change_moves_only_pods_whose_node_or_role_changes(env: Env) -> None:
    name = "resize"
    env.create(topology_manifest(EXAMPLE, name))
    before_obj = env.wait_condition(name, "Ready", "True")
    before = {p.metadata.name: p for p in env.pods(name)}
    # a looser bound needs fewer backups: some pods change role, the others must stay
    patch = {"spec": {"recoveryLatencyBound": 4 * before_obj["spec"]["recoveryLatencyBound"]}}
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name, patch
    )
    after_obj = env.wait_condition(name, "Ready", "True", timeout=90)
    assert after_obj["status"]["plan"]["generation"] == 2
    _verify_against_evaluator(env, after_obj)
    after = {p.metadata.name: p for p in env.pods(name)}
    assert after.keys() == before.keys()
    assert any(_env_of(before[p]) != _env_of(after[p]) for p in before), "no role changed"
    recreated_without_reason = []
    for pod_name, old in before.items():
        new = after[pod_name]
        same_place = old.spec.node_name == new.spec.node_name
        same_role = _env_of(old) == _env_of(new)
        if new.metadata.uid != old.metadata.uid and same_place and same_role:
            recreated_without_reason.append(pod_name)
        if new.metadata.uid == old.metadata.uid:
            assert same_place and same_role
    assert recreated_without_reason == []


@pytest.mark.parametrize(
    ("mutate", "reason", "needle"),
    [
        (
            lambda s: s["operators"][1]["inputs"].append({"operator": "merge"}),
            "InvalidSpec",
            "cycle",
        ),
        (lambda s: s["operators"][1]["inputs"].append({"operator": "nope"}), "InvalidSpec", "nope"),
        # no spec.image and no operator default (BACKSTOP_TASK_IMAGE; the chart sets it)
        (lambda s: s.pop("image"), "InvalidSpec", "spec.image"),
        (  # 0.2 s left to the planners after detection and restart (a bound below is invalid)
            lambda s: s.update(
                recoveryLatencyBound=s["recovery"].get("detectionSeconds", 0.0)
                + s["recovery"]["restartSeconds"]
                + 0.2
            ),
            "Infeasible",
            "infeasible",
        ),
        (
            lambda s: s.update(
                podTemplate={
                    "spec": {
                        "containers": [
                            {"name": "task", "env": [{"name": "BACKSTOP_TASK_ID", "value": "x"}]}
                        ]
                    }
                }
            ),
            "InvalidSpec",
            "podtemplate",
        ),
        (  # a PodSpec field only the API server checks: its dry run, not pods retried forever
            lambda s: s.update(
                podTemplate={
                    "spec": {"containers": [{"name": "task"}], "securityContext": {"runAsUser": -1}}
                }
            ),
            "InvalidSpec",
            "runasuser",
        ),
    ],
    ids=[
        "cycle",
        "unknown-input",
        "no-image",
        "infeasible-bound",
        "pod-template-owned-env",
        "pod-template-api-server",
    ],
)
def test_invalid_manifest_gets_a_condition_an_event_and_no_pods(
    env: Env, mutate: Any, reason: str, needle: str
) -> None:
    name = f"bad-{reason.lower()}-{needle.replace(' ', '').replace('.', '-')}"[:40]
    doc = topology_manifest(EXAMPLE, name)
    mutate(doc["spec"])
    env.create(doc)
    # the supervisor may report "not planned yet" (Pending) first; wait for the verdict
    obj = env.wait_condition(name, "Planned", "False", reason=reason)
    planned = condition(obj, "Planned")
    assert planned is not None and planned["reason"] == reason
    assert needle in planned["message"].lower()
    if needle == "podtemplate":  # the field and why, as the model says it
        assert "env BACKSTOP_TASK_ID is the operator's" in planned["message"]
    if needle == "runasuser":  # the template, then the API server's own words
        assert planned["message"].startswith("spec.podTemplate: the API server refuses")
        assert "spec.securityContext.runAsUser" in planned["message"]
    assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
    time.sleep(2)
    assert env.pods(name) == []
    warnings = [
        e
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.involved_object.name == name and e.type == "Warning" and e.reason == reason
    ]
    assert warnings, "a Warning Event names the problem"


def test_a_rewiring_edit_of_a_running_topology_is_refused_and_its_pods_stay(env: Env) -> None:
    """More tasks would ask their producers for rounds trimmed long ago and stop the topology
    (``backstop.domain.wiring``): the edit is ``InvalidSpec`` naming the field, and the pods
    go on with the plan they run."""
    name = "rewire"
    env.create(topology_manifest(EXAMPLE, name))
    good = env.wait_condition(name, "Ready", "True")
    before = {p.metadata.name: p.metadata.uid for p in env.pods(name)}
    ops = good["spec"]["operators"]
    sink = next(i for i, op in enumerate(ops) if op["name"] == "sink")
    ops[sink]["parallelism"] = 2
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name, {"spec": {"operators": ops}}
    )
    obj = env.wait_condition(name, "Planned", "False", reason="InvalidSpec")
    message = condition(obj, "Planned")["message"]  # type: ignore[index]
    assert f"spec.operators[{sink}].parallelism: sink runs 1 task, not 2" in message, message
    assert message.endswith("still running generation 1's plan"), message
    assert obj["status"]["plan"]["generation"] == good["status"]["plan"]["generation"]
    time.sleep(3)
    assert {p.metadata.name: p.metadata.uid for p in env.pods(name)} == before


def test_operator_restart_changes_nothing(env: Env) -> None:
    name = "restart"
    env.create(topology_manifest(EXAMPLE, name))
    obj = env.wait_condition(name, "Ready", "True")
    uids = {p.metadata.name: p.metadata.uid for p in env.pods(name)}
    plan = obj["status"]["plan"]
    resumed = env.log.read_text().count("Resuming is processed")
    env.restart_operator()
    wait_for(
        lambda: env.log.read_text().count("Resuming is processed") > resumed,
        30,
        "the restarted operator to resume",
    )
    time.sleep(2)
    assert {p.metadata.name: p.metadata.uid for p in env.pods(name)} == uids
    assert env.get(name)["status"]["plan"] == plan


def test_deleting_the_topology_removes_its_pods(env: Env) -> None:
    name = "doomed"
    env.create(topology_manifest(EXAMPLE, name))
    env.wait_condition(name, "Placed", "True")
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name
    )
    wait_for(lambda: env.pods(name) == [], 60, "the garbage collector to remove the pods")


def test_plan_from_cluster_previews_on_the_live_nodes(env: Env) -> None:
    from typer.testing import CliRunner

    from backstop.cli import app

    doc = topology_manifest(EXAMPLE, "preview")
    doc["spec"]["nodeSelector"] = {POOL_LABEL: env.pool}
    path = env.log.parent / "preview.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(
        app,
        ["plan", str(path), "--from-cluster", "-n", env.namespace],
        env={"KUBECONFIG": env.kubeconfig, "COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    graph = expand(parse_spec(doc["spec"]))
    placed = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 4 and cells[0] in graph.tasks:
            placed[cells[0]] = cells[1]
    assert set(placed) == set(graph.tasks)
    assert set(placed.values()) <= set(env.nodes), "only the live nodes of the selected pool"


def test_selective_replication_runs_replicas_off_their_primarys_node(env: Env) -> None:
    doc = topology_manifest(EXAMPLE, "replicated")
    doc["spec"]["replication"] = {"spareCpu": "2", "strategy": "qod-lu"}
    env.create(doc)
    obj = env.wait_condition("replicated", "Ready", "True", timeout=90)
    plan = obj["status"]["plan"]
    replicas: dict[str, list[str]] = plan["replicas"]
    assert replicas, "a 2-CPU budget on 24 CPU of nodes buys some replicas"
    assert sorted(replicas) == plan["replicated"]
    assert 0 < plan["availability"] <= 1
    graph = expand(parse_spec(doc["spec"]))
    cpu = sum(graph.weight[graph.index(t)] * len(ns) for t, ns in replicas.items())
    assert cpu <= 2 + 1e-9, "the replicas stay within the spare-CPU budget"
    pods = {p.metadata.name: p for p in env.pods("replicated")}
    for task, nodes in replicas.items():
        primary = pods[f"replicated--{task}"]
        copies = [pods[f"replicated--{task}--r{k}"] for k in range(len(nodes))]
        where = [primary.spec.node_name] + [c.spec.node_name for c in copies]
        assert len(set(where)) == len(where), f"{task}: two copies on one node {where}"
        for c in copies:
            assert c.metadata.labels[f"{GROUP}/role"] == "replica"
            assert c.status.phase == "Running"
            assert _env_of(c)["BACKSTOP_ROLE"] == "replica"
    n_replicas = sum(len(ns) for ns in replicas.values())
    assert len(pods) == len(graph) + n_replicas


def test_kubectl_matches_the_api_server(cluster: str) -> None:
    """The kubectl tests, the demo and the e2e use (``make tools``: hack/get-kubectl.sh) is
    built from the API server's source tree: the same version, not 14 minors apart."""
    kubectl = ROOT / ".tools" / "bin" / "kubectl"
    assert kubectl.exists(), "kubectl is missing: run `make tools`"
    out = subprocess.run(
        [str(kubectl), "--kubeconfig", cluster, "version", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    versions = json.loads(out.stdout)
    client_version = versions["clientVersion"]["gitVersion"]
    assert client_version == versions["serverVersion"]["gitVersion"], versions
