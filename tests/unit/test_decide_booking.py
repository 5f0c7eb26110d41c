"""The supervisor takes the capacity booking only when a recovery decision needs it.

Why: every topology's daemon decides about once a second; if each decision took the
ledger's urgent booking, in a fleet of 100 the reconciles (which let urgent bookings go
first) would wait behind 100 bookings a second. A round with nothing lost takes none; a
node loss still plans and reserves inside one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from backstop.controller import supervisor
from backstop.controller.tick import Tick, planned_pods
from backstop.domain.constants import ANN_NODE
from backstop.domain.incidents import NodeInfo
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.manifests import Owner

SPEC = {
    "image": "i",
    "recoveryLatencyBound": 3.0,
    "recovery": {"gracePeriodSeconds": 1, "mode": "incremental"},
    "operators": [
        {"name": "a", "parallelism": 2, "resources": {"cpu": "500m"}, "reprocessingLatency": 0.5},
        {"name": "b", "parallelism": 2, "resources": {"cpu": "500m"}, "reprocessingLatency": 0.5,
         "inputs": [{"operator": "a", "grouping": "forward"}]},
    ],
}  # fmt: skip


class CountingLedger(CapacityLedger):
    def __init__(self) -> None:
        super().__init__()
        self.bookings = 0
        self.replace_pods([])

    @contextmanager
    def booking(self, timeout: float = 30.0, *, urgent: bool = False) -> Iterator[Any]:
        self.bookings += 1
        with super().booking(timeout, urgent=urgent) as b:
            yield b


def tick(nodes: dict[str, NodeInfo], ledger: CountingLedger) -> Tick:
    model = parse_spec(SPEC)
    graph = expand(model)
    assignment = {"a-0": "n1", "a-1": "n1", "b-0": "n2", "b-1": "n2"}
    plan = PlanStatus(generation=1, assignment=assignment, backups=["a-0", "a-1"], bound=3.0)
    return Tick(
        kube=None,  # type: ignore[arg-type]
        owner=Owner("t", "ns", "uid"),
        model=model,
        graph=graph,
        generation=1,
        status=TopologyStatus(plan=plan),
        nodes=nodes,
        emit=lambda *_: None,
        ledger=ledger,
    )


def node(name: str, ready: bool, since: float = 0.0) -> NodeInfo:
    return NodeInfo(name, ready, since, 4.0, ready, False, memory=8 * 2.0**30, pods=110)


def test_a_round_with_nothing_lost_takes_no_booking() -> None:
    ledger = CountingLedger()
    nodes = {n: node(n, True) for n in ("n1", "n2", "n3")}
    assert supervisor._decide(tick(nodes, ledger), now=100.0) is None
    assert ledger.bookings == 0


def test_a_node_loss_is_planned_and_reserved_in_the_booking() -> None:
    ledger = CountingLedger()
    nodes = {"n1": node("n1", False, since=90.0), "n2": node("n2", True), "n3": node("n3", True)}
    decision = supervisor._decide(tick(nodes, ledger), now=100.0)
    assert decision is not None and decision.issued is not None
    assert sorted(decision.issued.recover) == ["a-0", "a-1"]
    assert ledger.bookings == 1
    held = ledger.holds("ns/t")  # the recovered pods' room is held until they show up
    assert {node for node, _ in held.values()} <= {"n2", "n3"} and len(held) == 2


class HoldCountingLedger(CountingLedger):
    def __init__(self) -> None:
        super().__init__()
        self.held_calls = 0

    def hold(self, owner: str, pods: Any) -> None:
        self.held_calls += 1
        super().hold(owner, pods)


def test_a_plan_whose_pods_all_run_is_held_once_not_every_round() -> None:
    """Every round held its plan's pods in the ledger (under its data lock), also when
    they all ran: 100 topologies' daemons, 5,000 pods a second, in the fleet bench."""
    ledger = HoldCountingLedger()
    nodes = {n: node(n, True) for n in ("n1", "n2", "n3")}
    t = tick(nodes, ledger)
    assert t.status.plan is not None
    desired = planned_pods(t, t.status.plan)
    running: list[Mapping[str, Any]] = [
        {**p, "spec": {**p["spec"], "nodeName": p["metadata"]["annotations"][ANN_NODE]},
         "status": {"phase": "Running"}}
        for p in desired.values()
    ]  # fmt: skip
    assert supervisor.converge(t, running, force_nodes=set()) == (0, 0, 0)
    assert ledger.held_calls == 1
    assert len(ledger.holds("ns/t")) == 4  # the feed has not seen the pods: they are held
    for _ in range(3):
        assert supervisor.converge(t, running, force_nodes=set()) == (0, 0, 0)
    assert ledger.held_calls == 1
    assert len(ledger.holds("ns/t")) == 4  # still held until the feed sees each pod
