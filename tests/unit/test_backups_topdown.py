"""The seed's top-down tree search (``tree-topdown``) against brute force on random trees,
and ``exhaustive`` with a caller-given size limit and time budget."""

from __future__ import annotations

import random
from itertools import combinations, pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners import InvalidTopology, PlannerError, TaskGraph
from planners.backups import backups_exhaustive, backups_tree_topdown, plan_backups
from planners.evaluate import check_plan

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def brute_force_minimum(g: TaskGraph, bound: float) -> int:
    """The fewest backups any plan needs, by trying every set through the evaluator."""
    ids = list(g.ids(range(len(g))))
    for k in range(len(ids) + 1):
        for combo in combinations(ids, k):
            if not check_plan(g, bound=bound, backups=combo):
                return k
    raise AssertionError("backing up every task keeps any feasible bound")


@st.composite
def trees(draw: st.DrawFn, *, uniform: bool) -> tuple[TaskGraph, float]:
    """A random in-tree (task ``i`` feeds one of ``0..i-1``; ``v0`` the sink) and a bound."""
    n = draw(st.integers(2, 9))
    ids = [f"v{i}" for i in range(n)]
    edges = [(ids[i], ids[draw(st.integers(0, i - 1))]) for i in range(1, n)]
    times = [1.0] * n if uniform else [float(draw(st.integers(1, 10))) for _ in ids]
    lat = dict(zip(ids, times, strict=True))
    smallest = max(lat.values())
    bound = draw(st.sampled_from([smallest, smallest + 1, 2 * smallest, 3 * smallest, 20.0]))
    return TaskGraph.build(ids, edges, latency=lat), max(bound, smallest)


@FAST
@given(st.booleans().flatmap(lambda u: trees(uniform=u)))
def test_topdown_keeps_the_bound_and_never_beats_the_minimum(
    case: tuple[TaskGraph, float],
) -> None:
    g, bound = case
    plan = plan_backups(g, bound, algorithm="tree-topdown")
    assert check_plan(g, bound=bound, backups=plan.backups) == []
    assert len(plan.backups) >= brute_force_minimum(g, bound)
    assert plan.optimal is None


def test_topdown_matches_the_minimum_on_most_random_trees() -> None:
    """The seed's claim (Sec. V-B, Fig. 7: as many backups as exhaust on trees) holds on
    most, not all, random trees; the two counter-examples below show the misses."""
    rng = random.Random(31)
    same = 0
    for _ in range(100):
        n = rng.randint(2, 9)
        ids = [f"v{i}" for i in range(n)]
        edges = [(ids[i], ids[rng.randrange(i)]) for i in range(1, n)]
        lat = {v: float(rng.randint(1, 10)) for v in ids}
        g = TaskGraph.build(ids, edges, latency=lat)
        bound = max(lat.values()) * rng.choice([1.0, 1.5, 2.0, 3.0])
        same += len(backups_tree_topdown(g, bound).backups) == brute_force_minimum(g, bound)
    assert 80 <= same < 100


def test_topdown_is_not_minimum_with_uniform_times_and_a_bfs_tie() -> None:
    """Uniform T = 1, R = 2: ``s1 → x → j``, ``s2 → j``, ``j → k → o`` (the sink).

    Hand-derived: the breadth-first search from ``o`` meets ``s2`` before ``x``
    (both two hops above ``j``), so ``I(x) > I(s2)``. The search from ``s1`` backs up
    ``x`` (1+1, then ``j`` would make 3); the one from ``x`` starts at 0 and backs up
    ``k`` (``j``, ``k``); the one from ``s2`` reaches ``j`` at 2 and ``k`` at 3, so it
    backs up ``j``: three backups. ``{x, j}`` keeps R with two, and the path
    ``s1 x j k o`` of five tasks needs two.
    """
    lat = dict.fromkeys(["s2", "s1", "x", "j", "k", "o"], 1.0)
    edges = [("s1", "x"), ("x", "j"), ("s2", "j"), ("j", "k"), ("k", "o")]
    g = TaskGraph.build(list(lat), edges, latency=lat)
    assert check_plan(g, bound=2.0, backups=["x", "j"]) == []
    assert brute_force_minimum(g, 2.0) == 2
    assert backups_tree_topdown(g, 2.0).backups == ("x", "j", "k")


def test_topdown_is_not_minimum_on_a_light_deep_branch() -> None:
    """The counter-example to the seed's Theorem 2 for Algorithm 3 as written.

    Hand-derived: the deepest source ``a`` walks 1+1+2+2+2 = 8 = R up to ``d``
    (``e`` would make 10) and backs ``d`` up; ``b`` walks 6+2 = 8 up to ``j``
    (``c`` would make 10) and backs ``j`` up; neither walk meets the other's
    backup in time. ``{j}`` alone keeps R: L(j) = 2 + 6, then c, d, e add 2 each
    from 0.
    """
    lat = {"a": 1.0, "a2": 1.0, "b": 6.0, "j": 2.0, "c": 2.0, "d": 2.0, "e": 2.0}
    edges = [("a", "a2"), ("a2", "j"), ("b", "j"), ("j", "c"), ("c", "d"), ("d", "e")]
    g = TaskGraph.build(list(lat), edges, latency=lat)
    assert check_plan(g, bound=8.0, backups=["j"]) == []
    assert brute_force_minimum(g, 8.0) == 1
    assert backups_tree_topdown(g, 8.0).backups == ("j", "d")
    assert plan_backups(g, 8.0, algorithm="tree").backups == ("j",)


def test_topdown_backs_up_every_second_task_of_a_line() -> None:
    """Seed Fig. 3's setting, T = 1 and R = 2, on one line of 6 tasks: searches from the
    new backups continue the walk (the repaired line 8), so every second task but the
    last is a backup."""
    ids = [f"v{i}" for i in range(6)]
    g = TaskGraph.build(ids, list(pairwise(ids)), latency=dict.fromkeys(ids, 1))
    assert backups_tree_topdown(g, 2.0).backups == ("v1", "v3")


def test_topdown_refuses_a_dag() -> None:
    lat = dict.fromkeys("abc", 1.0)
    dag = TaskGraph.build("abc", [("a", "b"), ("a", "c")], latency=lat)
    with pytest.raises(InvalidTopology, match="tree-topdown"):
        backups_tree_topdown(dag, 2.0)


# ----------------------------------------------------------------------------- exhaustive


def _chain(n: int) -> TaskGraph:
    ids = [f"v{i}" for i in range(n)]
    return TaskGraph.build(ids, list(pairwise(ids)), latency=dict.fromkeys(ids, 1))


def test_exhaustive_takes_larger_graphs_when_asked() -> None:
    # 24 tasks, T = 1, R = 12: one backup after the 12th task (v11) and none else.
    g = _chain(24)
    with pytest.raises(PlannerError, match="max_tasks"):
        backups_exhaustive(g, 12.0)
    plan = backups_exhaustive(g, 12.0, max_tasks=None, time_limit=30.0)
    assert plan.backups == ("v11",)
    assert plan.optimal is True


def test_exhaustive_fails_clearly_when_its_budget_runs_out() -> None:
    # 40 tasks, T = 1, R = 2: 19 backups, far beyond any enumeration in 0.2 s.
    with pytest.raises(PlannerError, match=r"time budget of 0\.2s.*no plan with up to"):
        backups_exhaustive(_chain(40), 2.0, max_tasks=None, time_limit=0.2)
