"""The rollout step planner (:mod:`planners.rollout`), checked state by state.

The reference is independent of the planner's helpers: the test builds each step's
state itself (replaced tasks on their new node with their new backup flag, the rest on
the old ones) and evaluates every single-node failure plus the tasks being replaced
with the failure-effect evaluator (``node_failure_latency``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop_testkit.support.strategies import task_dags
from planners import TaskGraph
from planners.evaluate import node_failure_latency
from planners.rollout import RolloutState, plan_rollout

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))

Instance = tuple[TaskGraph, RolloutState, RolloutState, list[str], float, int]


@st.composite
def instances(draw: st.DrawFn) -> Instance:
    graph = draw(task_dags(2, 8))
    tasks = list(graph.tasks)
    nodes = [f"n{j}" for j in range(draw(st.integers(1, 4)))]
    old = {t: draw(st.sampled_from(nodes)) for t in tasks}
    moves = draw(st.booleans())
    new = {t: draw(st.sampled_from(nodes)) if moves else old[t] for t in tasks}
    old_b = frozenset(draw(st.sets(st.sampled_from(tasks))))
    new_b = frozenset(draw(st.sets(st.sampled_from(tasks)))) if draw(st.booleans()) else old_b
    changed = sorted(draw(st.sets(st.sampled_from(tasks), min_size=1)))
    changed = sorted(
        set(changed) | {t for t in tasks if old[t] != new[t] or _flag(t, old_b, new_b)}
    )
    bound = draw(st.sampled_from([1.0, 1.5, 2.0, 3.0, 5.0]))
    limit = draw(st.sampled_from([0, 0, 1, 2]))
    return graph, RolloutState(old, old_b), RolloutState(new, new_b), changed, bound, limit


def _flag(t: str, old_b: frozenset[str], new_b: frozenset[str]) -> bool:
    return (t in old_b) != (t in new_b)


def _worst(
    graph: TaskGraph, assignment: dict[str, str], backups: set[str], down: set[str]
) -> float:
    """``max_p H(K_p ∪ down)``, written out with the evaluator."""
    worst = node_failure_latency(graph, sorted(backups), down)
    for node in set(assignment.values()):
        on = {t for t, n in assignment.items() if n == node}
        worst = max(worst, node_failure_latency(graph, sorted(backups), on | down))
    return worst


def _state(old: RolloutState, new: RolloutState, done: set[str]) -> tuple[dict[str, str], set[str]]:
    assert old.backups is not None and new.backups is not None
    assignment = {t: (new.assignment[t] if t in done else n) for t, n in old.assignment.items()}
    backups = {t for t in assignment if t in (new.backups if t in done else old.backups)}
    return assignment, backups


@SETTINGS
@given(inst=instances())
def test_every_step_keeps_the_bound_and_every_task_is_replaced_once(inst: Instance) -> None:
    graph, old, new, changed, bound, limit = inst
    steps = plan_rollout(graph, old, new, changed, bound=bound, limit=limit)
    flat = [t for step, _ in steps for t in step]
    assert sorted(flat) == sorted(changed)  # exactly once each
    assert len(flat) == len(set(flat))
    done: set[str] = set()
    pending = set(changed)
    for step, reported in steps:
        assert step, "a step holds at least one task"
        assert not limit or len(step) <= limit
        assignment, backups = _state(old, new, done)
        worst = _worst(graph, assignment, backups, set(step))
        assert abs(worst - reported) < 1e-9
        if len(step) > 1:  # a single task may break it alone: it is replaced anyway
            assert worst <= bound + 1e-9, (step, worst, bound)
        # as large as keeps the bound: no task left could have joined this step
        if not limit or len(step) < limit:
            for extra in pending - set(step):
                joined = _worst(graph, assignment, backups, set(step) | {extra})
                assert joined > bound + 1e-9, (step, extra, joined, bound)
        done |= set(step)
        pending -= set(step)
    assert not pending


def test_an_image_change_of_two_chains_goes_one_chain_position_per_step() -> None:
    """Two chains a→b→e and c→d→f of 1 s tasks, each task on its own node and backed up,
    bound 2 s. Hand-computed: a replaced task's consumer waits for it, so with a producer
    and its consumer down, the failure of the next node downstream costs 1 + 1 + 1 = 3 s;
    the two chains do not interact. So each step replaces one position of both chains."""
    tasks = ["a", "b", "e", "c", "d", "f"]
    g = TaskGraph.build(
        tasks, [("a", "b"), ("b", "e"), ("c", "d"), ("d", "f")], latency=dict.fromkeys(tasks, 1.0)
    )
    s = RolloutState({t: f"n-{t}" for t in tasks}, frozenset(tasks))
    steps = plan_rollout(g, s, s, tasks, bound=2.0)
    assert sorted(sorted(step) for step, _ in steps) == [["a", "c"], ["b", "d"], ["e", "f"]]
    assert all(w == 2.0 for _, w in steps)
