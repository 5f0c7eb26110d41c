"""Exact per-node recovery scheduling (CP-SAT) and ``auto``, the best verified plan."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from planners.budget import deterministic_cp_sat
from planners.graph import TaskGraph
from planners.recovery.best_density import recover_best_density_strong
from planners.recovery.heuristics import recover_dp
from planners.recovery.model import (
    _EPS,
    _SCALE,
    RecoveryStep,
    _fill_orphans,
    _Problem,
    _remaining_after,
    check_recovery,
    failed_queries,
)

_AUTO_DP_QUERIES = 20  # auto runs the seed's DP for its pooled bound up to this many


def _recovery_model(
    model: Any, prob: _Problem, nodes: list[str], in_query: list[int]
) -> tuple[dict[tuple[int, str], Any], list[Any]]:
    """The variables and constraints of :func:`recover_exact`, and its objective."""
    caps = {n: math.floor(prob.capacity[n] * _SCALE + 1e-6) for n in nodes}
    wint = [math.ceil(w * _SCALE - 1e-6) for w in prob.weight]
    x: dict[tuple[int, str], Any] = {}
    for p in in_query:
        for n in nodes:
            if wint[p] <= caps[n]:
                x[p, n] = model.new_bool_var(f"x{p}_{n}")
    y = [model.new_bool_var(f"y{q}") for q in range(prob.nq)]
    queries_of: dict[int, list[int]] = {p: [] for p in in_query}
    for q, m in enumerate(prob.qmask):
        for p in prob.bits(m):
            queries_of[p].append(q)
    placed = {p: [x[p, n] for n in nodes if (p, n) in x] for p in in_query}
    for p in in_query:
        model.add(sum(placed[p]) <= 1)
        model.add(sum(placed[p]) <= sum(y[q] for q in queries_of[p]))
    for q, m in enumerate(prob.qmask):
        for p in prob.bits(m):
            model.add(y[q] <= sum(placed[p]))
    for n in nodes:
        terms = [wint[p] * x[p, n] for p in in_query if (p, n) in x]
        if terms:
            model.add(sum(terms) <= caps[n])
    # redundant pooled capacity: tightens the relaxation CP-SAT proves bounds with
    model.add(sum(wint[p] * v for (p, _), v in x.items()) <= sum(caps.values()))
    pint = [round(pr * _SCALE) for pr in prob.qprio]
    model.maximize(sum(pi * yq for pi, yq in zip(pint, y, strict=True)))
    return x, y


def _add_recovery_hint(
    model: Any,
    graph: TaskGraph,
    prob: _Problem,
    x: dict[tuple[int, str], Any],
    y: list[Any],
    hint: RecoveryStep,
) -> None:
    """Start the search from ``hint``'s plan."""
    for (p, n), var in x.items():
        t = graph.tasks[prob.failed[p]]
        model.add_hint(var, 1 if hint.recover.get(t) == n else 0)
    done = set(hint.recovered_queries)
    for q, out in enumerate(prob.qout):
        model.add_hint(y[q], 1 if graph.tasks[out] in done else 0)


