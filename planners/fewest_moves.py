"""The valid placement that moves the fewest running tasks: a CP-SAT model.

Every moved task restarts from its last checkpoint, so both the operator's re-plan
(:func:`planners.migration.place_min_migration`) and the restore of a broken bound
(:func:`planners.restore.plan_restore`) search for the valid placement closest to
the one in force. The model uses the latency encoding of the exact placement
(:mod:`planners.placement.cpsat`) and counts moved tasks first and used nodes
second. The solver runs with deterministic settings (:mod:`planners.budget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planners.budget import deterministic_cp_sat
from planners.errors import Infeasible
from planners.evaluate import worst_node_failure
from planners.graph import TaskGraph
from planners.placement import Node
from planners.placement.cpsat import _scale, _Scaled

__all__ = ["Migration", "min_migration"]


@dataclass(frozen=True)
class Migration:
    """A valid placement and the tasks it moves away from the current one."""

    assignment: dict[str, str]
    moved: tuple[str, ...]
    """Tasks whose node differs from the current assignment, in task order."""
    worst: float
    """Worst single-node failure of ``assignment`` (failure-effect model)."""
    proven: bool
    """Whether CP-SAT proved ``len(moved)`` minimal (exact integer scaling, status OPTIMAL)."""


def _group_columns(nodes: Sequence[Node]) -> list[list[int]]:
    """Failure groups as lists of node indices: one per node, or one per domain."""
    keys: dict[str, list[int]] = {}
    for j, node in enumerate(nodes):
        keys.setdefault(node.domain if node.domain is not None else f"\0{node.name}", []).append(j)
    return list(keys.values())


def _add_placement(
    model: Any, n: int, sc: _Scaled, max_nodes: int | None
) -> tuple[list[list[Any]], list[Any]]:
    """``x[i][j]`` (task i on node j) and ``y[j]`` (node j used), within capacity."""
    m = len(sc.cap)
    x = [[model.new_bool_var(f"x{i}_{j}") for j in range(m)] for i in range(n)]
    y = [model.new_bool_var(f"y{j}") for j in range(m)]
    for i in range(n):
        model.add_exactly_one(x[i])
        for j in range(m):
            if sc.w[i] > sc.cap[j]:
                model.add(x[i][j] == 0)
            model.add_implication(x[i][j], y[j])
    for j in range(m):
        model.add(sum(sc.w[i] * x[i][j] for i in range(n)) <= sc.cap[j])
    if max_nodes is not None:
        model.add(sum(y) <= max_nodes)
    return x, y


def _add_bound(
    model: Any,
    graph: TaskGraph,
    x: list[list[Any]],
    slots: Sequence[Node],
    sc: _Scaled,
    flags: Sequence[bool],
) -> None:
    """Every failure group's loss keeps the bound (the failure-effect model)."""
    n = len(graph)
    ub = max(sum(sc.t), 1)
    for members in _group_columns(slots):
        if len(members) == 1:
            col = [x[i][members[0]] for i in range(n)]
        else:
            col = []
            for i in range(n):
                in_group = model.new_bool_var("")
                model.add(in_group == sum(x[i][j] for j in members))
                col.append(in_group)
        lvar = [model.new_int_var(sc.t[v], max(ub, sc.t[v]), "") for v in range(n)]
        for v in range(n):
            model.add(lvar[v] <= sc.r).only_enforce_if(col[v])
            for u in graph.preds[v]:
                ct = model.add(lvar[v] >= sc.t[v] + lvar[u])
                if flags[u]:
                    ct.only_enforce_if(col[u])


