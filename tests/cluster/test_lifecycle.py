"""Suspend, resume and rollouts against the real control plane with simulated nodes.

What is checked comes from the pods themselves (their node, image, phase and backup flag
``BACKSTOP_UPSTREAM_BACKUP``), evaluated with the failure-effect evaluator, not from what
the operator writes in its status:

* suspend → resume puts every task back on the node it ran on (a node deleted while
  suspended: only its tasks move), and neither opens a recovery session or writes a
  RecoveryPlan;
* a new image is rolled out in steps: every state the pod watch observes keeps, for every
  single-node failure, ``H(K_p ∪ down) ≤ R`` (the old code deleted every pod at once).
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest
from kubernetes import watch

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import expand, parse_spec
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    Env,
    Pool,
    condition,
    env_fixture,
    plans,
    pool_fixture,
    wait_for,
)
from planners import TaskGraph
from planners.evaluate import node_failure_latency

pytestmark = pytest.mark.cluster
LABEL = f"{GROUP}/topology"


env = env_fixture("lifecycle", node_cpu="1", nodes=1)
pool = pool_fixture(cleanup=True)


def chains(
    name: str, pool: str, *, cpu: str = "500m", src: float = 0.5, image: str = "chains:1"
) -> dict[str, Any]:
    """Three forward chains src → mid (1 s) → sink (1 s) of ``cpu`` tasks, every task
    backed up, bound 2 s: a whole chain on one node recovers in ``src`` + 2 s > 2 s, so
    the plan spreads each chain over several nodes."""
    stages = [("src", src), ("mid", 1.0), ("sink", 1.0)]
    operators = [
        {
            "name": stage,
            "parallelism": 3,
            "reprocessingLatency": latency,
            "resources": {"cpu": cpu, "memory": "32Mi"},
            **({"inputs": [{"operator": stages[k - 1][0], "grouping": "forward"}]} if k else {}),
        }
        for k, (stage, latency) in enumerate(stages)
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": f"registry.example/{image}",
            "recoveryLatencyBound": 2.0,
            "backups": "all",
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1},
            "lifecycle": {"checkpointTimeoutSeconds": 5},
            "operators": operators,
        },
    }


def _task(pod: Any) -> str:
    return str((pod.metadata.labels or {}).get(f"{GROUP}/task", ""))


def running_nodes(env: Env, name: str) -> dict[str, str]:
    """``{task: node}`` of the Running pods (not being deleted)."""
    return {
        _task(p): p.spec.node_name
        for p in env.pods(name)
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    }


def patch_spec(env: Env, name: str, spec: dict[str, Any]) -> None:
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name, {"spec": spec}
    )


def wait_running(env: Env, name: str, tasks: int) -> dict[str, str]:
    obj = env.wait_condition(name, "Ready", "True", timeout=60)
    assert obj

    def all_running() -> dict[str, str]:
        nodes = running_nodes(env, name)
        return nodes if len(nodes) == tasks else {}

    return wait_for(all_running, 30, "pods Running")


def test_suspend_and_resume_return_every_task_to_its_node(env: Env, pool: Pool) -> None:
    for _ in range(4):
        pool.add("2")
    pool.wait_ready()
    name = "suspend"
    env.create(chains(name, pool.name))
    before = wait_running(env, name, 9)
    assert len(set(before.values())) == 3

    patch_spec(env, name, {"suspend": True})
    wait_for(lambda: env.no_pods(name), 30, "every pod gone")
    obj = env.wait_condition(name, "Suspended", "True", timeout=30, reason="CheckpointMissing")
    assert obj["status"]["plan"]["assignment"] == before  # plan and placement kept
    assert (condition(obj, "Ready") or {}).get("reason") == "Suspended"
    # simulated nodes run no runtime: no task could report its final checkpoint, and the
    # status says which (a real node's runtime answers the SIGTERM with one)
    assert sorted(obj["status"]["suspend"]["missing"]) == sorted(before)

    patch_spec(env, name, {"suspend": False})
    after = wait_running(env, name, 9)
    assert after == before, "every task back on the node it ran on"

    # a node lost while suspended: only its tasks move, and no recovery starts
    patch_spec(env, name, {"suspend": True})
    wait_for(lambda: env.no_pods(name), 30, "every pod gone")
    env.wait_condition(name, "Suspended", "True", timeout=30, reason="CheckpointMissing")
    lost = before["mid-0"]
    env.core.delete_node(lost)
    time.sleep(2)  # supervision rounds see the node gone while suspended
    assert env.no_pods(name), "nothing comes back while suspended"
    patch_spec(env, name, {"suspend": False})
    again = wait_running(env, name, 9)
    for task, node in before.items():
        if node != lost:
            assert again[task] == node, f"{task} should be back on {node}"
        else:
            assert again[task] != lost

    def resumed() -> dict[str, Any]:
        o = env.get(name)
        return o if "suspend" not in o["status"] else {}

    obj = wait_for(resumed, 10, "resumed")
    assert not (obj["status"].get("recovery") or {}).get("session"), "no recovery session"
    assert plans(env, name) == [], "no RecoveryPlan"
    assert _worst(expand(parse_spec(obj["spec"])), again, set(again), set()) <= 2.0


def _worst(graph: TaskGraph, nodes: dict[str, str], backups: set[str], down: set[str]) -> float:
    """``max_p H(K_p ∪ down)`` (and ``H(down)``) with the failure-effect evaluator."""
    worst = node_failure_latency(graph, sorted(backups), down)
    for node in set(nodes.values()):
        on = {t for t, n in nodes.items() if n == node}
        worst = max(worst, node_failure_latency(graph, sorted(backups), on | down))
    return worst


class PodWatch:
    """Every state of a topology's pods, as a watch delivers them, evaluated as it comes."""

    def __init__(self, env: Env, name: str, graph: TaskGraph) -> None:
        self.env, self.name, self.graph = env, name, graph
        self.pods: dict[str, Any] = {p.metadata.name: p for p in env.pods(name)}
        self.states: list[tuple[float, frozenset[str], dict[str, str]]] = []
        self.stop = threading.Event()
        self.rv = env.core.list_namespaced_pod(
            env.namespace, label_selector=f"{LABEL}={name}"
        ).metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        for ev in w.stream(
            self.env.core.list_namespaced_pod,
            self.env.namespace,
            label_selector=f"{LABEL}={self.name}",
            resource_version=self.rv,
            timeout_seconds=60,
        ):
            pod = ev["object"]
            if ev["type"] == "DELETED":
                self.pods.pop(pod.metadata.name, None)
            else:
                self.pods[pod.metadata.name] = pod
            self._evaluate()
            if self.stop.is_set():
                w.stop()
                return

    def _evaluate(self) -> None:
        up: dict[str, str] = {}
        backups: set[str] = set()
        for p in self.pods.values():
            env_vars = {e.name: e.value for e in p.spec.containers[0].env or []}
            if env_vars.get("BACKSTOP_UPSTREAM_BACKUP") == "true":
                backups.add(_task(p))
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None:
                up[_task(p)] = p.spec.node_name
        down = set(self.graph.tasks) - set(up)
        worst = _worst(self.graph, up, backups, down)
        images = {_task(p): p.spec.containers[0].image for p in self.pods.values()}
        self.states.append((worst, frozenset(down), images))


