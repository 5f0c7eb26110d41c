"""A replica promoted in place when its primary's node dies, with the word count on REAL nodes.

The shared environment (``wordcount_env.py``: three real nodes, SeaweedFS outside them, the
operator as a host process) runs the word count with ``spec.replication`` (room for a replica
of every task). The node with the most primaries of replicated tasks is killed mid-stream.
The operator must promote each of their replicas in place (``status.plan.promoted``), and the
runtime must take the task over in the replica's pod: the same pod (uid) with no container
restart, now labelled primary, and the task's store epoch claimed anew (the old primary is
fenced). The sink's output must be the reference run's, line for line.

The module runs after the others of the package (by its name): a node killed and revived
can flap NotReady once more while its kubelet's Lease catches up, which a test right after
it that counts on no node loss at all (the 3 s network cut) would see.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, VERSION
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import node_ready, wait_for
from backstop_testkit.support.runtime_data import output_objects
from tests.realnodes.wordcount_env import KILL_RATE, POOL, Env, Placement, exact_output

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

NAME = "wc-promo"


def plan(env: Env) -> dict[str, Any]:
    obj = env.custom.get_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", NAME
    )
    return dict((obj.get("status") or {}).get("plan") or {})


def replicas_running(env: Env) -> list[Any] | None:
    """Every task pod and replica pod Running, the sink under way; else ``None``."""
    env.alive()
    want = plan(env).get("replicas") or {}
    pods = env.pods(NAME)
    running = [p for p in pods if p.status.phase == "Running" and p.status.pod_ip]
    enough = len(running) == 7 + sum(len(ns) for ns in want.values()) and bool(want)
    started = env.status(NAME, "sink-0").get("round", 0) >= 40
    written = bool(output_objects(env.output(NAME), env.s3))
    return running if enough and started and written else None


def victim_of(pods: list[Any], replicated: set[str]) -> tuple[str, dict[str, Any]]:
    """The node with the most primaries of replicated tasks, and ``{task: replica pod}``
    of those tasks."""
    role = f"{GROUP}/role"
    primaries: dict[str, list[str]] = {}
    for p in pods:
        task = p.metadata.labels[f"{GROUP}/task"]
        if p.metadata.labels.get(role) == "primary" and task in replicated:
            primaries.setdefault(p.spec.node_name, []).append(task)
    node = max(primaries, key=lambda n: (len(primaries[n]), n))
    mine = set(primaries[node])
    replica = {
        p.metadata.labels[f"{GROUP}/task"]: p
        for p in pods
        if p.metadata.labels.get(role) == "replica" and p.metadata.labels[f"{GROUP}/task"] in mine
    }
    return node, replica


def restarts(pod: Any) -> int:
    return sum(c.restart_count for c in pod.status.container_statuses or [])


def nodes(verb: str, node: str, env: Env) -> None:
    result = CliRunner().invoke(app, ["nodes", verb, node, "--kubeconfig", env.cluster])
    assert result.exit_code == 0, result.output


def test_a_replica_takes_its_task_over_in_place_when_the_primarys_node_dies(
    reference: list[str], env: Env
) -> None:
    try:
        env.create(NAME, KILL_RATE, placement=Placement({POOL: env.nodes[0]}, cpu="200m"),
                   replication="4")  # fmt: skip
        pods = wait_for(lambda: replicas_running(env), 240, "every task and replica running")
        assert pods is not None
        victim, replicas = victim_of(pods, set(plan(env).get("replicas") or {}))
        assert replicas, "no replica of a task on the victim"
        epochs = {t: int(env.status(NAME, t).get("epoch", 0)) for t in replicas}
        nodes("kill", victim, env)
        killed = time.monotonic()
        try:
            promoted = wait_for(
                lambda: set(plan(env).get("promoted") or {}) >= set(replicas) or None,
                60,
                f"{sorted(replicas)} promoted",
                0.2,
            )
            assert promoted
            promoted_after = time.monotonic() - killed
            env.wait_end(NAME, 300)
        finally:
            nodes("revive", victim, env)
        now = {p.metadata.name: p for p in env.pods(NAME)}
        claimed = {t: int(env.status(NAME, t).get("epoch", 0)) for t in replicas}
        last = plan(env)
        n = exact_output(env, NAME, reference)
    finally:
        env.delete(NAME)
    wait_for(lambda: node_ready(env.core, victim), 120, f"{victim} Ready again")
    print(f"\n{victim} killed: {sorted(replicas)} promoted {promoted_after:.2f}s after; {n} lines")
    for task, pod in replicas.items():
        same = now.get(pod.metadata.name)
        assert same is not None and same.metadata.uid == pod.metadata.uid, f"{task}: new pod"
        assert restarts(same) == restarts(pod), f"{task}: the replica's container restarted"
        assert same.metadata.labels[f"{GROUP}/role"] == "primary", same.metadata.labels
        assert same.spec.node_name == last["assignment"][task] != victim
        assert claimed[task] > epochs[task], f"{task}: no new store epoch {epochs} {claimed}"
        assert victim not in (last.get("replicas") or {}).get(task, []), last.get("replicas")
