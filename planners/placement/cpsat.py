"""The exact placement model: CP-SAT over node choice, node use and per-group latencies.

The exact search (:mod:`planners.placement.search`) and the joint plan
(:mod:`planners.placement.joint`) call it; nothing here is public. The solver runs with
deterministic settings (:func:`planners.budget.deterministic_cp_sat`), so the same model
and budget give the same placement on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from planners.budget import deterministic_cp_sat
from planners.graph import TaskGraph
from planners.placement.model import Node
from planners.placement.state import _canonical, _Problem, _State

_SCALE = 1000  # CP-SAT works on integers: milli-seconds and milli-cores


def _ceil_int(x: float) -> tuple[int, bool]:
    y = x * _SCALE
    r = round(y)
    return (int(r), True) if abs(y - r) < 1e-6 else (math.ceil(y), False)


def _floor_int(x: float) -> tuple[int, bool]:
    y = x * _SCALE
    r = round(y)
    return (int(r), True) if abs(y - r) < 1e-6 else (math.floor(y), False)


@dataclass(frozen=True)
class _Scaled:
    """The instance in integers: latencies and weights rounded up, capacities and bound down."""

    t: list[int]
    w: list[int]
    cap: list[int]
    r: int
    exact: bool
    """Whether every value scaled without rounding (needed to claim optimality)."""


def _scale(graph: TaskGraph, slots: Sequence[Node], bound: float) -> _Scaled:
    """Scale the instance to integers against feasibility (every model solution is valid)."""
    exact = True

    def scaled(values: Iterable[float], rounding: Callable[[float], tuple[int, bool]]) -> list[int]:
        nonlocal exact
        out = []
        for value in values:
            v, ok = rounding(value)
            out.append(v)
            exact &= ok
        return out

    t_int = scaled(graph.latency, _ceil_int)
    w_int = scaled(graph.weight, _ceil_int)
    cap_int = scaled((s.cpu for s in slots), _floor_int)
    (r_int,) = scaled([bound], _floor_int)
    return _Scaled(t_int, w_int, cap_int, r_int, exact)


@dataclass
class _ExactResult:
    where: dict[int, int]
    flags: list[bool]
    proven: bool


def _add_nodes(model: Any, n: int, sc: _Scaled, uniform: bool) -> tuple[list[list[Any]], list[Any]]:
    """``x[i][j]`` (task i on node j) and ``y[j]`` (node j used), within capacity.

    On a ``uniform`` (on-demand) pool the nodes are interchangeable: they open in
    order and task ``i`` goes to one of the first ``i + 1``, which breaks the symmetry.
    """
    m_slots = len(sc.cap)
    x = [[model.new_bool_var(f"x{i}_{j}") for j in range(m_slots)] for i in range(n)]
    y = [model.new_bool_var(f"y{j}") for j in range(m_slots)]
    for i in range(n):
        model.add_exactly_one(x[i])
        for j in range(m_slots):
            if sc.w[i] > sc.cap[j]:
                model.add(x[i][j] == 0)
            model.add_implication(x[i][j], y[j])
    for j in range(m_slots):
        model.add(sum(sc.w[i] * x[i][j] for i in range(n)) <= sc.cap[j] * y[j])
    if uniform:
        for j in range(m_slots - 1):
            model.add_implication(y[j + 1], y[j])
        for i in range(n):
            for j in range(i + 1, m_slots):
                model.add(x[i][j] == 0)
    return x, y


def _failure_columns(model: Any, x: list[list[Any]], slots: Sequence[Node]) -> list[list[Any]]:
    """Per failure group (a node, or a whole domain), whether each task is in it."""
    n = len(x)
    keys: dict[str, list[int]] = {}
    for j, s in enumerate(slots):
        keys.setdefault(s.domain if s.domain is not None else f"\0{s.name}", []).append(j)
    z: list[list[Any]] = []
    for members in keys.values():
        if len(members) == 1:
            z.append([x[i][members[0]] for i in range(n)])
        else:
            col = []
            for i in range(n):
                b = model.new_bool_var("")
                model.add(b == sum(x[i][j] for j in members))
                col.append(b)
            z.append(col)
    return z


def _add_latencies(
    model: Any,
    graph: TaskGraph,
    z: list[list[Any]],
    sc: _Scaled,
    mvars: list[Any] | None,
    fixed: Sequence[bool],
) -> None:
    """``L[g, v]`` per failure group and task, kept within the bound for failed tasks.

    ``mvars`` are the backup variables of a joint model (``None``: the backups are
    ``fixed``).
    """
    n = len(graph)
    ub = sum(sc.t)
    for col in z:
        lvar = [model.new_int_var(sc.t[v], max(ub, sc.t[v]), "") for v in range(n)]
        for v in range(n):
            model.add(lvar[v] <= sc.r).only_enforce_if(col[v])
            for u in graph.preds[v]:
                ct = lvar[v] >= sc.t[v] + lvar[u]
                if mvars is not None:
                    model.add(ct).only_enforce_if(col[u])
                    model.add(ct).only_enforce_if(mvars[u].negated())
                elif fixed[u]:
                    model.add(ct).only_enforce_if(col[u])
                else:
                    model.add(ct)


def _add_hint(
    model: Any,
    x: list[list[Any]],
    y: list[Any],
    slots: Sequence[Node],
    hint: _State,
    uniform: bool,
) -> None:
    """Start the search from ``hint``'s placement."""
    n, m_slots = len(x), len(slots)
    if uniform:
        canon = _canonical(hint, slots)
    else:  # the hint's slots may be more than the model's (see search._exact_slots)
        at = {s.name: j for j, s in enumerate(slots)}
        canon = {i: at[hint.slots[k].name] for i, k in hint.where.items()}
    used = set(canon.values())
    for i in range(n):
        for j in range(m_slots):
            model.add_hint(x[i][j], int(canon.get(i) == j))
    for j in range(m_slots):
        model.add_hint(y[j], int(j in used))


