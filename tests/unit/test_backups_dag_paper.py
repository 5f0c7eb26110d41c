"""Algorithm 4 of the FTC seed as written (``planners.backups.dag_paper``).

Expected values are worked by hand from the seed's steps (comments show the
arithmetic) or come from ``exhaustive``; every plan goes through the evaluator.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners.backups import backups_exhaustive
from planners.backups.dag_paper import (
    LITERAL,
    BoundBroken,
    Reading,
    backups_dag_paper,
    ftc_algorithm4,
)
from planners.evaluate import check_plan, worst_task_failure
from planners.graph import TaskGraph

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

READINGS = [
    LITERAL,
    Reading(sinks=False),
    Reading(termination="percentage"),
    Reading(dynamic=True, eliminate=True),
]


def senti_miniature() -> TaskGraph:
    """Twitter Sentiment's shape in small: the source feeds both ``h`` and ``f``."""
    edges = [("s", "h"), ("h", "m"), ("m", "f"), ("s", "f"), ("f", "e"), ("e", "k")]
    return TaskGraph.build("shmfek", edges, latency=dict.fromkeys("shmfek", 1.0))


def test_literal_reading_breaks_the_bound_with_uniform_latencies() -> None:
    g = senti_miniature()
    # Round from s: D = s 1, h 2, m 3, f max(2, 4) = 4 > R, so Z = {s, h, m};
    # B(m) = 2 is the highest, m is picked and s, h, m leave Z.
    # Round from m: D = f 1, e 2, k 3, so Z = {m, f, e, k}; B(k) = 4 is the
    # highest, the sink k is picked and every task leaves Z. Plan {m, k}.
    assert ftc_algorithm4(g, 3.0) == ["m", "k"]
    # But f still waits for s: L(f) = 2, L(e) = 3, L(k) = 4 > 3.
    assert worst_task_failure(g, ["m", "k"]) == (4.0, "k")
    with pytest.raises(BoundBroken, match="task k at L = 4s"):
        backups_dag_paper(g, 3.0)
    assert len(backups_exhaustive(g, 3.0).backups) == 2  # e.g. {m, e}


def test_regenerating_candidates_after_each_pick_repairs_the_miniature() -> None:
    g = senti_miniature()
    # After m, Z is regenerated from s: f 2, e 3 (k 4 is beyond R); s, h, m
    # stay removed, B(e) is the highest, so e is picked. The round from e then
    # picks the sink k (every round picks a task), unless sinks are no candidates.
    plan = backups_dag_paper(g, 3.0, reading=Reading(dynamic=True))
    assert plan.backups == ("m", "e", "k")
    assert check_plan(g, bound=3.0, backups=plan.backups) == []
    plan = backups_dag_paper(g, 3.0, reading=Reading(dynamic=True, sinks=False))
    assert plan.backups == ("m", "e")
    assert check_plan(g, bound=3.0, backups=plan.backups) == []


def test_literal_reading_backs_up_a_sink_on_a_line() -> None:
    g = TaskGraph.build("abc", [("a", "b"), ("b", "c")], latency=dict.fromkeys("abc", 1.0))
    # Every round picks a task: from a, the farthest within R = 3 is the sink c.
    assert ftc_algorithm4(g, 3.0) == ["c"]
    assert backups_exhaustive(g, 3.0).backups == ()
    # Without sinks as candidates the round still picks one: b, the farthest left.
    assert ftc_algorithm4(g, 3.0, Reading(sinks=False)) == ["b"]


@st.composite
def graphs(draw: st.DrawFn, *, tree: bool) -> tuple[TaskGraph, float]:
    """Small random DAGs (or in-trees: each task feeds one later task) and a feasible R."""
    n = draw(st.integers(2, 9))
    ids = [f"v{i}" for i in range(n)]
    edges: set[tuple[int, int]] = set()
    for u in range(n - 1):
        if tree:
            edges.add((u, draw(st.integers(u + 1, n - 1))))
        else:
            for v in draw(st.sets(st.integers(u + 1, n - 1), min_size=1, max_size=3)):
                edges.add((u, v))
    lat = [float(draw(st.integers(1, 6))) for _ in ids]
    g = TaskGraph.build(
        ids, [(ids[u], ids[v]) for u, v in edges], latency=dict(zip(ids, lat, strict=True))
    )
    return g, float(draw(st.integers(int(max(lat)), int(max(lat)) + 8)))


@FAST
@given(graphs(tree=False))
def test_every_plan_returned_keeps_the_bound(case: tuple[TaskGraph, float]) -> None:
    g, bound = case
    for reading in READINGS:
        try:
            plan = backups_dag_paper(g, bound, reading=reading)
        except BoundBroken:
            worst, _ = worst_task_failure(g, ftc_algorithm4(g, bound, reading))
            assert worst > bound
            continue
        assert check_plan(g, bound=bound, backups=plan.backups) == []
        assert plan.worst <= bound


@FAST
@given(graphs(tree=True))
def test_literal_reading_keeps_the_bound_on_trees(case: tuple[TaskGraph, float]) -> None:
    g, bound = case
    for reading in (LITERAL, Reading(sinks=False)):
        plan = backups_dag_paper(g, bound, reading=reading)
        assert check_plan(g, bound=bound, backups=plan.backups) == []
    # With the final redundancy pass the literal reading reaches the optimum on trees.
    plan = backups_dag_paper(g, bound, reading=Reading(eliminate=True))
    assert len(plan.backups) == len(backups_exhaustive(g, bound).backups)
