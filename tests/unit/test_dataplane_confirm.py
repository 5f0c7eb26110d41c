"""The operator's confirmation of a node loss suspected on the data plane (pure logic)."""

from __future__ import annotations

from backstop.domain.dataplane import (
    Suspicion,
    TaskPod,
    confirm,
    parse_suspects,
    suspected_nodes,
    with_confirmed,
)

PODS = {
    t: TaskPod(t, f"topo--{t}", node, f"10.0.0.{i}:9090")
    for i, (t, node) in enumerate(
        [("src-0", "n1"), ("count-0", "n1"), ("count-1", "n2"), ("sink-0", "n3")], start=1
    )
}
ON_N1 = [PODS["src-0"], PODS["count-0"]]


def _s(reporter: str, task: str, reason: str = "silent for 1.1s") -> Suspicion:
    return Suspicion(reporter, task, 100.0, reason)


def test_agreeing_peers_are_grouped_under_the_suspected_node() -> None:
    found = suspected_nodes(
        [_s("count-1", "src-0"), _s("sink-0", "count-0"), _s("sink-0", "count-1")],
        PODS,
        ready={"n1", "n2", "n3"},
    )
    assert {n: sorted((s.reporter, s.task) for s in ss) for n, ss in found.items()} == {
        "n1": [("count-1", "src-0"), ("sink-0", "count-0")],
        "n2": [("sink-0", "count-1")],
    }


def test_a_suspected_reporter_that_answered_is_alive() -> None:
    """count-1 is suspected but reported itself: its answer shows its node is up."""
    v = confirm("n2", [_s("sink-0", "count-1")], [PODS["count-1"]], {"topo--count-1": True}, 2)
    assert not v.lost and "false suspicion" in v.message


def test_a_node_whose_suspected_pods_all_fail_the_probe_is_lost() -> None:
    suspicions = [_s("count-1", "src-0"), _s("sink-0", "count-0", "connection broken: reset")]
    v = confirm("n1", suspicions, ON_N1, {"topo--src-0": False, "topo--count-0": False}, 2)
    assert v.lost and v.node == "n1"
    for part in ("src-0", "count-0", "count-1", "sink-0", "connection broken", "2 requests"):
        assert part in v.message, (part, v.message)


def test_a_node_with_one_pod_answering_is_not_lost() -> None:
    """Only some of the node's pods are silent: the node is up (a false suspicion)."""
    v = confirm(
        "n1", [_s("count-1", "src-0")], ON_N1, {"topo--src-0": False, "topo--count-0": True}, 2
    )
    assert not v.lost and "false suspicion" in v.message and "count-0" in v.message


def test_a_suspected_pod_that_answers_clears_the_node() -> None:
    v = confirm("n1", [_s("count-1", "src-0")], ON_N1[:1], {"topo--src-0": True}, 2)
    assert not v.lost


def test_a_node_not_fully_probed_is_not_judged() -> None:
    v = confirm("n1", [_s("count-1", "src-0")], ON_N1, {"topo--src-0": False}, 2)
    assert not v.lost and "topo--count-0" in v.message


def test_no_suspicion_means_no_loss() -> None:
    assert not confirm("n1", [], ON_N1, {"topo--src-0": False, "topo--count-0": False}, 2).lost


def test_a_not_ready_node_or_a_task_without_pod_is_left_to_the_node_monitor() -> None:
    suspicions = [_s("sink-0", "src-0"), _s("sink-0", "gone-0")]
    assert suspected_nodes(suspicions, PODS, ready={"n2", "n3"}) == {}
    assert list(suspected_nodes(suspicions, PODS, ready={"n1", "n3"})) == ["n1"]


def test_malformed_answers_are_dropped() -> None:
    doc = [
        {"task": "src-0", "since": "100.5", "reason": "silent for 1.0s"},
        {"task": "src-1", "since": "soon"},
        {"since": 1.0},
        None,
    ]
    assert parse_suspects("sink-0", doc) == [Suspicion("sink-0", "src-0", 100.5, "silent for 1.0s")]
    assert parse_suspects("sink-0", {"task": "src-0"}) == []


def test_a_confirmed_node_is_lost_at_once_with_the_data_plane_trigger() -> None:
    """The recovery session starts on the confirmation, not after NotReady + grace; the
    node-monitor's path is unchanged for the other nodes."""
    from tests.unit.test_recovery_decide import FOUR, GRAPH, node, recorded, tick

    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 4.0)}
    seen = with_confirmed(nodes, {"n0": 99.5}, now=100.0)
    assert seen["n1"] is nodes["n1"]
    d = tick(recorded(GRAPH, FOUR), seen, 100.0)
    rec = d.status.recovery
    assert rec is not None and d.trigger == "DataPlane" and set(rec.lost) == {"n0"}
    assert d.issued is not None and d.issued.trigger == "DataPlane"
    assert set(d.issued.recover) == {t for t, n in FOUR.items() if n == "n0"}
    lost = [n.message for n in d.notices if n.reason == "NodeLost"]
    assert lost and "confirmed on the data plane" in lost[0]
    # without the confirmation the same Ready node is nobody's loss
    assert with_confirmed(nodes, {"n0": 99.5}, now=99.5 + 400)["n0"].ready


def test_a_confirmed_node_that_comes_back_is_usable_at_once() -> None:
    """A node lost on the data plane, seen NotReady by the node-monitor, then Ready again
    (a replacement of the same name, or the node rebooted) ends the hold: the recovery
    waiting for capacity places its pending tasks there (``NodeBack``), not minutes later."""
    from tests.unit.test_recovery_decide import FOUR, GRAPH, node, recorded, tick

    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    d = tick(recorded(GRAPH, FOUR), with_confirmed(nodes, {"n0": 99.5, "n1": 99.5}, 100.0), 100.0)
    rec = d.status.recovery
    assert rec is not None and set(rec.lost) == {"n0", "n1"} and rec.failed  # no room for all
    nodes["n0"] = node("n0", ready=False, since=120.0)  # the node-monitor catches up
    d = tick(d.status, with_confirmed(nodes, {"n0": 99.5, "n1": 99.5}, 125.0), 125.0)
    nodes["n0"] = node("n0", since=140.0)  # and the node is back
    d = tick(d.status, with_confirmed(nodes, {"n0": 99.5, "n1": 99.5}, 141.0), 141.0)
    rec = d.status.recovery
    assert d.trigger == "NodeBack" and rec is not None and "n0" not in rec.lost
    assert d.issued is not None and set(d.issued.recover.values()) & {"n0"}
