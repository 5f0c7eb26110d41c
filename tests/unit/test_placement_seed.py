"""The RTAP seed as written: its 2SP baselines, its literal grouping rule, its claims.

The seed's baselines fit by a bin's level height, not by the failure-effect
model (``planners/placement/twosp.py``); what they produce is still checked by
the evaluator, and a broken bound must show in ``Placement.violations``, never
be hidden or applied. The seed's claims are checked on the benchmark's rebuild
of its Table 4 instances (``bench/bench_placement.py``), where they are stable:
they depend on no timing.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from backstop_testkit.support.strategies import task_dags
from planners import Infeasible, TaskGraph
from planners.evaluate import check_plan, worst_task_failure
from planners.migration import place_min_migration
from planners.placement import (
    REPORTS_VIOLATIONS,
    Node,
    NodePool,
    Placement,
    place,
    plan_joint,
)
from planners.placement.orders import _rtap_groups, _wud_order

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TWO_SP = sorted(REPORTS_VIOLATIONS)
TENTHS = tuple(k / 10 for k in range(1, 11))  # fine heights: sums near the bound are common


def evaluator_findings(graph: TaskGraph, pool: NodePool, plan: Placement) -> list[str]:
    capacity = {n.name: n.cpu for n in pool.slots(len(graph))}
    return [
        v.message
        for v in check_plan(
            graph,
            bound=plan.bound,
            backups=plan.backups,
            assignment=plan.assignment,
            capacity=capacity,
        )
    ]


# ------------------------------------------------------------------ 2SP baselines


@pytest.mark.parametrize("algorithm", TWO_SP)
@FAST
@given(graph=task_dags(max_tasks=14), slack=st.sampled_from([1.0, 1.5, 3.0]))
def test_2sp_keeps_the_bound_when_every_task_keeps_backups(
    algorithm: str, graph: TaskGraph, slack: float
) -> None:
    """Section 4.2, "these greedy algorithms ensure recovery latency": true of the level reading.

    With every task a backup, ``H(p)`` never exceeds the sum of the heights
    stacked on ``p``, which the fit keeps within the bound.
    """
    bound = max(graph.latency) * slack
    pool = NodePool.uniform(1)
    plan = place(graph, pool, bound=bound, algorithm=algorithm)
    assert plan.violations == ()
    assert evaluator_findings(graph, pool, plan) == []
    assert plan.worst <= bound + 1e-9
    assert set(plan.assignment) == set(graph.tasks)


@pytest.mark.parametrize("algorithm", TWO_SP)
@FAST
@given(data=st.data())
def test_2sp_reports_what_the_evaluator_finds(algorithm: str, data: st.DataObject) -> None:
    """With partial backups the estimate can be wrong: the plan says so, exactly."""
    graph = data.draw(task_dags(max_tasks=14, latencies=TENTHS))
    backups = data.draw(st.lists(st.sampled_from(graph.tasks), unique=True))
    single, _ = worst_task_failure(graph, backups)
    bound = data.draw(st.sampled_from([single, single * 1.3]))
    pool = NodePool.uniform(1)
    plan = place(graph, pool, bound=bound, backups=backups, algorithm=algorithm)
    assert list(plan.violations) == evaluator_findings(graph, pool, plan)
    assert (plan.worst > bound + 1e-9) == bool(plan.violations)
    event(f"bound broken: {bool(plan.violations)}")


def test_a_broken_2sp_plan_is_refused_where_it_would_be_applied() -> None:
    """Blind to zones, the 2SP fit puts a → b in one zone; nothing acts on that plan."""
    g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    pool = NodePool.of([Node("x1", 4, "zx"), Node("x2", 4, "zx"), Node("y1", 4, "zy")])
    plan = place(g, pool, bound=1, algorithm="bfdh-2sp")
    assert plan.violations == ("losing zx takes 2s > bound 1s",)
    with pytest.raises(Infeasible, match=r"'bfdh-2sp' breaks the bound .*losing zx takes 2s"):
        plan_joint(g, pool, bound=1, algorithm="bfdh-2sp")
    with pytest.raises(Infeasible, match="breaks the bound"):
        place_min_migration(g, pool, None, bound=1, algorithm="bfdh-2sp")


def test_level_height_fit_by_hand() -> None:
    """Heights 0.7, 0.5, 0.3 (independent tasks), R = 1, widths 1 of 3: worked by hand.

    Decreasing height: a opens node 0 (level 0.7); b does not fit on it
    (0.7 + 0.5 > 1) and opens node 1 (0.5); c fits on node 0 (0.7 + 0.3), the
    first fit. The exact check would put all three on one node (H = 0.7).
    """
    g = TaskGraph.build(["a", "b", "c"], [], latency={"a": 0.7, "b": 0.5, "c": 0.3})
    plan = place(g, NodePool.uniform(3), bound=1, algorithm="ffdh-2sp")
    assert plan.by_node() == {"node-0": ["a", "c"], "node-1": ["b"]}
    assert place(g, NodePool.uniform(3), bound=1, algorithm="ffdh").nodes_used == 1


# ------------------------------------------------------------------ the literal grouping rule


@FAST
@given(graph=task_dags(max_tasks=14), slack=st.sampled_from([1.0, 1.5, 3.0]))
def test_literal_groups_follow_line_387(graph: TaskGraph, slack: float) -> None:
    """v joins a group only if h_u + t_v ≤ R for every member u already there."""
    bound = max(graph.latency) * slack
    single = list(graph.latency)  # every task a backup: h_v = t_v alone
    groups = _rtap_groups(graph, _wud_order(graph), single, bound, literal=True)
    assert sorted(v for g in groups for v in g) == list(range(len(graph)))
    for group in groups:
        for k, v in enumerate(group):
            assert all(single[u] + graph.latency[v] <= bound + 1e-9 for u in group[:k])


# ------------------------------------------------------------------ the seed's claims (Table 5)


@pytest.fixture(scope="module")
def table4_at_r1() -> dict[str, dict[str, int]]:
    from backstop_testkit.cases.placement import table4

    pool = NodePool.uniform(1)
    out: dict[str, dict[str, int]] = {}
    for case in table4():
        g = case.build()
        out[case.name] = {}
        for name in ("nfdh-2sp", "ffdh-2sp", "bfdh-2sp", "rtap-bf", "rtap-bf-literal"):
            plan = place(g, pool, bound=1.0, algorithm=name)
            assert plan.violations == ()
            out[case.name][name] = plan.nodes_used
        order, single = _wud_order(g), list(g.latency)
        out[case.name]["groups"] = len(_rtap_groups(g, order, single, 1.0))
        out[case.name]["groups-literal"] = len(_rtap_groups(g, order, single, 1.0, literal=True))
    assert len(out) == 8
    return out


def test_rtap_bf_beats_the_seeds_bfdh_on_every_table4_instance(
    table4_at_r1: dict[str, dict[str, int]],
) -> None:
    """Table 5 / Section 5.3.1: A^RTAPBF uses fewer processors than A^BFDH."""
    for name, used in table4_at_r1.items():
        assert used["rtap-bf"] < used["bfdh-2sp"], (name, used)


def test_nfdh_is_the_worst_and_bfdh_the_best_2sp_baseline(
    table4_at_r1: dict[str, dict[str, int]],
) -> None:
    """Section 5.3.1: "A^NFDH performs the worst while A^BFDH has the best result"."""
    for name, used in table4_at_r1.items():
        assert used["nfdh-2sp"] >= used["ffdh-2sp"] >= used["bfdh-2sp"], (name, used)


def test_more_groups_more_bins(table4_at_r1: dict[str, dict[str, int]]) -> None:
    """Section 5.3.3 / Fig. 7: "the packing results are worse when items are partitioned
    into more groups" — the §5.3.3 rule never makes fewer groups, nor RTAP-BF fewer bins."""
    for name, used in table4_at_r1.items():
        assert used["groups-literal"] >= used["groups"], (name, used)
        if used["groups-literal"] > used["groups"]:
            assert used["rtap-bf-literal"] > used["rtap-bf"], (name, used)
        else:
            assert used["rtap-bf-literal"] == used["rtap-bf"], (name, used)
