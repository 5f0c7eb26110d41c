"""Steady supervision rounds and the order of a recovery step's writes.

Why: at 10k pods a round matched every pod to the plan and derived pod states and
conditions (about 0.4 CPU s) even when nothing had changed, and a node's loss waited
behind that round; the issued step's RecoveryPlan then waited for the metrics and the
Events of the decision. A round on the inputs of a settled round now only decides, and
the RecoveryPlan follows the status write directly.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping
from typing import Any

import pytest

from backstop.controller import handlers, supervisor
from backstop.controller.daemon import round_inputs
from backstop.controller.memo import PodChanges
from backstop.controller.tick import Tick, planned_pods
from backstop.domain.incidents import NodeInfo
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.domain.status import types as status_types
from backstop.domain.status import wire as statuswire
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
ASSIGNMENT = {"a-0": "n1", "a-1": "n1", "b-0": "n2", "b-1": "n2"}


class FakeKube:
    """The API of a round: status merge patches applied, other writes recorded in order."""

    def __init__(self, journal: list[str]) -> None:
        self.status: dict[str, Any] = {}
        self.rv = 1
        self.journal = journal

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
        self.journal.append("status")
        return {"status": copy.deepcopy(self.status), "metadata": {"resourceVersion": str(self.rv)}}

    def put_recoveryplan(self, manifest: dict[str, Any], phase: str) -> None:
        self.journal.append("recoveryplan")

    def put_configmap(self, manifest: dict[str, Any]) -> None:
        self.journal.append("configmap")

    def apply_pod_diff(self, namespace: str, diff: Any) -> tuple[int, int]:
        self.journal.append("pods")
        return len(diff.delete), len(diff.create)


def node(name: str, ready: bool, since: float = 0.0) -> NodeInfo:
    return NodeInfo(name, ready, since, 4.0, ready, False, memory=8 * 2.0**30, pods=110)


def make_tick(journal: list[str]) -> Tick:
    model = parse_spec(SPEC)
    plan = PlanStatus(generation=1, assignment=ASSIGNMENT, backups=["a-0", "a-1"], bound=3.0)
    plan = plan.model_copy(update={"bound_satisfied": True})
    kube = FakeKube(journal)
    kube.status = TopologyStatus(plan=plan).dump()
    ledger = CapacityLedger()
    ledger.replace_pods([])
    return Tick(
        kube=kube,  # type: ignore[arg-type]
        owner=Owner("t", "ns", "uid"),
        model=model,
        graph=expand(model),
        generation=1,
        status=TopologyStatus(plan=plan),
        nodes={n: node(n, True) for n in ("n1", "n2", "n3")},
        emit=lambda reason, message, warning: journal.append(f"event {reason}"),
        ledger=ledger,
        resource_version="1",
    )


def running_pods(t: Tick) -> list[Mapping[str, Any]]:
    """The plan's pods as the index holds them once bound and Running."""
    plan = t.status.plan
    assert plan is not None
    return [
        {**p, "spec": {"nodeName": ASSIGNMENT[p["metadata"]["labels"][TASK]]},
         "status": {"phase": "Running"}}
        for p in planned_pods(t, plan).values()
    ]  # fmt: skip


TASK = "streams.backstop.dev/task"