def recover_exact(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
    hint: RecoveryStep | None = None,
) -> RecoveryStep:
    """Exact per-node recovery scheduling with CP-SAT, within a time budget.

    Variables: ``x[t, n]`` (failed task ``t`` restarts on node ``n``) and
    ``y[q]`` (failed query ``q`` recovered). Constraints: each task at most
    once; ``y[q] ≤ Σ_n x[t, n]`` for each failed task ``t`` of ``q``; a task is
    recovered only for a recovered query; per node ``Σ w_t x[t, n] ≤ free_n``
    (CPU in millicores, weights rounded up and capacities down, so the integer
    model is never looser than the real one). Objective: maximise ``Σ prt_q y[q]``.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.
    capacity:
        Free CPU per available node, after the utilisation cap.
    time_limit:
        Seconds for the solver.
    hint:
        A feasible plan to start from (e.g. BestDensity's).

    Returns
    -------
    RecoveryStep
        ``optimal`` is ``True`` when CP-SAT proved optimality, ``False``
        otherwise (then ``upper_bound`` is the solver's bound). If the solver
        found no solution in time the plan recovers nothing.

    Raises
    ------
    InvalidTopology
        If ``failed`` names an unknown task.
    ValueError
        If a capacity is negative or not finite.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "a-0", "b-0"], [("s-0", "a-0"), ("s-0", "b-0")],
    ...     latency={"s-0": 1, "a-0": 1, "b-0": 1}, weight={"s-0": 1, "a-0": 1, "b-0": 2},
    ...     priority={"a-0": 1, "b-0": 5})
    >>> step = recover_exact(g, ["s-0", "a-0", "b-0"], {"n1": 2.0, "n2": 1.0})
    >>> sorted(step.recover), step.recovered_priority, step.optimal
    (['b-0', 's-0'], 5.0, True)

    Notes
    -----
    NP-hard (set-union knapsack, the seed's Appendix D.1, with bins on top), so
    the time is exponential in the worst case; CP-SAT proves small and
    moderate instances (tens of queries, a few nodes) within seconds.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Definition 2 and Appendix D.1 (the problem).
    """
    from ortools.sat.python import cp_model

    prob = _Problem(graph, failed, capacity)
    nodes = sorted(prob.capacity)
    in_query = [p for p in range(len(prob.failed)) if not (prob.orphans >> p) & 1]
    model = cp_model.CpModel()
    x, y = _recovery_model(model, prob, nodes, in_query)
    if hint is not None:
        _add_recovery_hint(model, graph, prob, x, y, hint)
    solver = cp_model.CpSolver()
    deterministic_cp_sat(solver.parameters, time_limit)
    status = solver.solve(model)
    placement: dict[int, str] = {}
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        for (p, n), var in x.items():
            if solver.value(var):
                placement[p] = n
    optimal = status == cp_model.OPTIMAL
    if optimal:
        bound: float | None = None
    elif status == cp_model.FEASIBLE:
        bound = float(solver.best_objective_bound) / _SCALE
    else:
        bound = None
    _fill_orphans(prob, placement, _remaining_after(prob, placement))
    step = prob.step("exact", placement, optimal, bound)
    if optimal:
        step = replace(step, upper_bound=step.recovered_priority)
    return step


def recover_auto(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The default: BestDensity, the seed's DP when small, then CP-SAT; the best verified plan.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.
    capacity:
        Free CPU per available node, after the utilisation cap.
    time_limit:
        Seconds shared by both stages (CP-SAT gets what BestDensity leaves).

    Returns
    -------
    RecoveryStep
        Never a lower recovered priority than :func:`recover_best_density_strong`
        (and so than the seed's :func:`recover_best_density`, whose candidates it includes).
        ``optimal`` is ``True`` when proven.

    Raises
    ------
    InvalidTopology
        If ``failed`` names an unknown task.
    ValueError
        If a capacity is negative or not finite.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "a-0", "b-0"], [("s-0", "a-0"), ("s-0", "b-0")],
    ...     latency={"s-0": 1, "a-0": 1, "b-0": 1}, weight={"s-0": 1, "a-0": 1, "b-0": 2},
    ...     priority={"a-0": 1, "b-0": 5})
    >>> step = recover_auto(g, ["s-0", "a-0", "b-0"], {"n1": 3.0})
    >>> step.algorithm, step.recovered_priority, step.optimal
    ('auto', 5.0, True)

    Notes
    -----
    At most about ``time_limit`` seconds: a third each for BestDensity and
    (with at most 20 failed queries) the DP, the rest for CP-SAT, seeded with
    the best plan so far. The DP's pooled optimum and CP-SAT's bound are both
    upper bounds; as soon as a plan meets one, it is proven optimal and the
    later stages are skipped.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5.
    """
    bd = recover_best_density_strong(graph, failed, capacity, time_limit=time_limit / 3)
    if bd.optimal:
        return replace(bd, algorithm="auto")
    best, bound = bd, bd.failed_priority
    if len(failed_queries(graph, failed)) <= _AUTO_DP_QUERIES:
        dp = recover_dp(graph, failed, capacity, time_limit=time_limit / 3)
        if dp.upper_bound is not None:
            bound = min(bound, dp.upper_bound)
        if dp.recovered_priority > best.recovered_priority + _EPS:
            best = dp
        if best.recovered_priority >= bound - _EPS:
            return replace(best, algorithm="auto", optimal=True, upper_bound=bound)
    ran_dp = len(failed_queries(graph, failed)) <= _AUTO_DP_QUERIES
    left = max(0.05, time_limit / 3 if ran_dp else 2 * time_limit / 3)
    ex = recover_exact(graph, failed, capacity, time_limit=left, hint=best)
    if ex.upper_bound is not None:
        bound = min(bound, ex.upper_bound)
    good_ex = not check_recovery(graph, failed, capacity, ex)
    if good_ex and ex.recovered_priority > best.recovered_priority - _EPS:
        best = ex
    proven = best.recovered_priority >= bound - _EPS
    return replace(best, algorithm="auto", optimal=proven, upper_bound=bound)
