"""Incremental multi-query optimisation (the seed's Section 2.1): ``add_query``.

The seed: Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex Event
Processing Systems*. The property tests compare the merged graph with a brute force
written here: an operator's canonical upstream (its label and, recursively, its inputs'),
one merged operator per distinct canonical upstream.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planners.errors import InvalidTopology
from planners.replication.model import importance
from planners.replication.mqo import InvalidQuery, QueryGraph, add_query, to_task_graph

Query = dict[str, tuple[str, tuple[str, ...]]]
Signature = tuple[object, ...]


def chain(*labels: str) -> Query:
    """A pipeline ``labels[0] -> labels[1] -> …``, each operator named by its label."""
    return {lab: (lab, (labels[k - 1],) if k else ()) for k, lab in enumerate(labels)}


def merge(queries: Sequence[tuple[str, Query]]) -> QueryGraph:
    graph = QueryGraph()
    for name, ops in queries:
        graph, _ = add_query(graph, name, ops)
    return graph


def signatures(
    labels: Mapping[str, str], inputs: Mapping[str, Sequence[str]]
) -> dict[str, Signature]:
    """Each operator's canonical upstream: ``(label, (signature of each input, …))``."""
    memo: dict[str, Signature] = {}

    def sig(op: str) -> Signature:
        if op not in memo:
            memo[op] = (labels[op], tuple(sig(i) for i in inputs[op]))
        return memo[op]

    return {op: sig(op) for op in labels}


def query_signatures(ops: Query) -> dict[str, Signature]:
    return signatures({o: lab for o, (lab, _) in ops.items()}, {o: i for o, (_, i) in ops.items()})


# ------------------------------------------------------------------- the seed's Figure 1


def test_figure_1_reuses_s1_and_f1_of_the_running_query() -> None:
    g = merge([("q1", chain("S1", "F1", "A1", "D1"))])
    g, reused = add_query(g, "q2", chain("S1", "F1", "J1", "D2"))
    assert reused == {"S1": "q1.S1", "F1": "q1.F1"}
    assert len(g.label) == 6
    assert g.inputs["q2.J1"] == ("q1.F1",)
    assert g.users["q1.S1"] == g.users["q1.F1"] == {"q1", "q2"}
    assert g.users["q1.A1"] == g.users["q1.D1"] == {"q1"}
    assert g.users["q2.J1"] == g.users["q2.D2"] == {"q2"}
    assert g.queries == {"q1": ("q1.D1",), "q2": ("q2.D2",)}


def test_qod_on_the_merged_graph_counts_the_queries_sharing_an_operator() -> None:
    g = merge([("q1", chain("S1", "F1", "A1")), ("q2", chain("S1", "F1", "J1"))])
    qod = importance(to_task_graph(g), "qod")
    assert qod == {"q1.S1": 1.0, "q1.F1": 1.0, "q1.A1": 0.5, "q2.J1": 0.5}


# ------------------------------------------------------------------- the reuse rule


def test_same_label_over_another_stream_is_another_operator() -> None:
    g = merge([("q1", chain("S1", "F1", "D1"))])
    g, reused = add_query(g, "q2", chain("S2", "F1", "D1"))
    assert reused == {}
    assert len(g.label) == 6


def test_reuse_stops_at_the_first_operator_that_does_not_match() -> None:
    g = merge([("q1", {"s": ("S", ()), "a": ("A", ("s",)), "f": ("F", ("a",))})])
    g, reused = add_query(g, "q2", {"s": ("S", ()), "b": ("B", ("s",)), "f": ("F", ("b",))})
    assert reused == {"s": "q1.s"}
    assert g.inputs["q2.f"] == ("q2.b",)
    assert len(g.label) == 5


def test_a_binary_operator_is_reused_only_with_both_inputs_in_order() -> None:
    def join(left: str, right: str) -> Query:
        return {"l": (left, ()), "r": (right, ()), "j": ("J", ("l", "r"))}

    g = merge([("q1", join("S1", "S2"))])
    _, swapped = add_query(g, "q2", join("S2", "S1"))
    _, same = add_query(g, "q3", join("S1", "S2"))
    assert swapped == {"l": "q1.r", "r": "q1.l"}
    assert same == {"l": "q1.l", "r": "q1.r", "j": "q1.j"}