class Counted:
    """Counts calls of a supervisor function (the pod work a round does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.calls = 0
        real = getattr(supervisor, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(supervisor, name, counted)


def settle(t: Tick, pods: list[Mapping[str, Any]], events: int = 0) -> None:
    """Rounds as the daemon runs them (inputs read first) until one writes nothing."""
    for _ in range(5):
        before = t.resource_version
        t.inputs = round_inputs(events, len(pods), t.nodes, t.resource_version, 1)
        supervisor.supervise_once(t, lambda: list(pods))
        if t.resource_version == before:
            return
    raise AssertionError("the rounds never settled")


def test_a_round_on_unchanged_inputs_does_no_pod_work(monkeypatch: pytest.MonkeyPatch) -> None:
    journal: list[str] = []
    t = make_tick(journal)
    pods = running_pods(t)
    settle(t, pods)
    states, match = Counted(monkeypatch, "pod_states"), Counted(monkeypatch, "pods_match")
    journal.clear()
    t.inputs = round_inputs(0, len(pods), t.nodes, t.resource_version, 1)
    assert supervisor.supervise_once(t, lambda: list(pods)) == (0, 0)
    assert (states.calls, match.calls, journal) == (0, 0, [])


@pytest.mark.parametrize("change", ["pod event", "pod deleted", "node", "status", "no inputs"])
def test_a_round_on_changed_inputs_is_a_whole_one(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    t = make_tick([])
    pods = running_pods(t)
    settle(t, pods)
    states = Counted(monkeypatch, "pod_states")
    events, count, nodes, rv = 0, len(pods), dict(t.nodes), t.resource_version
    if change == "pod event":
        events = 1
    elif change == "pod deleted":  # no event reaches the index handler, the index shrinks
        count -= 1
    elif change == "node":
        nodes["n3"] = node("n3", True, since=5.0)
    elif change == "status":
        rv = "99"
    t.inputs = None if change == "no inputs" else round_inputs(events, count, nodes, rv, 1)
    supervisor.supervise_once(t, lambda: list(pods))
    assert states.calls == 1


def test_a_steady_round_is_whole_again_after_full_every(monkeypatch: pytest.MonkeyPatch) -> None:
    t = make_tick([])
    pods = running_pods(t)
    settle(t, pods)
    assert t.memory.steady is not None
    inputs, when = t.memory.steady
    t.memory.steady = (inputs, when - supervisor.FULL_EVERY)
    states = Counted(monkeypatch, "pod_states")
    t.inputs = inputs
    supervisor.supervise_once(t, lambda: list(pods))
    assert states.calls == 1


def test_a_round_with_a_pod_not_running_does_not_settle() -> None:
    t = make_tick([])
    pods = running_pods(t)
    pods[0] = {**pods[0], "status": {"phase": "Pending"}}
    settle(t, pods)
    assert t.memory.steady is None


def test_a_loss_is_decided_in_a_steady_round() -> None:
    """A steady round still asks the recovery decision (the clock is no input): shown
    with a NotReady node past its grace that the compared inputs do not carry."""
    journal: list[str] = []
    t = make_tick(journal)
    pods = running_pods(t)
    settle(t, pods)
    steady_inputs = t.inputs
    t.nodes = {**t.nodes, "n1": node("n1", False, since=1.0)}
    t.inputs = steady_inputs
    journal.clear()
    supervisor.supervise_once(t, lambda: list(pods))
    assert journal[:2] == ["status", "recoveryplan"]


def test_the_recoveryplan_is_written_before_metrics_and_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal: list[str] = []
    t = make_tick(journal)
    pods = running_pods(t)

    def observed(*args: Any, **kwargs: Any) -> None:
        journal.append("metrics")

    monkeypatch.setattr(t.metrics, "observe_decision", observed)
    t.nodes = {**t.nodes, "n1": node("n1", False, since=1.0)}
    assert supervisor.recovery_tick(t, pods, now=100.0)
    events = [j for j in journal if j.startswith("event")]
    assert events, journal  # the loss is announced
    assert journal[:4] == ["status", "recoveryplan", "configmap", "metrics"], journal
    assert journal.index("configmap") < journal.index(events[0])


def test_the_pod_index_counts_every_event_of_a_topology() -> None:
    """Counted at once and again after Kopf stores the pod (the loop's next turn)."""
    changes = PodChanges()
    body: Any = {"metadata": {"name": "p", "namespace": "ns"}}

    index: Any = handlers.pods_by_topology

    async def two_events() -> int:
        for _ in range(2):
            await index(
                namespace="ns",
                labels={"streams.backstop.dev/topology": "t"},
                body=body,
                memo={"pod_changes": changes},
            )
        seen = changes.count(("ns", "t"))
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(two_events()) == 2  # one each at once ...
    assert changes.count(("ns", "t")) == 4  # ... and one each on the loop's next turn
    assert changes.count(("ns", "other")) == 0


def test_a_step_after_steady_rounds_does_not_compact_the_old_status_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compact form of the status a steady round saw is the base of the step's patch
    (at 10k tasks compacting it was a quarter of the write)."""
    journal: list[str] = []
    t = make_tick(journal)
    pods = running_pods(t)
    settle(t, pods)
    calls: list[int] = []
    for module in (status_types, statuswire):
        real = module.compact_status

        def counted(doc: Mapping[str, Any], real: Any = real) -> dict[str, Any]:
            calls.append(1)
            result: dict[str, Any] = real(doc)
            return result

        monkeypatch.setattr(module, "compact_status", counted)
    t.nodes = {**t.nodes, "n1": node("n1", False, since=1.0)}
    journal.clear()
    assert supervisor.recovery_tick(t, pods, now=100.0)
    assert journal.count("status") == 1
    assert len(calls) == 1  # the new status's; the old one's was kept


def test_a_round_shortly_before_a_loss_only_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan node NotReady, its grace period (1 s) not over: the round does no pod work,
    so the daemon looks again when it ends; once over, the round issues the step."""
    journal: list[str] = []
    t = make_tick(journal)
    pods = running_pods(t)
    settle(t, pods)
    states = Counted(monkeypatch, "pod_states")
    now = time.time()
    t.nodes = {**t.nodes, "n1": node("n1", False, since=now - 0.5)}
    t.inputs = round_inputs(7, len(pods), t.nodes, t.resource_version, 1)  # pods changed
    journal.clear()
    assert supervisor.supervise_once(t, lambda: list(pods)) == (0, 0)
    assert (states.calls, journal) == (0, [])
    t.nodes = {**t.nodes, "n1": node("n1", False, since=now - 1.5)}  # the grace is over
    supervisor.supervise_once(t, lambda: list(pods))
    assert journal[:2] == ["status", "recoveryplan"]


def test_a_node_notready_long_before_its_deadline_leaves_the_round_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = make_tick([])
    pods = running_pods(t)
    settle(t, pods)
    t.model = t.model.model_copy(
        update={"recovery": t.model.recovery.model_copy(update={"grace_period_seconds": 60})}
    )
    states = Counted(monkeypatch, "pod_states")
    t.nodes = {**t.nodes, "n1": node("n1", False, since=time.time() - 1)}
    t.inputs = round_inputs(7, len(pods), t.nodes, t.resource_version, 1)
    supervisor.supervise_once(t, lambda: list(pods))
    assert states.calls == 1
