"""Promotion of an active replica, operator side: the plan, the pods, the push.

When a node is lost, a task on it that has a replica on a usable node is not restarted:
its replica's pod becomes the primary in place. These tests hold the operator to that
without a cluster: :func:`backstop.domain.recovery.decide` (the plan written before any pod
is touched), :func:`backstop.k8s.manifests.desired_pods` (the promoted pod's spec-hash is
the one it was created with, so converging restarts nothing), the label patch, and the
peer push that tells the runtime.
"""

from __future__ import annotations

import json
from typing import Any

from backstop.domain.constants import ANN_EPOCH, ANN_HASH, LABEL_ROLE
from backstop.domain.incidents import NodeInfo
from backstop.domain.peers import PeerState, peer_map, targets
from backstop.domain.promotion import relabels, replica_numbers
from backstop.domain.recovery import decide
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.k8s import peerpush
from backstop.k8s.manifests import Owner, desired_pods, replica_name
from planners.evaluate import worst_node_failure

SPEC = parse_spec(
    {
        "image": "x",
        "recoveryLatencyBound": 10,
        "recovery": {"gracePeriodSeconds": 5, "utilizationCap": 1.0},
        "replication": {"spareCpu": "2"},
        "operators": [
            {"name": "src", "parallelism": 1, "reprocessingLatency": 0.5},
            {"name": "work", "parallelism": 2, "reprocessingLatency": 0.5,
             "inputs": [{"operator": "src"}]},
            {"name": "out", "parallelism": 1, "reprocessingLatency": 0.5,
             "inputs": [{"operator": "work"}]},
        ],
    }
)  # fmt: skip
GRAPH = expand(SPEC)
OWNER = Owner("topo", "ns", "uid-1")
ASSIGNMENT = {"src-0": "n2", "work-0": "n1", "work-1": "n1", "out-0": "n2"}
REPLICAS = {"work-0": ["n3"]}


def node(name: str, *, ready: bool = True, since: float = 0.0, cpu: float = 4.0) -> NodeInfo:
    return NodeInfo(name, ready, since, cpu, schedulable=ready, cordoned=False)


def status() -> TopologyStatus:
    plan = PlanStatus(
        generation=1, assignment=dict(ASSIGNMENT), backups=["src-0"], replicas=REPLICAS
    )
    return TopologyStatus(plan=plan)


def lose_n1(free: float = 4.0) -> Any:
    nodes = {n: node(n) for n in ("n2", "n3", "n4")} | {"n1": node("n1", ready=False)}
    d = decide(status(), SPEC, GRAPH, nodes, 100.0, lambda usable: dict.fromkeys(usable, free),
               generation=1)  # fmt: skip
    assert d is not None and d.status.plan is not None and d.status.recovery is not None
    return d


def test_a_replicated_task_on_a_lost_node_is_promoted_not_restarted() -> None:
    d = lose_n1()
    plan, rec = d.status.plan, d.status.recovery
    assert plan.assignment is not None
    assert plan.assignment["work-0"] == "n3"  # where its replica ran
    assert plan.promoted == {"work-0": 0} and plan.epochs == {"work-0": 1}
    # the other task of n1 has no replica: it is the session's to recover
    assert d.issued is not None and set(d.issued.recover) == {"work-1"}
    assert "work-0" not in rec.recovered and "work-0" not in rec.failed
    [promoted] = [n.message for n in d.notices if n.reason == "ReplicaPromoted"]
    assert promoted == "task work-0: its replica on n3 is its primary now"
    # the session ended: a new replica for work-0, never beside its primary
    assert plan.replicas is not None and plan.replicas["work-0"] != ["n3"]
    assert plan.replicas["work-0"][0] in {"n2", "n4"}
    worst = worst_node_failure(GRAPH, plan.backups, plan.assignment)[0]
    assert plan.worst_recovery_latency == round(worst, 6)


def test_no_replica_is_promoted_onto_a_node_that_is_lost_too() -> None:
    nodes = {"n2": node("n2"), "n4": node("n4")}
    nodes |= {"n1": node("n1", ready=False), "n3": node("n3", ready=False)}
    d = decide(status(), SPEC, GRAPH, nodes, 100.0, lambda u: dict.fromkeys(u, 4.0),
               generation=1)  # fmt: skip
    assert d is not None and d.status.plan is not None
    assert d.status.plan.promoted == {}
    assert d.issued is not None and {"work-0", "work-1"} <= set(d.issued.recover)