def test_the_same_query_twice_reuses_everything() -> None:
    q = {"s": ("S", ()), "t": ("T", ()), "j": ("J", ("s", "t")), "d": ("D", ("j",))}
    g1 = merge([("q1", q)])
    g2, reused = add_query(g1, "q2", q)
    assert reused == {op: f"q1.{op}" for op in q}
    assert g2.label == g1.label and g2.inputs == g1.inputs
    assert all(users == {"q1", "q2"} for users in g2.users.values())
    assert g2.queries["q2"] == g2.queries["q1"] == ("q1.d",)


def test_identical_operators_of_one_query_become_one() -> None:
    q = {"s": ("S", ()), "a": ("F", ("s",)), "b": ("F", ("s",)), "j": ("J", ("a", "b"))}
    g, reused = add_query(QueryGraph(), "q", q)
    assert reused == {}
    assert sorted(g.label) == ["q.a", "q.j", "q.s"]
    assert g.inputs["q.j"] == ("q.a", "q.a")


def test_a_taken_name_gets_a_suffix() -> None:
    g = merge([("q", {"x.y": ("A", ())})])
    g, _ = add_query(g, "q.x", {"y": ("B", ())})
    assert sorted(g.label) == ["q.x.y", "q.x.y~2"]


def test_the_arguments_are_not_changed() -> None:
    g = merge([("q1", chain("S1", "F1", "A1"))])
    q = {"S1": ("S1", ()), "F1": ("F1", ["S1"]), "J1": ("J1", ["F1"])}
    before_g, before_q = copy.deepcopy(g), copy.deepcopy(q)
    add_query(g, "q2", q)
    assert g == before_g
    assert q == before_q


# ------------------------------------------------------------------- against a brute force


@st.composite
def queries(draw: st.DrawFn) -> Query:
    """A small query DAG over the labels a, b, c: each operator reads up to two earlier."""
    ops: Query = {}
    for k in range(draw(st.integers(1, 5))):
        arity = draw(st.integers(0, min(2, k)))
        ins = tuple(f"o{draw(st.integers(0, k - 1))}" for _ in range(arity))
        ops[f"o{k}"] = (draw(st.sampled_from("abc")), ins)
    return ops


workloads = st.lists(queries(), min_size=1, max_size=4).map(
    lambda qs: [(f"q{n}", q) for n, q in enumerate(qs)]
)


@settings(max_examples=200, deadline=None)
@given(workloads, st.randoms(use_true_random=False))
def test_any_order_gives_the_same_number_of_operators(
    workload: list[tuple[str, Query]], rng: random.Random
) -> None:
    shuffled = list(workload)
    rng.shuffle(shuffled)
    assert len(merge(workload).label) == len(merge(shuffled).label)


@settings(max_examples=200, deadline=None)
@given(workloads)
def test_one_operator_per_distinct_upstream_used_by_exactly_its_queries(
    workload: list[tuple[str, Query]],
) -> None:
    want: dict[Signature, set[str]] = {}
    for name, ops in workload:
        for s in query_signatures(ops).values():
            want.setdefault(s, set()).add(name)
    g = merge(workload)
    got = signatures(g.label, g.inputs)
    assert len(g.label) == len(want)
    assert {got[op]: set(users) for op, users in g.users.items()} == want


@settings(max_examples=100, deadline=None)
@given(workloads, queries())
def test_reused_operators_are_the_running_ones_with_the_same_upstream(
    workload: list[tuple[str, Query]], new: Query
) -> None:
    g = merge(workload)
    running = signatures(g.label, g.inputs)
    g2, reused = add_query(g, "new", new)
    mine = query_signatures(new)
    assert {op for op in new if mine[op] in running.values()} == set(reused)
    assert all(running[old] == mine[op] for op, old in reused.items())
    assert all(g2.label[o] == g.label[o] and g2.inputs[o] == g.inputs[o] for o in g.label)


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({}, "has no operators"),
        ({"s": ("S", ()), "f": ("F", ("t",))}, "reads unknown 't'"),
        ({"a": ("A", ("b",)), "b": ("B", ("a",))}, "cycle: a -> b -> a"),
        ({"s": ("S", ()), "a": ("A", ("s", "a"))}, "cycle: a -> a"),
    ],
)
def test_bad_queries_are_refused(ops: Query, message: str) -> None:
    with pytest.raises(InvalidQuery, match=message) as err:
        add_query(QueryGraph(), "q", ops)
    assert isinstance(err.value, ValueError) and isinstance(err.value, InvalidTopology)


def test_a_deployed_query_name_is_refused() -> None:
    g = merge([("q", chain("S"))])
    with pytest.raises(InvalidQuery, match="'q' is already deployed"):
        add_query(g, "q", chain("T"))
