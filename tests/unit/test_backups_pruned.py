"""``exhaustive-pruned``: the seed's Algorithm exhaust with its dead branches skipped.

Its answers are checked against the literal search (``exhaustive``, every subset fewest
first, separate code) on small graphs, count and tie-break alike, and against CP-SAT's
proven optimum (``exact``) on the seed's own cases, where the literal search cannot finish.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings

from backstop_testkit.cases.backups import cases
from planners import PlannerError, TaskGraph
from planners.backups import backups_exact, backups_exhaustive, plan_backups
from planners.backups.pruned import PRUNED_MAX_TASKS, backups_exhaustive_pruned
from planners.evaluate import check_plan, worst_task_failure
from tests.unit.test_backups import chain, dags

SMALL = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SMALL
@given(dags(max_tasks=12))
def test_the_same_plan_size_and_worst_latency_as_the_literal_search(
    case: tuple[TaskGraph, float],
) -> None:
    g, bound = case
    literal = backups_exhaustive(g, bound, time_limit=30)
    pruned = backups_exhaustive_pruned(g, bound, time_limit=30)
    assert check_plan(g, bound=bound, backups=pruned.backups) == []
    assert len(pruned.backups) == len(literal.backups)
    assert pruned.worst == pytest.approx(literal.worst)  # the seed's tie-break
    assert pruned.optimal is True


def twins(width: int, layers: int, t: float = 1.0) -> TaskGraph:
    """``layers`` layers of ``width`` interchangeable tasks, each fully connected to the
    next, between one source and one sink."""
    ids = ["src"] + [f"l{i}-{j}" for i in range(layers) for j in range(width)] + ["sink"]
    edges = [("src", f"l0-{j}") for j in range(width)]
    for i in range(layers - 1):
        edges += [(f"l{i}-{a}", f"l{i + 1}-{b}") for a in range(width) for b in range(width)]
    edges += [(f"l{layers - 1}-{j}", "sink") for j in range(width)]
    return TaskGraph.build(ids, edges, latency=dict.fromkeys(ids, t))


@pytest.mark.parametrize("bound", [2.0, 3.0, 4.0])
def test_interchangeable_tasks_keep_the_minimum(bound: float) -> None:
    """Trying twins in one order only must not lose a minimum plan: ``exact`` agrees."""
    g = twins(width=6, layers=5)
    pruned = backups_exhaustive_pruned(g, bound, time_limit=60)
    exact = backups_exact(g, bound, time_limit=60)
    assert exact.optimal
    assert len(pruned.backups) == len(exact.backups)
    assert check_plan(g, bound=bound, backups=pruned.backups) == []


@pytest.mark.parametrize(
    ("name", "uniform", "bound"),
    [("Guru", True, 5.0), ("Guru", False, 15.0), ("Senti-560", False, 25.0)],
)
def test_the_seeds_cases_reach_the_proven_optimum(name: str, uniform: bool, bound: float) -> None:
    """On the seed's Table III cases (55 and 93 tasks) the literal search cannot list the
    subsets; the pruned one reaches CP-SAT's proven minimum."""
    build = {n: b for n, b, _, _ in cases()}[name]
    g = build(uniform)
    exact = backups_exact(g, bound, time_limit=60)
    assert exact.optimal
    pruned = plan_backups(g, bound, algorithm="exhaustive-pruned", time_limit=120)
    assert len(pruned.backups) == len(exact.backups)
    assert pruned.worst == pytest.approx(worst_task_failure(g, pruned.backups)[0])
    assert check_plan(g, bound=bound, backups=pruned.backups) == []


def test_out_of_time_says_how_far_it_got() -> None:
    g = {n: b for n, b, _, _ in cases()}["Senti-1050"](False)
    started = time.monotonic()
    with pytest.raises(PlannerError, match=r"ran out of its time budget of 0\.2s: no plan"):
        backups_exhaustive_pruned(g, 15.0, time_limit=0.2)
    assert time.monotonic() - started < 30  # it stops, it does not run on


def test_larger_graphs_are_refused_with_the_way_out() -> None:
    with pytest.raises(PlannerError, match=r"limited to .* use 'exact'"):
        backups_exhaustive_pruned(chain([1.0] * (PRUNED_MAX_TASKS + 1)), 2.0)
