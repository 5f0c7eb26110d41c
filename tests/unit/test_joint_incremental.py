"""The joint plan's incremental recovery checks agree with the failure-effect evaluator.

Why: the joint plan's backup-dropping pass keeps each failure group's ``ℓ`` and
``H`` current and updates only what one dropped backup can change (so that
planning a 500-task topology does not recompute every group per drop). A
wrong shortcut there would accept a drop that breaks the bound, or refuse one
that keeps it. So every figure here is compared with
:func:`planners.evaluate.recovery_latencies`, which recomputes ``ℓ`` over the
whole graph from scratch and shares no code with the incremental path. The
evaluator's own shortcut (a failure set's pass visits only the tasks its ``H``
reads) is compared with the same whole-graph pass.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners import TaskGraph
from planners.evaluate import _failure_h, check_plan, recovery_latencies
from planners.placement import NodePool, plan_joint
from planners.placement.joint import _Backups
from planners.placement.model import _EPS
from planners.placement.state import _Latency, _prepare

Case = tuple[TaskGraph, list[int], list[int], float]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A random DAG, a random split of its tasks into failure groups, a drop order, a bound."""
    n = draw(st.integers(2, 22))
    tasks = [f"t-{i}" for i in range(n)]
    edges: set[tuple[str, str]] = set()
    for v in range(1, n):
        ups = draw(st.lists(st.integers(0, v - 1), max_size=4, unique=True))
        edges.update((tasks[u], tasks[v]) for u in ups)
    latency = {t: draw(st.integers(1, 10)) / 10 for t in tasks}
    graph = TaskGraph.build(tasks, sorted(edges), latency=latency)
    group = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    bound = draw(st.integers(10, 40)) / 10
    return graph, group, list(order), bound


def _groups(group: list[int]) -> list[set[int]]:
    out: dict[int, set[int]] = {}
    for v, g in enumerate(group):
        out.setdefault(g, set()).add(v)
    return [out[k] for k in sorted(out)]


def _h(graph: TaskGraph, flags: list[bool], members: set[int]) -> float:
    backups = [graph.tasks[i] for i, f in enumerate(flags) if f]
    failed = [graph.tasks[i] for i in members]
    ell = recovery_latencies(graph, backups, failed)
    return max(ell[t] for t in failed)


@FAST
@given(cases(), st.data())
def test_latency_h_matches_the_evaluator(case: Case, data: st.DataObject) -> None:
    graph, group, _, _ = case
    flags = data.draw(st.lists(st.booleans(), min_size=len(graph), max_size=len(graph)))
    lat = _Latency(graph, [True] * len(graph))
    for u, f in enumerate(flags):
        lat.set_flag(u, f)
    for members in _groups(group):
        assert abs(lat.h(members) - _h(graph, flags, members)) < 1e-9


@FAST
@given(cases(), st.data())
def test_evaluator_restricted_pass_matches_the_whole_graph_pass(
    case: Case, data: st.DataObject
) -> None:
    """``H(F)`` over only the tasks it reads equals the whole-graph pass's maximum."""
    graph, group, _, _ = case
    flags = data.draw(st.lists(st.booleans(), min_size=len(graph), max_size=len(graph)))
    backups = [graph.tasks[i] for i, f in enumerate(flags) if f]
    for members in _groups(group):
        failed = [graph.tasks[i] for i in members]
        ell = recovery_latencies(graph, backups, failed)
        assert abs(_failure_h(graph, flags, members) - max(ell[t] for t in failed)) < 1e-9


@FAST
@given(cases())
def test_drop_checks_match_the_evaluator(case: Case) -> None:
    graph, group, order, bound = case
    worst_alone = max(_h(graph, [True] * len(graph), g) for g in _groups(group))
    if worst_alone > bound:  # every backup kept already breaks it: not a drop question
        bound = worst_alone
    prob = _prepare(graph, NodePool.uniform(1.0), bound, None)
    groups = _groups(group)
    tracker = _Backups(prob, groups, [True] * len(graph))
    flags = [True] * len(graph)
    dropped = 0
    for u in order:
        trial_flags = [f and v != u for v, f in enumerate(flags)]
        keeps = all(_h(graph, trial_flags, g) <= bound + _EPS for g in groups)
        raises = tracker.trial(u)
        assert (raises is not None) == keeps, f"drop of task {u}"
        if raises is not None:
            tracker.apply(u, raises)
            flags = trial_flags
            dropped += 1
        assert tracker.lat.flags == flags
        for gi, g in enumerate(tracker.members):
            assert abs(tracker.h[gi] - _h(graph, flags, g)) < 1e-9
    # the greedy pass over the same order drops exactly the same backups
    again = _Backups(prob, groups, [True] * len(graph))
    again.drop_greedy(order)
    assert again.lat.flags == flags
    assert sum(not f for f in flags) == dropped


def test_no_budget_still_gives_a_valid_plan_with_one_drop_pass() -> None:
    """Anytime: with no budget at all, the first placement and one drop pass still run.

    ``a → b → c``, each t = 1 and 0.5 CPU, bound 2, 1-CPU nodes: 1.5 CPU needs two
    nodes; dropping both ``a``'s and ``b``'s backups makes ``c`` alone recover in
    1 + 1 + 1 = 3 > 2, and keeping one is enough (with ``b``'s, ``c`` replays at once;
    ``b`` with ``a`` on its node: 2), so the fewest backups is 1.
    """
    g = TaskGraph.build(
        ["a", "b", "c"],
        [("a", "b"), ("b", "c")],
        latency={"a": 1, "b": 1, "c": 1},
        weight={t: 0.5 for t in "abc"},
    )
    p = plan_joint(g, NodePool.uniform(1.0), bound=2, time_limit=0.0)
    assert check_plan(g, bound=2, backups=p.backups, assignment=p.assignment) == []
    assert (p.nodes_used, len(p.backups or ())) == (2, 1)
