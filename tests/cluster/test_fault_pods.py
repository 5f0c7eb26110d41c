"""Faults around the task pods, against the real control plane and simulated nodes.

* a topology deleted and re-created under the same name runs the new spec;
* a Failed or evicted task pod is replaced, and ``kubectl drain`` of a node with
  tasks completes once the operator has moved them, the bound kept at every step.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import expand, parse_spec
from backstop_runtime.fencing import published_epoch
from backstop_testkit.sim.nodesim import PRESSURE_TAINT
from backstop_testkit.support.kubetools import ROOT, Env, cleanup_fixture, env_fixture, wait_for
from planners.evaluate import worst_node_failure

pytestmark = pytest.mark.cluster


env = env_fixture("faultpods", node_cpu="4", nodes=3)
_cleanup = cleanup_fixture()


def chain(name: str, image: str, operators: list[tuple[str, int]]) -> dict[str, Any]:
    """A chain of operators ``[(name, parallelism), ...]``, 100m each, every task a backup."""
    ops: list[dict[str, Any]] = []
    for i, (op, par) in enumerate(operators):
        ops.append(
            {
                "name": op,
                "parallelism": par,
                "resources": {"cpu": "100m", "memory": "32Mi"},
                "reprocessingLatency": 0.5,
                **({"inputs": [{"operator": operators[i - 1][0]}]} if i else {}),
            }
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "recoveryLatencyBound": 10,
            "operators": ops,
            # a hostPath store: kubectl drain refuses pods with emptyDir data without
            # --delete-emptydir-data (the default store is an emptyDir)
            "store": {"hostPath": {"path": "/srv/backstop", "type": "DirectoryOrCreate"}},
        },
    }


def live_pods(env: Env, name: str) -> list[Any]:
    return [p for p in env.pods(name) if p.metadata.deletion_timestamp is None]


def runs_exactly(env: Env, name: str, tasks: set[str], image: str) -> bool:
    """Every task of ``tasks`` has one Running pod of ``image``, and no other pod exists."""
    pods = env.pods(name)
    return (
        sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods) == sorted(tasks)
        and all(p.metadata.deletion_timestamp is None for p in pods)
        and all(p.status.phase == "Running" for p in pods)
        and all(p.spec.containers[0].image == image for p in pods)
    )


def test_fault01_recreated_topology_runs_the_new_spec(env: Env) -> None:
    name = "again"
    old = chain(name, "registry.example/old:1", [("src", 2), ("work", 3), ("out", 1)])
    env.create(old)
    env.wait_condition(name, "Ready", "True")
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name
    )

    def gone() -> bool:
        try:
            env.get(name)
        except ApiException as err:
            return bool(err.status == 404)
        return False

    wait_for(gone, 60, f"{name} deleted (the finalizer released)")
    new = chain(name, "registry.example/new:2", [("read", 3), ("score", 2), ("sink", 2)])
    env.create(new)
    tasks = set(expand(parse_spec(new["spec"])).tasks)
    uid = env.get(name)["metadata"]["uid"]
    wait_for(
        lambda: runs_exactly(env, name, tasks, "registry.example/new:2"),
        90,
        "the new spec's pods, and only those, Running",
    )
    obj = env.wait_condition(name, "Ready", "True")
    assert set(obj["status"]["plan"]["assignment"]) == tasks
    time.sleep(4)  # a few supervision rounds: nothing of the old spec comes back
    assert runs_exactly(env, name, tasks, "registry.example/new:2")
    assert all(p.metadata.owner_references[0].uid == uid for p in env.pods(name))
    assert "unknown task" not in env.log.read_text()


def pod_of(env: Env, name: str, task: str) -> Any:
    return env.core.read_namespaced_pod(f"{name}--{task}", env.namespace)


def test_fault04_evicted_pod_is_recreated_or_replaced_when_its_node_is_the_cause(
    env: Env,
) -> None:
    name = "evict"
    doc = chain(name, "registry.example/fan:1", [("src", 2), ("work", 2), ("out", 1)])
    for op in doc["spec"]["operators"]:
        op["resources"]["cpu"] = "1"  # 5 x 1 CPU on 3 x 4 CPU nodes: room elsewhere
    env.create(doc)
    env.wait_condition(name, "Ready", "True")
    assert env.simulator is not None
    assignment = dict(env.get(name)["status"]["plan"]["assignment"])
    # 1. evicted on a healthy node (its own fault): recreated there
    old = pod_of(env, name, "work-0")
    env.simulator.evict(env.namespace, old.metadata.name, "ephemeral storage over its limit")

    def recreated() -> bool:
        pod = pod_of(env, name, "work-0")
        return bool(
            pod.metadata.uid != old.metadata.uid
            and pod.status.phase == "Running"
            and pod.spec.node_name == assignment["work-0"]
        )

    wait_for(recreated, 30, "work-0 recreated on its planned node")
    # 2. evicted by a node under memory pressure: lost, re-placed on another node
    sick = assignment["out-0"]
    env.simulator.pressure(sick)
    try:
        victim = pod_of(env, name, "out-0")
        env.simulator.evict(env.namespace, victim.metadata.name, "The node was low on memory.")

        def moved() -> bool:
            pod = pod_of(env, name, "out-0")
            plan = env.get(name)["status"]["plan"]["assignment"]
            return bool(
                pod.metadata.uid != victim.metadata.uid
                and pod.status.phase == "Running"
                and pod.spec.node_name not in (sick, None)
                and plan["out-0"] == pod.spec.node_name
            )

        wait_for(moved, 45, "out-0 running on another node")
        env.wait_condition(name, "Ready", "True")
        lost = [
            e
            for e in env.core.list_namespaced_event(env.namespace).items
            if e.involved_object.name == name and e.reason == "TaskLost"
        ]
        assert lost and "out-0" in lost[0].message and sick in lost[0].message
    finally:
        taints = env.core.read_node(sick).spec.taints or []
        serialize = env.core.api_client.sanitize_for_serialization
        kept = [serialize(t) for t in taints if t.key != PRESSURE_TAINT]
        env.core.patch_node(sick, {"spec": {"taints": kept}})
        cond = {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"}
        env.core.patch_node_status(sick, {"status": {"conditions": [cond]}})


def test_fault04_kubectl_drain_completes_after_the_operator_moved_every_task(env: Env) -> None:
    name = "drainme"
    doc = chain(name, "registry.example/fan:1", [("src", 2), ("work", 3), ("out", 2)])
    doc["spec"]["recoveryLatencyBound"] = 1.5
    env.create(doc)
    obj = env.wait_condition(name, "Ready", "True")
    graph = expand(parse_spec(obj["spec"]))
    assignment = dict(obj["status"]["plan"]["assignment"])
    victim = max(set(assignment.values()), key=list(assignment.values()).count)
    on_victim = {t for t, n in assignment.items() if n == victim}
    seen: list[tuple[dict[str, str], list[str]]] = []
    stop = threading.Event()

    def sample() -> None:  # every plan the operator records while the drain runs
        while not stop.is_set():
            plan = env.get(name)["status"]["plan"]
            if not seen or seen[-1][0] != plan["assignment"]:
                seen.append((dict(plan["assignment"]), list(plan["backups"])))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    kubectl = str(ROOT / ".tools" / "bin" / "kubectl")
    t0 = time.monotonic()
    try:
        drain = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                env.kubeconfig,
                "drain",
                victim,
                "--ignore-daemonsets",
                "--timeout=240s",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert drain.returncode == 0, drain.stdout + drain.stderr
        print(
            f"kubectl drain {victim}: {len(on_victim)} tasks moved in {time.monotonic() - t0:.1f}s"
        )

        def everything_moved() -> bool:
            pods = env.pods(name)
            return (
                sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods) == sorted(graph.tasks)
                and all(p.status.phase == "Running" for p in pods)
                and all(p.metadata.deletion_timestamp is None for p in pods)
                and all(p.spec.node_name != victim for p in pods)
            )

        wait_for(everything_moved, 60, f"every task of {name} running off {victim}")
    finally:
        stop.set()
        sampler.join(timeout=5)
        env.core.patch_node(victim, {"spec": {"unschedulable": False}})
    final = env.get(name)["status"]["plan"]["assignment"]
    assert victim not in final.values()
    assert {t for t in assignment if final[t] != assignment[t]} == on_victim
    assert len(seen) >= 2, "the drain went through recorded steps"
    for step, backups in seen:
        worst, _node = worst_node_failure(graph, backups, step)
        assert worst <= 1.5 + 1e-9, (step, worst)


def test_fault03_tasks_recreated_off_a_lost_node_carry_a_newer_epoch(env: Env) -> None:
    """Runs last in this module: it kills one of the module's nodes (revived at the end)."""
    name = "fence"
    doc = chain(name, "registry.example/fan:1", [("src", 2), ("work", 2), ("out", 1)])
    doc["spec"]["recovery"] = {"gracePeriodSeconds": 1}
    env.create(doc)
    obj = env.wait_condition(name, "Ready", "True")
    assert env.simulator is not None
    assignment = dict(obj["status"]["plan"]["assignment"])
    victim = max(set(assignment.values()), key=list(assignment.values()).count)
    lost = {t for t, n in assignment.items() if n == victim}
    env.simulator.kill(victim)
    try:

        def recovered() -> bool:
            status = env.get(name).get("status") or {}
            rec = status.get("recovery") or {}
            pods = live_pods(env, name)
            return bool(
                rec.get("session")
                and not rec.get("active")
                and len(pods) == len(assignment)
                and all(p.status.phase == "Running" and p.spec.node_name != victim for p in pods)
            )

        wait_for(recovered, 120, f"the tasks of {victim} recovered elsewhere")
        obj = env.get(name)
        assert obj["status"]["plan"]["epochs"] == {t: 1 for t in sorted(lost)}
        for pod in live_pods(env, name):
            task = pod.metadata.labels[f"{GROUP}/task"]
            epoch = {e.name: e.value for e in pod.spec.containers[0].env}.get("BACKSTOP_EPOCH")
            assert epoch == ("1" if task in lost else None), task
            assert pod.metadata.annotations[f"{GROUP}/epoch"] == ("1" if task in lost else "0")
        cm = env.core.read_namespaced_config_map(f"{name}-recovery", env.namespace)
        doc = json.loads(cm.data["session.json"])
        assert {t: published_epoch(doc, t) for t in sorted(lost)} == {t: 1 for t in sorted(lost)}
    finally:
        env.simulator.revive(victim)
