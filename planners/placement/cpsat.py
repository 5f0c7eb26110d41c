"""The exact placement model: CP-SAT over node choice, node use and per-group latencies.

The exact search (:mod:`planners.placement.search`) and the joint plan
(:mod:`planners.placement.joint`) call it; nothing here is public. The solver runs with
deterministic settings (:func:`planners.budget.deterministic_cp_sat`), so the same model
and budget give the same placement on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planners.budget import deterministic_cp_sat
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


@dataclass
class _ExactResult:
    where: dict[int, int]
    flags: list[bool]
    proven: bool


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
    t_int: list[int] = []
    exact = True
    for t in graph.latency:
        v, ok = _ceil_int(t)
        t_int.append(v)
        exact &= ok
    r_int, ok = _floor_int(prob.bound)
    exact &= ok
    w_int: list[int] = []
    for w in graph.weight:
        v, ok = _ceil_int(w)
        w_int.append(v)
        exact &= ok
    cap_int: list[int] = []
    for s in slots:
        v, ok = _floor_int(s.cpu)
        cap_int.append(v)
        exact &= ok
    ub = sum(t_int)

    model = cp_model.CpModel()
    uniform = prob.pool.unbounded
    x = [[model.new_bool_var(f"x{i}_{j}") for j in range(m_slots)] for i in range(n)]
    y = [model.new_bool_var(f"y{j}") for j in range(m_slots)]
    for i in range(n):
        model.add_exactly_one(x[i])
        for j in range(m_slots):
            if w_int[i] > cap_int[j]:
                model.add(x[i][j] == 0)
            model.add_implication(x[i][j], y[j])
    for j in range(m_slots):
        model.add(sum(w_int[i] * x[i][j] for i in range(n)) <= cap_int[j] * y[j])
    if uniform:
        for j in range(m_slots - 1):
            model.add_implication(y[j + 1], y[j])
        for i in range(n):
            for j in range(i + 1, m_slots):
                model.add(x[i][j] == 0)

    # failure groups: a node, or a whole domain
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

    has_succ = [bool(s) for s in graph.succs]
    mvars: list[Any] = []
    if joint:
        for i in range(n):
            mvars.append(model.new_bool_var(f"m{i}") if has_succ[i] else model.new_constant(0))
    fixed = list(prob.flags)
    for col in z:
        lvar = [model.new_int_var(t_int[v], max(ub, t_int[v]), "") for v in range(n)]
        for v in range(n):
            model.add(lvar[v] <= r_int).only_enforce_if(col[v])
            for u in graph.preds[v]:
                ct = lvar[v] >= t_int[v] + lvar[u]
                if joint:
                    model.add(ct).only_enforce_if(col[u])
                    model.add(ct).only_enforce_if(mvars[u].negated())
                elif fixed[u]:
                    model.add(ct).only_enforce_if(col[u])
                else:
                    model.add(ct)

    n_used = sum(y)
    if joint:
        model.minimize((n + 1) * n_used + sum(mvars))
    else:
        model.minimize(n_used)

    if hint is not None:
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
    return _ExactResult(where, flags, proven=status == cp_model.OPTIMAL and exact)
