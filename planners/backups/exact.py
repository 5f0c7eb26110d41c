"""Provably minimum backups with CP-SAT (problem (5) of the seed), within a budget."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from planners.backups.bounds import path_lower_bound
from planners.backups.common import EPS, BackupPlan, _finish, _forced, _require_feasible
from planners.backups.dag import _ftc_dag
from planners.backups.local import _improve
from planners.budget import (
    CP_SAT_WORK_PER_SECOND,
    WorkBudget,
    deterministic_cp_sat,
    wall_seconds_left,
)
from planners.graph import TaskGraph

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

# --------------------------------------------------------------------------- exact (CP-SAT)


def _scale(values: Iterable[float]) -> tuple[int, bool]:
    """A power of ten (up to 10⁶) that makes every value integral, with ``True``.

    Otherwise ``(S, False)`` with ``S`` as fine as int64 comfortably allows (up to
    10¹²), so that rounding every latency of a path changes its sum by far less
    than the evaluator's tolerance :data:`EPS`.
    """
    vals = list(values)
    for k in range(7):
        s = 10**k
        if all(abs(x * s - round(x * s)) <= 1e-9 * max(1.0, abs(x * s)) for x in vals):
            return s, True
    top = max(max(vals, default=1.0), 1.0)
    k = 12
    while k > 6 and top * 10**k > 1e15:
        k -= 1
    return 10**k, False


def _to_int(x: float, scale: int, up: bool) -> int:
    y = x * scale
    r = round(y)
    if abs(y - r) <= 1e-9 * max(1.0, abs(y)):
        return int(r)
    return math.ceil(y) if up else math.floor(y)


def _solve_cpsat(
    graph: TaskGraph,
    t_int: list[int],
    r_int: int,
    *,
    time_limit: float,
    hint: list[bool] | None,
    tie_break: bool,
    patience: float | None = None,
    floor: int = 0,
) -> tuple[list[bool] | None, bool, float, float]:
    """Minimum backups on integer latencies: (flags, proven, objective bound, work used).

    With ``patience``, the search also stops once no better plan has been found
    for that many (deterministic) seconds (what ``auto`` wants on large graphs).
    The work used is CP-SAT's deterministic time in seconds. ``floor`` is a number of
    backups every plan of this model needs: with it as a constraint, a plan that
    meets it is proven minimum at once.
    """
    # Imported here, as in every planner that uses a solver: importing ortools costs
    # about a second (it pulls in pandas), and most callers never reach CP-SAT.
    from ortools.sat.python import cp_model

    n = len(graph)
    preds, succs = graph.preds, graph.succs
    model = cp_model.CpModel()
    forced = [any(t_int[u] + t_int[w] > r_int for w in succs[u]) for u in range(n)]
    m: dict[int, cp_model.IntVar] = {}
    for u in range(n):
        if succs[u] and not forced[u]:
            m[u] = model.new_bool_var(f"m{u}")
    ell = [model.new_int_var(t_int[v], r_int, f"l{v}") for v in range(n)]
    for v, ps in enumerate(preds):
        for u in ps:
            if u in m:  # if u keeps no backup, v waits for u's recovery (eq. 3)
                model.add(ell[v] >= t_int[v] + ell[u]).only_enforce_if(~m[u])
    n_forced = sum(forced)
    if floor > n_forced and m:
        model.add(sum(m.values()) >= floor - n_forced)
    model.minimize(sum(m.values()))
    if hint is not None:
        for u, var in m.items():
            model.add_hint(var, int(hint[u]))
    solver = cp_model.CpSolver()
    deterministic_cp_sat(solver.parameters, time_limit)
    left = max(0.05, time_limit)
    if patience is None:
        status = solver.solve(model)
        left -= solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND
        found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        values: dict[int, bool] = {u: bool(solver.value(v)) for u, v in m.items()} if found else {}
    else:
        incumbent = math.inf if hint is None else float(sum(hint[u] for u in m))
        status, values, left = _solve_with_patience(
            solver, model, m, patience, left, incumbent=incumbent
        )
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False, float(n_forced), max(0.0, time_limit - left)
    proven = status == cp_model.OPTIMAL
    flags = [bool(forced[u]) or values.get(u, False) for u in range(n)]
    lower = solver.best_objective_bound + n_forced
    if tie_break and proven and left > 0.05 and m:
        flags = _smallest_worst(
            solver, model, m, ell, forced, flags, r_int, min(left, 0.25 * time_limit)
        )
        left -= solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND
    return flags, proven, lower, max(0.0, time_limit - left)


def _smallest_worst(
    solver: Any,
    model: Any,
    m: Mapping[int, Any],
    ell: list[Any],
    forced: list[bool],
    flags: list[bool],
    r_int: int,
    time_limit: float,
) -> list[bool]:
    """Second phase: the same number of backups as ``flags``, smallest worst latency.

    ``flags`` is kept if the search finds nothing within ``time_limit``.
    """
    from ortools.sat.python import cp_model

    n = len(flags)
    count = sum(1 for u in m if flags[u])
    model.add(sum(m.values()) == count)
    worst = model.new_int_var(0, r_int, "worst")
    model.add_max_equality(worst, ell)
    model.minimize(worst)
    model.clear_hints()
    for u, var in m.items():
        model.add_hint(var, int(flags[u]))
    deterministic_cp_sat(solver.parameters, time_limit)
    if solver.solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return [bool(forced[u]) or (u in m and bool(solver.value(m[u]))) for u in range(n)]
    return flags


def _solve_with_patience(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    m: dict[int, cp_model.IntVar],
    patience: float,
    budget: float,
    *,
    incumbent: float = math.inf,
) -> tuple[Any, dict[int, bool], float]:
    """Solve in chunks of ``patience`` deterministic seconds; stop when one brings nothing.

    Each chunk restarts from the best plan so far (as a hint), so the search
    stops once ``patience`` of work found no plan better than the best so far, the
    first chunk included: it must beat ``incumbent`` (the hinted plan's objective),
    else the caller's plan stands. The same answer on
    every machine, unlike a wall-clock watchdog (a :func:`planners.budget.wall_limit`
    only cuts a search the machine is too slow for). Returns (status of the best
    solve, its backup flags, deterministic seconds left).
    """
    from ortools.sat.python import cp_model

    best_status: Any = cp_model.UNKNOWN
    best: dict[int, bool] = {}
    best_obj = math.inf
    left = budget
    while left > 0.01 and wall_seconds_left() != 0.0:
        deterministic_cp_sat(solver.parameters, min(patience, left))
        status = solver.solve(model)
        left -= max(0.01, solver.response_proto.deterministic_time / CP_SAT_WORK_PER_SECOND)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if not best:
                best_status = status
            break
        obj = solver.objective_value
        improved = obj < min(best_obj, incumbent) - 0.5
        if improved or status == cp_model.OPTIMAL or not best:
            best_status, best_obj = status, obj
            best = {u: bool(solver.value(var)) for u, var in m.items()}
        if status == cp_model.OPTIMAL or not improved:
            break
        model.clear_hints()  # type: ignore[no-untyped-call]
        for u, var in m.items():
            model.add_hint(var, int(best[u]))
    return best_status, best, left


def _exact(
    graph: TaskGraph,
    bound: float,
    time_limit: float,
    hint: list[bool] | None,
    patience: float | None = None,
    *,
    lower: int = 0,
) -> tuple[list[bool] | None, bool]:
    """CP-SAT on scaled latencies, sound for the float evaluator; (flags, proven).

    ``lower`` is a lower bound on the float problem (e.g.
    :func:`planners.backups.bounds.path_lower_bound`): a plan that meets it is minimum.
    """
    budget = WorkBudget(time_limit)
    scale, exact_scale = _scale([*graph.latency, bound])
    # Latencies rounded up and the bound (with the evaluator's tolerance when the
    # scaling is inexact) down: an integer plan is a float plan.
    slack = 0.0 if exact_scale else EPS
    t_up = [_to_int(x, scale, up=True) for x in graph.latency]
    r_down = _to_int(bound + slack, scale, up=False)
    flags, proven, _, used = _solve_cpsat(
        graph,
        t_up,
        r_down,
        time_limit=time_limit,
        hint=hint,
        tie_break=True,
        patience=patience,
        floor=lower,  # the rounded-up model is stricter: the float bound holds for it
    )
    budget.spend_seconds(used)
    if flags is not None and sum(flags) <= lower:
        return flags, True
    if flags is None or exact_scale or not proven:
        return flags, proven and exact_scale
    # Rounding made the model stricter; the opposite rounding relaxes it and gives
    # a lower bound. Equal counts prove the conservative plan optimal.
    left = budget.seconds_left()
    if left <= 0.05:
        return flags, False
    t_down = [_to_int(x, scale, up=False) for x in graph.latency]
    r_up = _to_int(bound + slack, scale, up=True)
    _, _, relaxed, _ = _solve_cpsat(
        graph, t_down, r_up, time_limit=left, hint=flags, tie_break=False
    )
    return flags, math.ceil(relaxed - 1e-6) >= sum(flags)


def backups_exact(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """Provably minimum backups with CP-SAT, within a time budget.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds the solver may use, a deterministic work limit (:mod:`planners.budget`;
        also wall seconds inside a :func:`planners.budget.wall_limit`). When they run
        out, the best plan found so far is returned with ``optimal=False``.

    Returns
    -------
    BackupPlan
        ``optimal=True`` when the solver proved the count minimum. Among
        minimum plans it prefers a smaller worst latency when time allows.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> plan = backups_exact(g, 2.0)
    >>> len(plan.backups), plan.worst, plan.optimal
    (2, 2.0, True)

    Notes
    -----
    The model of problem (5): a Boolean ``m_u`` per task that has consumers and
    an integer ``ℓ_v ∈ [t_v, R]`` per task, with ``ℓ_v ≥ t_v + ℓ_u`` enforced
    when ``m_u`` is false (CP-SAT's enforcement literals replace the big-M
    linearization), minimizing ``Σ m_u``. Tasks with ``t_u + t_w > R`` for a
    consumer ``w`` are fixed to backups, and sinks never are. Latencies are
    scaled by the smallest power of ten (up to 10⁶) that makes them integral;
    otherwise they are scaled by up to 10¹², rounded up and the bound (plus
    the evaluator's tolerance) down, so every integer plan passes the float
    evaluator, and a second solve with the opposite rounding gives the lower
    bound that proves it optimal. The DAG heuristic's plan
    (with local improvement) seeds the solver as a hint, and the disjoint-path lower
    bound (:func:`planners.backups.bounds.path_lower_bound`) is a constraint, so a plan
    that meets it ends the search. NP-hard in general; the solver's time is bounded by
    ``time_limit``.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. III-C, problem (5); the seed's exact reference is Algorithm
    exhaust (Sec. IV-E).
    """
    _require_feasible(graph, bound)
    budget = WorkBudget(time_limit)
    lower = path_lower_bound(graph, bound)
    hint = _improve(graph, bound, _ftc_dag(graph, bound), budget=budget, floor=lower)
    flags, proven = _exact(graph, bound, max(0.05, budget.seconds_left()), hint, lower=lower)
    if flags is None or sum(flags) > sum(hint):
        flags, proven = hint, sum(hint) <= max(lower, sum(_forced(graph, bound)))
    return _finish(graph, bound, "exact", flags, proven)
