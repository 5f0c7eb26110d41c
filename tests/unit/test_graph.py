"""TaskGraph.build against networkx as the oracle: the same order, edges and cycles,
whether or not the task list is already topological (build skips networkx when it is)."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planners import InvalidTopology, TaskGraph


@st.composite
def task_lists(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    """A random DAG's tasks in a random order (often not topological), with duplicate edges."""
    n = draw(st.integers(1, 12))
    topo = [f"t{i}" for i in range(n)]
    edges = [
        (topo[u], topo[v])
        for v in range(n)
        for u in draw(st.lists(st.integers(0, max(0, v - 1)), max_size=3))
        if u < v
    ]
    listed = draw(st.permutations(topo)) if draw(st.booleans()) else topo
    return list(listed), edges


@settings(max_examples=80, deadline=None)
@given(task_lists())
def test_build_matches_networkx(case: tuple[list[str], list[tuple[str, str]]]) -> None:
    ids, edges = case
    g = TaskGraph.build(ids, edges, latency=dict.fromkeys(ids, 1.0))
    dg = nx.DiGraph(edges)
    dg.add_nodes_from(ids)
    position = {t: i for i, t in enumerate(ids)}
    assert list(g.tasks) == list(nx.lexicographical_topological_sort(dg, key=position.get))
    assert sorted((g.tasks[u], g.tasks[v]) for u, v in g.edges) == sorted(set(edges))
    assert all(list(ps) == sorted(ps) for ps in g.preds)
    assert all(list(ss) == sorted(ss) for ss in g.succs)
    assert all(u < v for u, v in g.edges)


@pytest.mark.parametrize("ids", [["a", "b", "c"], ["c", "b", "a"]])
def test_build_names_a_cycle(ids: list[str]) -> None:
    with pytest.raises(InvalidTopology, match="cycle: "):
        TaskGraph.build(ids, [("a", "b"), ("b", "c"), ("c", "a")], latency=dict.fromkeys(ids, 1))