def test_the_promoted_pod_keeps_its_manifest_and_changes_only_its_labels() -> None:
    before = desired_pods(OWNER, SPEC, GRAPH, frozenset({"src-0"}), ASSIGNMENT, REPLICAS)
    plan = lose_n1().status.plan
    after = desired_pods(OWNER, SPEC, GRAPH, frozenset(plan.backups), plan.assignment or {},
                         plan.replicas, plan.epochs, promoted=plan.promoted)  # fmt: skip
    r0 = replica_name("topo", "work-0", 0)
    was, now = before[r0]["metadata"], after[r0]["metadata"]
    assert was["annotations"][ANN_HASH] == now["annotations"][ANN_HASH]  # not restarted
    assert (was["labels"][LABEL_ROLE], now["labels"][LABEL_ROLE]) == ("replica", "primary")
    assert now["annotations"][ANN_EPOCH] == "1"
    env = {e["name"]: e.get("value") for e in after[r0]["spec"]["containers"][0]["env"]}
    assert env["BACKSTOP_ROLE"] == "replica"  # the runtime is told by the push
    assert "topo--work-0" not in after  # the old primary's pod is not wanted any more
    new = replica_name("topo", "work-0", 1)  # the new replica: another number
    assert new in after and after[new]["metadata"]["labels"][LABEL_ROLE] == "replica"
    # the label patch converging to it: only the promoted pod, once
    live = [json.loads(json.dumps(before[r0]))]
    [(name, patch)] = relabels(after, live)
    assert name == r0 and patch["labels"] == {LABEL_ROLE: "primary"}
    live[0]["metadata"]["labels"].update(patch["labels"])
    live[0]["metadata"]["annotations"].update(patch["annotations"])
    assert relabels(after, live) == []


def test_replicas_keep_their_numbers_when_another_is_promoted() -> None:
    assert replica_numbers(None, 3) == [0, 1, 2]
    assert replica_numbers(1, 2) == [0, 2]  # r1 promoted: r0 and r2 stay themselves


def _running(manifest: dict[str, Any], ip: str) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads(json.dumps(manifest))
    pod["status"] = {"phase": "Running", "podIP": ip,
                     "containerStatuses": [{"name": "task", "restartCount": 0}]}  # fmt: skip
    return pod


def test_the_push_promotes_the_pod_and_consumers_read_it_as_the_primary() -> None:
    plan = lose_n1().status.plan
    after = desired_pods(OWNER, SPEC, GRAPH, frozenset(plan.backups), plan.assignment or {},
                         plan.replicas, plan.epochs, promoted=plan.promoted)  # fmt: skip
    r0 = replica_name("topo", "work-0", 0)
    pods = [_running(m, f"10.0.0.{i}") for i, m in enumerate(after.values(), 1)]
    where = peer_map(pods)
    assert where["work-0"] == f"10.0.0.{list(after).index(r0) + 1}:7077"
    assert "work-0#r0" not in where and "work-0#r1" in where
    [target] = [t for t in targets(pods) if t.pod == r0]
    assert target.promote == 1
    assert all(t.promote is None for t in targets(pods) if t.pod != r0)
    state = PeerState()
    state.advance(where, 1000)
    inputs = {"src": frozenset(), "work": frozenset({"src"}), "out": frozenset({"work"})}
    due = dict((t.pod, (t, part)) for t, part in state.due(targets(pods), inputs))
    t, part = due[r0]
    body = json.loads(peerpush.body(state.version, part, t.promote))
    assert (body["role"], body["epoch"]) == ("primary", 1)
    state.delivered(t, part)
    assert r0 not in dict((t.pod, p) for t, p in state.due(targets(pods), inputs))


def test_a_node_whose_every_task_is_promoted_ends_the_session_at_once() -> None:
    """Every task of the lost node has a replica: nothing is left to recover, and the node,
    which holds none of the session's tasks any more, is no unknown lost node to it."""
    replicas = {"work-0": ["n3"], "work-1": ["n4"]}
    plan = PlanStatus(
        generation=1, assignment=dict(ASSIGNMENT), backups=["src-0"], replicas=replicas
    )
    nodes = {n: node(n) for n in ("n2", "n3", "n4")} | {"n1": node("n1", ready=False)}
    d = decide(TopologyStatus(plan=plan), SPEC, GRAPH, nodes, 100.0,
               lambda usable: dict.fromkeys(usable, 4.0), generation=1)  # fmt: skip
    assert d is not None and d.status.plan is not None and d.status.recovery is not None
    assert d.status.recovery.message is not None
    assert "failed" not in d.status.recovery.message, d.status.recovery.message
    assert d.status.plan.promoted == {"work-0": 0, "work-1": 0}
    assert d.issued is None and d.status.recovery.failed == [] and not d.status.recovery.active
    assert {n.reason for n in d.notices} >= {"ReplicaPromoted", "Recovered"}
    assert d.status.plan.replicas == {"work-0": ["n4"], "work-1": ["n3"]}


def test_a_promoted_task_gets_its_new_replica_when_capacity_comes_back() -> None:
    """No node has room for a new replica when the session ends; the lost node's return
    (a tick with nothing pending) brings one."""
    nodes = {n: node(n) for n in ("n2", "n3", "n4")} | {"n1": node("n1", ready=False)}
    d = decide(status(), SPEC, GRAPH, nodes, 100.0, lambda u: dict.fromkeys(u, 0.0),
               generation=1)  # fmt: skip
    assert d is not None and d.status.plan is not None
    assert d.status.plan.promoted == {"work-0": 0} and not d.status.plan.replicas
    nodes["n1"] = node("n1")
    back = decide(d.status, SPEC, GRAPH, nodes, 200.0, lambda u: {**dict.fromkeys(u, 0.0),
                  "n1": 4.0}, generation=1)  # fmt: skip
    assert back is not None and back.trigger == "NodeBack" and back.status.plan is not None
    assert back.status.plan.replicas == {"work-0": ["n1"]}
