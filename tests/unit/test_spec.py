"""StreamTopology expansion and validation: groupings give the task DAG the planners see,
and every malformed manifest is an ``InvalidTopology`` naming what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backstop.domain.spec import expand, load_topology, parse_topology
from planners import InvalidTopology

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "twitter-sentiment.yaml"


def doc(*operators: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": "t"},
        "spec": {"image": "x", "recoveryLatencyBound": 2, "operators": list(operators)},
    }


def op(name: str, par: int = 1, *inputs: tuple[str, str], t: float = 1.0) -> dict[str, Any]:
    return {
        "name": name,
        "parallelism": par,
        "reprocessingLatency": t,
        "inputs": [{"operator": u, "grouping": g} for u, g in inputs],
    }


def edges(d: dict[str, Any]) -> set[tuple[str, str]]:
    g = expand(parse_topology(d).spec)
    return {(g.tasks[u], g.tasks[v]) for u, v in g.edges}


def test_forward_joins_task_i_to_task_i() -> None:
    assert edges(doc(op("a", 2), op("b", 2, ("a", "forward")))) == {
        ("a-0", "b-0"),
        ("a-1", "b-1"),
    }


@pytest.mark.parametrize("grouping", ["shuffle", "broadcast"])
def test_shuffle_and_broadcast_join_every_pair(grouping: str) -> None:
    got = edges(doc(op("a", 2), op("b", 3, ("a", grouping))))
    assert got == {(f"a-{i}", f"b-{j}") for i in range(2) for j in range(3)}


def test_global_joins_every_task_to_task_0() -> None:
    assert edges(doc(op("a", 3), op("b", 2, ("a", "global")))) == {
        ("a-0", "b-0"),
        ("a-1", "b-0"),
        ("a-2", "b-0"),
    }


def test_tasks_carry_latency_weight_and_outputs() -> None:
    d = doc(op("a", 2, t=0.5), op("b", 1, ("a", "shuffle"), t=1.5))
    d["spec"]["operators"][0]["resources"] = {"cpu": "250m"}
    g = expand(parse_topology(d).spec)
    assert g.tasks == ("a-0", "a-1", "b-0")
    assert g.latency == (0.5, 0.5, 1.5)
    assert g.weight[:2] == (0.25, 0.25)
    assert {g.tasks[i] for i in g.outputs} == {"b-0"}  # default: tasks without consumers


def test_example_expands_to_the_documented_shape() -> None:
    g = expand(load_topology(EXAMPLE).spec)
    # 2 + 3 + 1 + 3 + 3 + 1 + 1 tasks; edges: source->hot 6, hot->merge 3,
    # source->filter 6, merge->filter 3, filter->sentiment 3, sentiment->sink 3,
    # merge->trending 1.
    assert len(g) == 14
    assert len(g.edges) == 25
    assert sorted(g.tasks[i] for i in g.outputs) == ["sink-0", "trending-0"]


BAD = [
    ("cycle", doc(op("a", 1, ("c", "shuffle")), op("b", 1, ("a", "shuffle")),
                  op("c", 1, ("b", "shuffle"))), "cycle"),
    ("unknown-input", doc(op("a"), op("b", 1, ("ghost", "shuffle"))), "ghost"),
    ("forward-parallelism", doc(op("a", 2), op("b", 3, ("a", "forward"))), "2 != 3"),
    ("zero-latency", doc(op("a", t=0.0)), "reprocessingLatency"),
    ("negative-latency", doc(op("a", t=-2.0)), "reprocessingLatency"),
    ("duplicate", doc(op("a"), op("a")), "duplicate operator name 'a'"),
    ("bad-grouping", doc(op("a"), op("b", 1, ("a", "random"))), "grouping"),
    ("zero-parallelism", doc(op("a", 0)), "parallelism"),
]  # fmt: skip


@pytest.mark.parametrize(("d", "needle"), [(d, n) for _, d, n in BAD], ids=[i for i, _, _ in BAD])
def test_invalid_manifests_are_rejected(d: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidTopology) as err:
        parse_topology(d)
    assert needle in str(err.value)


def test_cycle_is_named() -> None:
    with pytest.raises(InvalidTopology) as err:
        parse_topology(doc(op("a", 1, ("b", "shuffle")), op("b", 1, ("a", "shuffle"))))
    assert "a -> b -> a" in str(err.value) or "b -> a -> b" in str(err.value)