def _add_objective(
    model: Any,
    graph: TaskGraph,
    x: list[list[Any]],
    y: list[Any],
    slots: Sequence[Node],
    current: Mapping[str, str],
    hint: Mapping[str, str] | None,
) -> None:
    """Minimise moved tasks first, used nodes second, starting from ``hint``."""
    n, m = len(graph), len(slots)
    where = {s.name: j for j, s in enumerate(slots)}
    stay = [
        x[i][where[current[task]]]
        for i, task in enumerate(graph.tasks)
        if current.get(task) in where
    ]
    moved_expr = n - sum(stay)
    model.minimize((m + 1) * moved_expr + sum(y))
    if hint:
        for i, task in enumerate(graph.tasks):
            for j, s in enumerate(slots):
                model.add_hint(x[i][j], int(hint.get(task) == s.name))
        for j, s in enumerate(slots):
            model.add_hint(y[j], int(s.name in set(hint.values())))


def min_migration(
    graph: TaskGraph,
    nodes: Iterable[Node],
    current: Mapping[str, str],
    *,
    bound: float,
    backups: Iterable[str] | None,
    hint: Mapping[str, str] | None = None,
    time_limit: float = 2.0,
    max_nodes: int | None = None,
) -> Migration:
    """The valid placement that moves the fewest tasks away from ``current``.

    Valid means: every task on one of ``nodes``, no node over its CPU, and every
    single-node failure (every domain failure, when nodes carry domains) keeps
    ``bound`` under ``backups`` (``None``: every task keeps one).

    Parameters
    ----------
    graph:
        The task DAG.
    nodes:
        The usable nodes, with the CPU available to this topology.
    current:
        ``{task: node}`` now; tasks on a node not in ``nodes`` (or missing) move anyway.
    bound:
        The recovery-latency bound ``R`` in seconds.
    backups:
        The backups in force (kept: changing a task's role restarts it too).
    hint:
        A valid placement to start from (e.g. the heuristic re-plan); optional.
    time_limit:
        Nominal seconds of CP-SAT work (deterministic).
    max_nodes:
        At most this many nodes used (consolidation); ``None``: no limit.

    Returns
    -------
    Migration

    Raises
    ------
    Infeasible
        No valid placement was found within the budget.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> m = min_migration(g, [Node("n1", 3), Node("n2", 3)],
    ...                   {"a": "n1", "b": "n1", "c": "n1"}, bound=2, backups=["a", "b"])
    >>> len(m.moved), m.worst <= 2, m.proven
    (1, True, True)

    Notes
    -----
    ``x[i, j]`` task i on node j; ``L[g, v]`` the recovery latency of ``v`` when
    failure group ``g`` fails, with ``L[g, v] ≥ t_v + L[g, u]`` for an edge
    ``u → v`` whenever ``u`` fails with ``g`` or keeps no backup, and
    ``L[g, v] ≤ R`` when ``v`` is in ``g``: the failure-effect model, scaled to
    integers against feasibility (optimality is claimed only when the scaling
    is exact). Size O(|groups| · (V + E) + V · nodes).
    """
    from ortools.sat.python import cp_model

    slots = sorted(nodes, key=lambda n: n.name)
    if not slots:
        raise Infeasible("no usable node")
    n, m = len(graph), len(slots)
    flags = [True] * n if backups is None else [False] * n
    for b in backups or ():
        flags[graph.index(b)] = True
    sc = _scale(graph, slots, bound)

    model = cp_model.CpModel()
    x, y = _add_placement(model, n, sc, max_nodes)
    _add_bound(model, graph, x, slots, sc, flags)
    _add_objective(model, graph, x, y, slots, current, hint)

    solver = cp_model.CpSolver()
    deterministic_cp_sat(solver.parameters, time_limit)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise Infeasible(
            f"no placement on {m} nodes keeps the bound {bound:g}s"
            + (" (proven)" if status == cp_model.INFEASIBLE else " within the budget")
        )
    assignment = {
        task: slots[next(j for j in range(m) if solver.value(x[i][j]))].name
        for i, task in enumerate(graph.tasks)
    }
    moved = tuple(t for t in graph.tasks if current.get(t) != assignment[t])
    blist = None if backups is None else list(backups)
    return Migration(
        assignment=assignment,
        moved=moved,
        worst=worst_node_failure(graph, blist, assignment)[0],
        proven=status == cp_model.OPTIMAL and sc.exact,
    )
