"""A re-plan of an unchanged input keeps the placement in force: zero pods move.

Every result is checked by the failure-effect evaluator; "kept" is asserted
against the input assignment, never against a figure copied from a run.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from backstop.domain.planning import plan_topology
from backstop.domain.spec import StreamTopologySpec, expand
from backstop_testkit.support.strategies import task_dags
from planners import Infeasible, TaskGraph
from planners.evaluate import check_plan
from planners.migration import current_still_valid, place_min_migration
from planners.placement import Node, NodePool, place

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def instances(draw: st.DrawFn) -> tuple[TaskGraph, list[Node], float]:
    graph = draw(task_dags(2, 10))
    k = draw(st.integers(2, 6))
    nodes = [Node(f"n{j}", draw(st.sampled_from([1.0, 2.0]))) for j in range(k)]
    return graph, nodes, draw(st.sampled_from([1.5, 2.0, 3.0, 5.0]))


def _valid(graph: TaskGraph, nodes: list[Node], bound: float, plan: object) -> None:
    assignment = plan.assignment  # type: ignore[attr-defined]
    backups = plan.backups  # type: ignore[attr-defined]
    violations = check_plan(
        graph,
        bound=bound,
        backups=None if backups is None else list(backups),
        assignment=assignment,
        capacity={n.name: n.cpu for n in nodes},
    )
    assert not violations, violations[0].message


@SETTINGS
@given(inst=instances(), choose=st.booleans())
def test_replan_of_the_plan_in_force_moves_nothing(
    inst: tuple[TaskGraph, list[Node], float], choose: bool
) -> None:
    graph, nodes, bound = inst
    pool = NodePool.of(nodes)
    try:
        first = place_min_migration(graph, pool, None, bound=bound, choose_backups=choose)
    except Infeasible:
        assume(False)
        return
    _valid(graph, nodes, bound, first)
    again = place_min_migration(
        graph,
        NodePool.of(reversed(nodes)),
        first.assignment,
        bound=bound,
        backups=first.backups,
        choose_backups=choose,
    )
    _valid(graph, nodes, bound, again)
    assert again.assignment == first.assignment
    assert again.backups == first.backups


@SETTINGS
@given(inst=instances())
def test_a_valid_placement_in_force_is_kept_even_if_the_fresh_plan_differs(
    inst: tuple[TaskGraph, list[Node], float],
) -> None:
    """Pods placed by another (valid) plan stay where they are: nothing moves for nothing."""
    graph, nodes, bound = inst
    pool = NodePool.of(nodes)
    try:
        other = place(graph, pool, bound=bound, algorithm="nfdh")
        fresh = place(graph, pool, bound=bound)
    except Infeasible:
        assume(False)
        return
    assume(other.nodes_used == fresh.nodes_used)
    assert current_still_valid(graph, pool, other.assignment, bound=bound, backups=None)
    kept = place_min_migration(graph, pool, other.assignment, bound=bound, choose_backups=False)
    _valid(graph, nodes, bound, kept)
    assert kept.assignment == other.assignment
    assert kept.algorithm.endswith("+kept")


@SETTINGS
@given(inst=instances())
def test_an_invalid_placement_in_force_is_replaced_by_a_valid_one(
    inst: tuple[TaskGraph, list[Node], float],
) -> None:
    graph, nodes, bound = inst
    pool = NodePool.of(nodes)
    everything_on_one = {t: nodes[0].name for t in graph.tasks}
    try:
        fresh = place(graph, pool, bound=bound)
    except Infeasible:
        assume(False)
        return
    valid_now = current_still_valid(graph, pool, everything_on_one, bound=bound, backups=None)
    plan = place_min_migration(graph, pool, everything_on_one, bound=bound, choose_backups=False)
    _valid(graph, nodes, bound, plan)
    if not valid_now:
        assert plan.assignment != everything_on_one
        stay = sum(1 for t in graph.tasks if plan.assignment[t] == nodes[0].name)
        fresh_stay = sum(1 for t in graph.tasks if fresh.assignment[t] == nodes[0].name)
        assert stay >= fresh_stay  # the renaming never keeps fewer tasks in place


SPEC = {
    "image": "x",
    "recoveryLatencyBound": 4,
    "backups": "all",
    "operators": [
        {"name": "src", "parallelism": 3, "reprocessingLatency": 1, "resources": {"cpu": "500m"}},
        {
            "name": "mid",
            "parallelism": 3,
            "reprocessingLatency": 1.5,
            "resources": {"cpu": "500m"},
            "inputs": [{"operator": "src", "grouping": "shuffle"}],
        },
        {
            "name": "out",
            "reprocessingLatency": 1,
            "resources": {"cpu": "250m"},
            "inputs": [{"operator": "mid", "grouping": "global"}],
        },
    ],
}


def test_operator_replan_keeps_running_pods_of_a_valid_plan() -> None:
    """plan_topology with only the pods' placement (no recorded plan) keeps it when valid.

    Why: a re-plan from scratch that only renamed nodes would move pods placed by an
    equally good but different partition.
    """
    spec = StreamTopologySpec.model_validate(SPEC)
    graph = expand(spec)
    nodes = [Node(f"w{j}", 2.0) for j in range(4)]
    fresh = plan_topology(spec, graph, nodes)
    running = place(graph, NodePool.of(nodes), bound=4, algorithm="nfdh").assignment
    assert len(set(running.values())) <= fresh.placement.nodes_used
    assert running != fresh.placement.assignment  # a different, valid partition
    again = plan_topology(spec, graph, list(reversed(nodes)), current=running)
    assert again.moved == 0
    assert again.placement.assignment == running
    recorded = (fresh.placement.assignment, sorted(fresh.backups))
    replan = plan_topology(
        spec, graph, nodes, current=fresh.placement.assignment, recorded=recorded
    )
    assert replan.moved == 0
    assert replan.placement.assignment == fresh.placement.assignment
