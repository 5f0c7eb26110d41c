"""The pods of a recorded plan are built once per (topology, generation, plan), not per tick.

Why: at 10k tasks building them costs seconds, and the supervisor asks for them every second.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from backstop.controller import tick
from backstop.controller.memo import TopologyMemo
from backstop.domain.pinning import pinned_node
from backstop.domain.spec import StreamTopologySpec, expand
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.k8s import manifests
from backstop.k8s.manifests import Owner

SPEC = StreamTopologySpec.model_validate(
    {
        "image": "img",
        "recoveryLatencyBound": 2,
        "operators": [
            {"name": "src", "parallelism": 2, "reprocessingLatency": 1},
            {
                "name": "sink",
                "parallelism": 2,
                "reprocessingLatency": 1,
                "inputs": [{"operator": "src"}],
            },
        ],
    }
)
PLAN = PlanStatus(
    generation=1,
    backups=["src-0"],
    assignment={"src-0": "n1", "src-1": "n1", "sink-0": "n2", "sink-1": "n2"},
)


def make_tick(memory: TopologyMemo, generation: int = 1, uid: str = "uid-1") -> tick.Tick:
    return tick.Tick(
        kube=cast(Any, None),
        owner=Owner("topo", "ns", uid),
        model=SPEC,
        graph=expand(SPEC),
        generation=generation,
        status=TopologyStatus(),
        nodes={},
        emit=lambda *_: None,
        ledger=cast(Any, None),
        memory=memory,
    )


def node_of(pod: dict[str, Any]) -> str:
    return str(pinned_node(pod["spec"]))


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the real builder behind ``planned_pods``."""
    calls: list[int] = []
    real = manifests.desired_pods

    def counting(*args: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(tick, "desired_pods", counting)
    return calls


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods the real per-task builder makes, in order."""
    names: list[str] = []
    real = manifests.build_task_pod

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        pod = real(*args, **kwargs)
        names.append(pod["metadata"]["name"])
        return pod

    monkeypatch.setattr(manifests, "build_task_pod", counting)
    return names


def test_same_plan_is_built_once(builds: list[int]) -> None:
    memory = TopologyMemo()
    first = tick.planned_pods(make_tick(memory), PLAN)
    again = tick.planned_pods(make_tick(memory), PLAN.model_copy(deep=True))
    assert len(builds) == 1
    assert sorted(again) == ["topo--sink-0", "topo--sink-1", "topo--src-0", "topo--src-1"]
    assert again == first and again is not first  # the caller's dict is its own
    again.pop("topo--src-0")
    assert len(tick.planned_pods(make_tick(memory), PLAN)) == 4


@pytest.mark.parametrize(
    "change",
    [
        {"assignment": {"src-0": "n3", "src-1": "n1", "sink-0": "n2", "sink-1": "n2"}},
        {"backups": []},
        {"epochs": {"src-0": 2}},
        {"replicas": {"sink-0": ["n3"]}},
    ],
)
def test_a_changed_plan_is_built_again(builds: list[int], change: dict[str, Any]) -> None:
    memory = TopologyMemo()
    before = tick.planned_pods(make_tick(memory), PLAN)
    after = tick.planned_pods(make_tick(memory), PLAN.model_copy(update=change))
    assert len(builds) == 2
    assert after != before
    if "assignment" in change:
        assert node_of(after["topo--src-0"]) == "n3" and node_of(before["topo--src-0"]) == "n1"
    if "replicas" in change:
        assert node_of(after["topo--sink-0--r0"]) == "n3"


def test_another_generation_or_topology_is_built_again(builds: list[int]) -> None:
    memory = TopologyMemo()
    tick.planned_pods(make_tick(memory), PLAN)
    tick.planned_pods(make_tick(memory, generation=2), PLAN)
    tick.planned_pods(make_tick(memory, generation=2, uid="uid-2"), PLAN)
    assert len(builds) == 3


def test_a_recovery_step_reserves_only_its_tasks_pods(
    monkeypatch: pytest.MonkeyPatch, built: list[str]
) -> None:
    """At 10k tasks the reservation of a step's 250 pods built all 10k (2 CPU s, on the
    path from a node's loss to its first RecoveryPlan)."""
    reserved: dict[str, Any] = {}
    monkeypatch.setattr(tick, "reserve", lambda booking, owner, pods, nodes: reserved.update(pods))
    moved = {**(PLAN.assignment or {}), "sink-0": "n3"}
    tick.reserve_tasks(cast(Any, None), make_tick(TopologyMemo()), PLAN, moved, {"sink-0"})
    assert built == ["topo--sink-0"]
    assert list(reserved) == ["topo--sink-0"] and node_of(reserved["topo--sink-0"]) == "n3"
    # the same manifest as the whole plan's builder makes for it
    whole = manifests.desired_pods(
        Owner("topo", "ns", "uid-1"), SPEC, expand(SPEC), frozenset(PLAN.backups), moved
    )
    assert reserved["topo--sink-0"] == whole["topo--sink-0"]


def test_a_plan_with_moved_or_fenced_tasks_rebuilds_only_their_pods(built: list[str]) -> None:
    """A recovery step moves the lost node's tasks and fencing bumps their epochs: at 10k
    tasks each was a 2 CPU s rebuild of every pod before the recovered ones were created."""
    memory = TopologyMemo()
    tick.planned_pods(make_tick(memory), PLAN)
    assert len(built) == 4
    built.clear()
    moved = PLAN.model_copy(
        update={"assignment": {**(PLAN.assignment or {}), "sink-0": "n3"}, "epochs": {"src-1": 1}}
    )
    got = tick.planned_pods(make_tick(memory), moved)
    assert sorted(built) == ["topo--sink-0", "topo--src-1"]
    owner, graph = Owner("topo", "ns", "uid-1"), expand(SPEC)
    whole = manifests.desired_pods(
        owner, SPEC, graph, frozenset(moved.backups), moved.assignment or {}, None, moved.epochs
    )
    assert got == whole  # the same pods as a build from scratch
    assert node_of(got["topo--sink-0"]) == "n3"
    built.clear()
    fewer = moved.model_copy(update={"backups": []})  # other backups: every pod again
    assert tick.planned_pods(make_tick(memory), fewer) == manifests.desired_pods(
        owner, SPEC, graph, frozenset(), moved.assignment or {}, None, moved.epochs
    )
    assert len(built) == 8  # 4 for the check above, 4 for the rebuild