def test_a_new_image_rolls_out_in_steps_that_keep_the_bound(env: Env, pool: Pool) -> None:
    """One 1-CPU task per 1-CPU node, 1 s each: all nine pods at once (the old code) would
    take 3 s to recover; a replaced producer with its consumer's node failing takes 2 s.
    So a rollout keeping the bound replaces the chains' positions one after the other
    (hand-computed: three steps of three). Then a node is lost during a second rollout:
    the recovery takes its task (onto a spare node, new spec), the rollout waits for the
    session and replaces the rest; every task is renewed exactly once."""
    for _ in range(9):
        pool.add("1")
    pool.wait_ready()
    name = "rollout"
    env.create(chains(name, pool.name, cpu="1", src=1.0))
    before = wait_running(env, name, 9)
    graph = expand(parse_spec(env.get(name)["spec"]))
    seen = PodWatch(env, name, graph)
    started = time.monotonic()
    patch_spec(env, name, {"image": "registry.example/chains:2"})

    def rolled_out(tag: str = ":2") -> bool:
        pods = env.pods(name)
        return len(pods) == 9 and all(
            p.spec.containers[0].image.endswith(tag)
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
            for p in pods
        )

    wait_for(rolled_out, 60, "every pod on the new image")
    took = time.monotonic() - started
    time.sleep(1.5)
    seen.stop.set()
    assert seen.states, "the watch saw the rollout"
    worst = max(w for w, _, _ in seen.states)
    assert worst <= 2.0 + 1e-9, [(w, sorted(d)) for w, d, _ in seen.states if w > 2.0][:3]
    downs = [d for _, d, _ in seen.states]
    assert max(len(d) for d in downs) < 9, "not every pod at once"
    groups = [{f"{stage}-{i}" for i in range(3)} for stage in ("src", "mid", "sink")]
    assert all(any(d <= g for g in groups) for d in downs), "one chain position at a time"
    assert max(len(d) for d in downs) == 3, "steps as large as keep the bound"
    assert running_nodes(env, name) == before, "an image change moves no task"
    obj = env.wait_condition(name, "RollingOut", "False", timeout=15)
    assert plans(env, name) == []
    print(
        f"rollout of 9 pods took {took:.1f}s; worst observed {worst:g}s over "
        f"{len(seen.states)} states; {obj['status']['rollout']['message']}"
    )

    # a node lost during a rollout is the recovery's; the rollout goes on after it. The
    # node is lost as soon as step 1 (the sources) runs, so before the sinks' step: a
    # sink replaced by the rollout and then lost would rightly be renewed twice. The
    # spare comes after that (else the rollout's plan would use it), with 2 CPUs: a 1-CPU
    # task fits a 1-CPU node only above the 0.8 recovery cap, so until it is Ready the
    # recovery has nowhere to go: its plan comes with the spare (trigger NodeLost or, when
    # the spare is what makes a plan possible, NodeReady)
    patch_spec(env, name, {"image": "registry.example/chains:3"})
    wait_for(  # a pod terminating, or already renewed: simulated pods go in well under a poll
        lambda: any(
            p.metadata.deletion_timestamp or p.spec.containers[0].image.endswith(":3")
            for p in env.pods(name)
        ),
        20,
        "step 1",
    )
    lost = before["sink-1"]  # not in the first step (the sources)
    env.core.delete_node(lost)
    spare = pool.add("2")
    pool.wait_ready([spare])
    wait_for(partial(rolled_out, ":3"), 60, "every pod on the third image")
    obj = env.wait_condition(name, "RollingOut", "False", timeout=15)
    rec = obj["status"]["recovery"]
    assert rec["recovered"] == ["sink-1"] and not rec["active"]
    triggers = [p["spec"]["trigger"] for p in plans(env, name)]
    assert triggers and set(triggers) <= {"NodeLost", "NodeReady"}, triggers
    replaced = [t for h in obj["status"]["rollout"]["history"] for t in h["tasks"]]
    assert sorted(replaced + rec["recovered"]) == sorted(before), "each task renewed once"
    assert running_nodes(env, name)["sink-1"] == spare
