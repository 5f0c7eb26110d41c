"""Minimum backups on 10,000 tasks where the greedy plan does not meet the lower bound.

The topology: 100 operators of 100 tasks whose latencies differ between operators, most
reading the previous operator, some an earlier one, some two inputs, four of them by
shuffle (the generator of ``bench/bench_backups_10k.py``). There ``auto`` goes past the
greedy plan to the DAG heuristic and local search; CP-SAT, whose presolve alone would cost
seconds on a model this large, is left out by a rule counted in work (model size against
the budget left), so the plan is the same on every run and machine.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import given

from planners import TaskGraph
from planners.backups import auto as auto_module
from planners.backups import backups_exhaustive, plan_backups
from planners.backups.bounds import path_lower_bound
from planners.backups.exact import _exact, _solve_with_patience
from planners.evaluate import check_plan
from tests.unit.test_backups import FAST, dags


def branching(seed: int, n_ops: int = 100, width: int = 100) -> TaskGraph:
    """The seeded branching topology (``bench/bench_backups_10k.py``'s ``held_out``)."""
    rng = random.Random(seed)
    shuffles = set(rng.sample(range(2, n_ops), 4))
    edges: list[tuple[str, str]] = []
    latency: dict[str, float] = {}
    for i in range(n_ops):
        inputs: list[tuple[int, bool]] = []
        if i:
            src = i - 1 if rng.random() < 0.7 else rng.randrange(max(0, i - 6), i)
            inputs.append((src, i in shuffles))
            if rng.random() < 0.3 and i > 2:
                inputs.append((rng.randrange(max(0, i - 8), i - 1), False))
        t = rng.choice([0.3, 0.5, 0.8, 1.1])
        for j in range(width):
            latency[f"op{i}-{j}"] = t
        for src, shuffle in inputs:
            if shuffle:
                pairs = [(a, b) for a in range(width) for b in range(width)]
                edges += [(f"op{src}-{a}", f"op{i}-{b}") for a, b in pairs]
            else:
                edges += [(f"op{src}-{j}", f"op{i}-{j}") for j in range(width)]
    return TaskGraph.build(list(latency), sorted(set(edges)), latency=latency)


def test_auto_plans_ten_thousand_branching_tasks_without_the_solver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above the lower bound, too large for CP-SAT at the default budget: the local-search
    plan, valid, not claimed minimum, and the same plan on a second run."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("CP-SAT ran")

    monkeypatch.setattr(auto_module, "_exact", refuse)
    g = branching(7)
    assert len(g) == 10_000
    bound = 3.3
    first = plan_backups(g, bound)
    assert check_plan(g, bound=bound, backups=first.backups) == []
    assert len(first.backups) > path_lower_bound(g, bound)
    assert first.optimal is False
    again = plan_backups(g, bound)
    assert (again.backups, again.algorithm) == (first.backups, first.algorithm)


def test_auto_still_calls_the_solver_on_a_model_the_budget_pays_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same shape at 10 × 10 tasks: small enough, so CP-SAT runs where needed, and a
    plan claimed minimum has the size of ``exact``'s."""
    calls: list[int] = []
    real = _exact

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(auto_module, "_exact", counting)
    for seed in range(20):
        g = branching(seed, n_ops=10, width=10)
        plan = plan_backups(g, 2.5)
        assert check_plan(g, bound=2.5, backups=plan.backups) == []
        if plan.optimal:
            assert len(plan.backups) == len(plan_backups(g, 2.5, algorithm="exact").backups)
    assert calls


def test_auto_leaves_the_solver_out_when_little_budget_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the rate at one model entry per second, no graph of these fits: every plan is
    the heuristic's, valid, and claimed minimum only where it has CP-SAT's optimum's size."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("CP-SAT ran")

    monkeypatch.setattr(auto_module, "_exact", refuse)
    monkeypatch.setattr(auto_module, "CP_SAT_SIZE_PER_SECOND", 1)
    for seed in range(20):
        g = branching(seed, n_ops=10, width=10)
        plan = plan_backups(g, 2.5)
        assert check_plan(g, bound=2.5, backups=plan.backups) == []
        if plan.optimal:
            exact = plan_backups(g, 2.5, algorithm="exact")
            assert exact.optimal is True
            assert len(plan.backups) == len(exact.backups)


@FAST
@given(dags(max_tasks=10))
def test_auto_matches_the_optimum_on_small_dags(case: tuple[TaskGraph, float]) -> None:
    g, bound = case
    first = plan_backups(g, bound, time_limit=2)
    assert first.optimal is True
    assert len(first.backups) == len(backups_exhaustive(g, bound).backups)
    assert plan_backups(g, bound, time_limit=2).backups == first.backups


class _Solver:
    """A stand-in CP-SAT solver: each solve finds a plan with the next objective given."""

    def __init__(self, objectives: list[float]) -> None:
        self.parameters = SimpleNamespace()
        self.response_proto = SimpleNamespace(deterministic_time=0.1)
        self.objectives = objectives
        self.solves = 0
        self.objective_value = 0.0

    def solve(self, model: object) -> object:
        from ortools.sat.python import cp_model

        self.objective_value = self.objectives[self.solves]
        self.solves += 1
        return cp_model.FEASIBLE

    def value(self, var: object) -> int:
        return 1


class _Model:
    def clear_hints(self) -> None:
        pass

    def add_hint(self, var: object, value: int) -> None:
        pass


@pytest.mark.parametrize(
    ("incumbent", "objectives", "solves"),
    [
        (5.0, [5.0, 4.0], 1),  # the first chunk only matches the hinted plan: stop
        (5.0, [4.0, 4.0], 2),  # it beats it, the second does not
        (5.0, [4.0, 3.0, 3.0], 3),
        (math.inf, [5.0, 5.0], 2),  # no incumbent: the first plan counts as better
    ],
)
def test_patience_stops_once_a_chunk_beats_nothing(
    incumbent: float, objectives: list[float], solves: int
) -> None:
    solver = _Solver(objectives)
    status, best, _ = _solve_with_patience(
        solver,  # type: ignore[arg-type]
        _Model(),  # type: ignore[arg-type]
        {0: object()},  # type: ignore[dict-item]
        0.5,
        10.0,
        incumbent=incumbent,
    )
    from ortools.sat.python import cp_model

    assert solver.solves == solves
    assert (status, best) == (cp_model.FEASIBLE, {0: True})
