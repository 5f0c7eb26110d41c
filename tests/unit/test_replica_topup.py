"""Replicas the reconcile could not place at first are added once CPU frees.

The replicated real-node word count was created a moment after the previous topology was
deleted, while its pods still held CPU on two of the three nodes: the reconcile found room
for 5 replicas of 7, and ``count-1`` and ``sink-0`` stayed without one for good (the plan's
replicas were chosen once, on the CPU free at that moment). When the node of the primaries
died they were restarted, not promoted. The supervisor's
:func:`backstop.controller.replicas.replica_tick` adds them as soon as the CPU is free,
within ``spec.replication.spareCpu``, their pods held in the capacity ledger before the
plan is written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from backstop.controller.replicas import replica_tick
from backstop.controller.tick import Tick, planned_pods
from backstop.domain.constants import ANN_NODE
from backstop.domain.incidents import NodeInfo
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.manifests import Owner

OP = {"resources": {"cpu": "200m", "memory": "128Mi"}, "reprocessingLatency": 0.5}
OPERATORS = [
    {"name": "source", "parallelism": 2, **OP},
    {"name": "tokenize", "parallelism": 2, "inputs": [{"operator": "source"}], **OP},
    {"name": "count", "parallelism": 2,
     "inputs": [{"operator": "tokenize", "grouping": "key"}], **OP},
    {"name": "sink", "parallelism": 1,
     "inputs": [{"operator": "count", "grouping": "global"}], **OP},
]  # fmt: skip
FIVE = {
    "source-0": ["c"],
    "source-1": ["b"],
    "tokenize-0": ["c"],
    "tokenize-1": ["b"],
    "count-0": ["c"],
}


class FakeKube:
    """Status merge patches applied and returned, as the API server does."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status, self.rv = status, 1

    def patch_status_returning(
        self, ns: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        def merge(old: dict[str, Any], p: Mapping[str, Any]) -> dict[str, Any]:
            out = dict(old)
            for k, v in p.items():
                if v is None:
                    out.pop(k, None)
                elif isinstance(v, dict) and isinstance(old.get(k), dict):
                    out[k] = merge(old[k], v)
                else:
                    out[k] = v
            return out

        self.status, self.rv = merge(self.status, patch), self.rv + 1
        return {"status": copy.deepcopy(self.status), "metadata": {"resourceVersion": str(self.rv)}}


def running(manifest: dict[str, Any]) -> dict[str, Any]:
    where = manifest["metadata"]["annotations"][ANN_NODE]
    return {**manifest, "spec": {**manifest["spec"], "nodeName": where},
            "status": {"phase": "Running"}}  # fmt: skip


def other_pod(name: str, where: str, cpu: str) -> dict[str, Any]:
    """A pod of another workload (a deleted topology's, still terminating) on ``where``."""
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
    return {"metadata": {"namespace": "other", "name": name},
            "spec": {"nodeName": where, "containers": [container]},
            "status": {"phase": "Running"}}  # fmt: skip


def five_of_seven(spare_cpu: str, others: list[dict[str, Any]]) -> Tick:
    """Every primary on ``a`` (2 CPU nodes), replicas of :data:`FIVE`, all pods running."""
    spec = {"image": "i", "recoveryLatencyBound": 38.0, "operators": OPERATORS,
            "replication": {"spareCpu": spare_cpu}}  # fmt: skip
    model = parse_spec(spec)
    graph = expand(model)
    plan = PlanStatus(generation=1, assignment=dict.fromkeys(graph.tasks, "a"),
                      backups=list(graph.tasks), replicas=FIVE, bound=38.0)  # fmt: skip
    info = {n: NodeInfo(n, True, 0.0, 2.0, True, False, memory=8 * 2.0**30, pods=110)
            for n in "abc"}  # fmt: skip
    t = Tick(
        kube=FakeKube(TopologyStatus(plan=plan).dump()),  # type: ignore[arg-type]
        owner=Owner("wc", "ns", "uid"),
        model=model,
        graph=graph,
        generation=1,
        status=TopologyStatus(plan=plan),
        nodes=info,
        emit=lambda *_: None,
        ledger=CapacityLedger(),
        resource_version="1",
    )
    t.ledger.replace_pods([running(p) for p in planned_pods(t, plan).values()] + others)
    t.memory.matched = True  # the pods match the plan
    return t


def test_the_tasks_left_without_a_replica_get_one_once_cpu_frees() -> None:
    others = [other_pod("x-b", "b", "1600m"), other_pod("x-c", "c", "1400m")]  # b, c full
    t = five_of_seven("4", others)
    assert not replica_tick(t)  # b and c are full: nothing to add yet
    assert replica_tick(t) is False and t.status.plan_or_empty.replicas == FIVE
    for pod in others:
        t.ledger.forget(("other", pod["metadata"]["name"]))
    assert replica_tick(t)
    plan = t.status.plan_or_empty
    replicas = plan.replicas or {}
    assert set(replicas) == set(t.graph.tasks)
    assert {task: replicas[task] for task in FIVE} == FIVE  # the running ones stay put
    assert all(ns[0] in ("b", "c") for ns in replicas.values())
    assert plan.replicated == sorted(replicas)
    held = t.ledger.holds("ns/wc")  # the new pods' room is held until they show up
    assert sorted(key[1] for key in held) == ["wc--count-1--r0", "wc--sink-0--r0"]
    assert not replica_tick(t)  # nothing left to add


def test_the_added_replicas_stay_within_the_spare_cpu_the_spec_gives() -> None:
    """``spareCpu: 1200m`` and 1 CPU of replicas already: room for one more of 200m, the
    sink's (of equal importance, the nearest the output)."""
    t = five_of_seven("1200m", [])
    assert replica_tick(t)
    replicas = t.status.plan_or_empty.replicas or {}
    assert set(replicas) - set(FIVE) == {"sink-0"}