def _cp_sat(
    prob: _Problem,
    slots: Sequence[Node],
    hint: _State | None,
    hint_flags: Sequence[bool] | None,
    time_limit: float,
    joint: bool,
) -> _ExactResult | None:
    """Solve the placement (and, if ``joint``, the backups) exactly with CP-SAT.

    Variables: ``x[i, j]`` task i on node j, ``y[j]`` node used, ``m[i]`` backups
    (joint only), and ``L[g, v]`` the recovery latency of ``v`` when failure
    group ``g`` (a node, or a whole domain) fails. For an edge ``u → v``,
    ``L[g, v] ≥ t_v + L[g, u]`` is enforced when ``u`` fails with ``g`` or keeps
    no backup, and ``L[g, v] ≤ R`` when ``v`` is in ``g``: exactly the
    failure-effect model. Latencies and CPU are scaled to integers
    conservatively (rounded against feasibility), so every model solution is a
    valid plan; optimality is claimed only when the scaling was exact.
    """
    from ortools.sat.python import cp_model

    graph = prob.graph
    n, m_slots = len(graph), len(slots)
    sc = _scale(graph, slots, prob.bound)
    model = cp_model.CpModel()
    uniform = prob.pool.unbounded
    x, y = _add_nodes(model, n, sc, uniform)
    z = _failure_columns(model, x, slots)
    has_succ = [bool(s) for s in graph.succs]
    mvars: list[Any] = []
    if joint:
        for i in range(n):
            mvars.append(model.new_bool_var(f"m{i}") if has_succ[i] else model.new_constant(0))
    _add_latencies(model, graph, z, sc, mvars if joint else None, list(prob.flags))

    n_used = sum(y)
    if joint:
        model.minimize((n + 1) * n_used + sum(mvars))
    else:
        model.minimize(n_used)
    if hint is not None:
        _add_hint(model, x, y, slots, hint, uniform)
        if joint and hint_flags is not None:
            for i in range(n):
                if has_succ[i]:
                    model.add_hint(mvars[i], int(bool(hint_flags[i])))

    solver = cp_model.CpSolver()
    deterministic_cp_sat(solver.parameters, time_limit)
    status = solver.solve(model)
    prob.budget.spend_cp_sat(solver.response_proto.deterministic_time)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    where = {i: next(j for j in range(m_slots) if solver.value(x[i][j])) for i in range(n)}
    flags = [bool(solver.value(mvars[i])) for i in range(n)] if joint else list(prob.flags)
    return _ExactResult(where, flags, proven=status == cp_model.OPTIMAL and sc.exact)
