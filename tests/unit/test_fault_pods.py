"""Ended and unschedulable task pods, without a cluster."""

from __future__ import annotations

from typing import Any

from backstop.domain.incidents import NodeInfo
from backstop.domain.planning import diff_pods
from backstop.domain.podfaults import UNSCHEDULABLE_GRACE, lost_tasks
from backstop.k8s.manifests import Owner, build_pdb

HASH = "streams.backstop.dev/spec-hash"


def _pod(name: str, phase: str, node: str = "a", spec_hash: str = "h") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {HASH: spec_hash}},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def _desired(*names: str) -> dict[str, dict[str, Any]]:
    return {n: {"metadata": {"name": n, "annotations": {HASH: "h"}}} for n in names}


def test_fault04_failed_pod_is_removed_at_once_and_recreated() -> None:
    diff = diff_pods(
        _desired("t-a-0", "t-b-0"), [_pod("t-a-0", "Failed"), _pod("t-b-0", "Running")]
    )
    assert diff.force == ["t-a-0"], "nothing of an ended pod runs: removed without waiting"
    assert [m["metadata"]["name"] for m in diff.create] == ["t-a-0"]
    assert diff.unchanged == 1 and diff.waiting == 0


def _node(
    name: str, *, schedulable: bool = True, ready: bool = True, cordoned: bool = False
) -> NodeInfo:
    return NodeInfo(
        name, ready=ready, since=0.0, cpu=4.0, schedulable=schedulable, cordoned=cordoned
    )


def _body(task: str, node: str | None, status: dict[str, Any]) -> dict[str, Any]:
    labels = {"streams.backstop.dev/task": task, "streams.backstop.dev/role": "primary"}
    return {"metadata": {"labels": labels}, "spec": {"nodeName": node}, "status": status}


def _unschedulable(since: str) -> dict[str, Any]:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available: 1 Insufficient cpu.",
        "lastTransitionTime": since,
    }
    return {"phase": "Pending", "conditions": [cond]}


def test_fault04_unschedulable_pod_is_lost_after_the_grace_not_recovered() -> None:
    nodes = {"a": _node("a"), "b": _node("b")}
    assignment = {"x-0": "a", "y-0": "b"}
    pods = [
        _body("x-0", None, _unschedulable("1970-01-01T00:01:40Z")),  # since t=100
        _body("y-0", "b", {"phase": "Running"}),
    ]
    assert lost_tasks(pods, assignment, nodes, now=100 + UNSCHEDULABLE_GRACE - 1) == {}
    lost = lost_tasks(pods, assignment, nodes, now=100 + UNSCHEDULABLE_GRACE + 1)
    assert list(lost) == ["x-0"] and "Insufficient cpu" in lost["x-0"]


def test_fault04_evicted_for_node_pressure_is_lost_elsewhere_not_in_place() -> None:
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    pods = [_body("x-0", "a", evicted), _body("y-0", "b", evicted)]
    nodes = {"a": _node("a", schedulable=False), "b": _node("b")}
    assert lost_tasks(pods, {"x-0": "a", "y-0": "b"}, nodes, now=0) == {
        "x-0": "Evicted on a, which takes no pods now: low on memory"
    }


def test_fault04_node_loss_and_drain_are_not_pod_losses() -> None:
    stuck = _unschedulable("1970-01-01T00:00:00Z")
    pods = [_body("x-0", None, stuck), _body("y-0", None, stuck)]
    nodes = {"a": _node("a", ready=False, schedulable=False), "b": _node("b", cordoned=True)}
    assert lost_tasks(pods, {"x-0": "a", "y-0": "b"}, nodes, now=1000) == {}


def test_fault04_pdb_keeps_every_task_pod_of_its_topology() -> None:
    pdb = build_pdb(Owner("wc", "ns", "uid-1"), 7)
    assert pdb["kind"] == "PodDisruptionBudget"
    assert pdb["spec"]["minAvailable"] == 7
    assert pdb["spec"]["selector"] == {"matchLabels": {"streams.backstop.dev/topology": "wc"}}
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def _spec(image: str, op: str) -> dict[str, Any]:
    return {
        "image": image,
        "recoveryLatencyBound": 5,
        "operators": [{"name": op, "reprocessingLatency": 0.5}],
    }


def test_fault01_parsed_spec_lives_in_the_objects_memo_and_only_for_its_generation() -> None:
    """Kopf keys ``memo`` by the object's uid: a re-created topology (generation 1 again)
    gets a fresh memo, so the deleted object's spec can never be served to it."""
    from backstop.controller import memo as topology_memo
    from backstop.controller.daemon import _model

    old, new = topology_memo.TopologyMemo(), topology_memo.TopologyMemo()
    parsed_old = _model(old, 1, _spec("old:1", "a"))
    parsed_new = _model(new, 1, _spec("new:2", "b"))
    assert parsed_old is not None and parsed_new is not None
    assert parsed_new[0].image == "new:2" and list(parsed_new[1].tasks) == ["b-0"]
    again = _model(new, 2, _spec("new:3", "c"))
    assert again is not None and again[0].image == "new:3"
    assert list(new.parsed) == [2], "older generations are evicted"
