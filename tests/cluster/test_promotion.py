"""Replica promotion on the chart's own rights: the primary's node dies, a replica takes over.

The operator runs as the chart's ServiceAccount with the chart's RBAC (``start_operator``'s
default): promotion patches the promoted pod's labels and annotations in place, so a verb
the chart does not grant shows here as a 403 and no promotion.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from backstop.domain.constants import ANN_EPOCH, GROUP, LABEL_ROLE, VERSION
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    Env,
    Pool,
    cleanup_fixture,
    env_fixture,
    pool_fixture,
    wait_for,
)

pytestmark = pytest.mark.cluster
NAME = "promo"

# the module's own node stays unused: the test makes a labelled pool of its own
env = env_fixture("promotion", node_cpu="1", nodes=1)
_cleanup = cleanup_fixture()
pool = pool_fixture(cleanup=False)


def replicated(pool: str) -> dict[str, Any]:
    """src (2 tasks) -> sink (2 tasks) of 500m each, and 1 CPU for active replicas."""
    op = {"resources": {"cpu": "500m", "memory": "64Mi"}, "reprocessingLatency": 0.5}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": NAME},
        "spec": {
            "image": "registry.example/promo:1",
            "recoveryLatencyBound": 10,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1.0},
            "replication": {"spareCpu": "1"},
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "sink", "parallelism": 2, "inputs": [{"operator": "src"}], **op},
            ],
        },
    }


def test_a_replica_is_promoted_in_place_on_the_charts_rights(env: Env, pool: Pool) -> None:
    for _ in range(4):
        pool.add("2")
    pool.wait_ready()
    env.create(replicated(pool.name))
    plan = env.wait_condition(NAME, "Ready", "True", timeout=90)["status"]["plan"]
    replicas: dict[str, list[str]] = plan["replicas"]
    assert replicas, "1 CPU of spare capacity buys replicas of 500m tasks"
    victim = plan["assignment"][sorted(replicas)[0]]
    lost = {t for t, n in plan["assignment"].items() if n == victim and t in replicas}
    uids = {p.metadata.name: p.metadata.uid for p in env.pods(NAME)}
    start = env.log.stat().st_size
    pool.sim.kill(victim)

    def promoted() -> dict[str, Any] | None:
        now = env.get(NAME)["status"]["plan"]
        return now if lost <= set(now.get("promoted") or {}) else None

    after = wait_for(promoted, 60, f"the replicas of {sorted(lost)} promoted")
    assert after is not None
    for task in lost:
        pod_name = f"{NAME}--{task}--r{after['promoted'][task]}"

        def relabelled(name: str = pod_name) -> Any:
            pod = env.core.read_namespaced_pod(name, env.namespace)
            return pod if pod.metadata.labels[LABEL_ROLE] == "primary" else None

        pod = wait_for(relabelled, 30, f"{pod_name} labelled primary")
        assert pod.metadata.uid == uids[pod_name], "promoted in place, not recreated"
        assert pod.spec.node_name == after["assignment"][task] != victim
        assert pod.metadata.annotations[ANN_EPOCH] == str(after["epochs"][task])
    text = env.log.read_bytes()[start:].decode(errors="replace")
    denied = [line for line in text.splitlines() if re.search(r"forbidden|\b403\b", line, re.I)]
    assert denied == [], "the operator hit RBAC denials:\n" + "\n".join(denied)
