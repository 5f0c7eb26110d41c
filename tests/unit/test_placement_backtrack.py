"""The RTAP seed's packing with backtracking (Section 4.3), checked by the evaluator.

Its raw packing (before it is compared with Algorithm 1) must keep capacity and
the bound on its own; the registered algorithm must never use more nodes than
Algorithm 1's best fit it starts from, nor fewer than the brute-force optimum.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners import TaskGraph
from planners.evaluate import check_plan
from planners.placement import NodePool, place_rtap_bf, place_rtap_bf_backtrack
from planners.placement.backtrack import _pack_backtracking
from planners.placement.orders import _wud_order
from planners.placement.state import _prepare
from tests.unit.test_placement import _brute_force, assert_valid, instances

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(data=st.data())
def test_raw_backtracking_packing_keeps_capacity_and_the_bound(data: st.DataObject) -> None:
    graph, bound = data.draw(instances())
    cpu = data.draw(st.sampled_from([1.0, 2.0]))
    prob = _prepare(graph, NodePool.uniform(cpu), bound, None)
    state = _pack_backtracking(prob.state(), _wud_order(graph))
    assignment = state.assignment()
    assert set(assignment) == set(graph.tasks)
    capacity = {s.name: s.cpu for s in prob.slots}
    found = check_plan(graph, bound=bound, backups=None, assignment=assignment, capacity=capacity)
    assert found == [], found


@FAST
@given(data=st.data())
def test_never_worse_than_its_greedy_start(data: st.DataObject) -> None:
    graph, bound = data.draw(instances())
    pool = NodePool.uniform(1)
    plan = place_rtap_bf_backtrack(graph, pool, bound=bound)
    assert_valid(graph, pool, plan, bound)
    assert plan.nodes_used <= place_rtap_bf(graph, pool, bound=bound).nodes_used


@SLOW
@given(data=st.data())
def test_never_below_the_brute_force_optimum(data: st.DataObject) -> None:
    graph, bound = data.draw(instances(max_tasks=6))
    plan = place_rtap_bf_backtrack(graph, NodePool.uniform(1), bound=bound)
    assert plan.nodes_used >= _brute_force(graph, 1.0, bound, joint=False)[0]


def test_a_task_made_unfit_is_picked_out_and_packed_again() -> None:
    """By hand: WUD puts ``b`` (fed by ``a``) first; ``a`` (0.8) then joins ``b``'s node,
    since ``ℓ_a = 0.8 ≤ 1``, which lifts ``ℓ_b`` to 0.8 + 0.3 > 1: ``b`` is picked out.
    Re-packed, ``b`` cannot join ``a`` again and opens a node; ``c`` (0.5 CPU) fits
    exactly beside ``a`` (0.5 + 0.5), the best fit."""
    g = TaskGraph.build(
        ["a", "b", "c"],
        [("a", "b")],
        latency={"a": 0.8, "b": 0.3, "c": 0.5},
        weight={"a": 0.5, "b": 0.4, "c": 0.5},
    )
    prob = _prepare(g, NodePool.uniform(1), 1.0, None)
    state = _pack_backtracking(prob.state(), _wud_order(g))
    where = state.where  # task index -> slot
    assert where[0] == 0, "a took b's first node"
    assert where[1] == 1, "b, picked out, opened the second node"
    assert where[2] == 0, "c fits exactly beside a"
