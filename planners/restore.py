"""Restoring the bound with the fewest moved tasks, in steps that never make things worse.

Why this module exists: after a recovery onto too little capacity (or a drain, a
spec change that could not be fully applied, nodes leaving) the tasks all run,
but the placement breaks the recovery-latency bound. When capacity returns, a
fresh plan would restore the bound but restart most pods; every moved pod is a
task replaying from its last checkpoint. So the restore is two pure steps:

1. :func:`min_migration`: the valid placement (capacity, and the bound for every
   single-node or failure-domain loss under the failure-effect model) that moves
   the fewest tasks away from where they run now. It is a CP-SAT model (the
   same latency encoding as the exact placement) whose objective counts moved
   tasks first and used nodes second; the heuristic re-plan of
   :func:`planners.migration.place_min_migration` is its starting hint, so a
   valid answer exists whenever that re-plan finds one.
2. :func:`move_schedule`: the moves in small batches, each batch chosen so that
   the worst single-node recovery after it is no worse than before it (and,
   once the bound holds, never broken again). A restore stops early as soon as
   the bound holds.

Both are deterministic (:mod:`planners.budget`): CP-SAT with a fixed seed, one
worker and a deterministic time limit; the schedule is a greedy pass in task
order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planners.budget import deterministic_cp_sat
from planners.errors import Infeasible
from planners.evaluate import node_failure_latency, worst_node_failure
from planners.graph import TaskGraph
from planners.migration import relabel_nodes
from planners.placement import Node, NodePool, place
from planners.placement_cpsat import _ceil_int, _floor_int

__all__ = [
    "Migration",
    "RestorePlan",
    "RestoreStep",
    "min_migration",
    "move_schedule",
    "plan_restore",
]

_EPS = 1e-9
RESTORE_BATCH = 2
"""Default number of tasks moved per step of a restore: a few at a time, never all at once."""


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


@dataclass(frozen=True)
class RestoreStep:
    """One batch of a restore: the moves, and the worst single-node recovery after them."""

    moves: dict[str, str]
    worst: float


@dataclass(frozen=True)
class RestorePlan:
    """Where a restore goes and how it gets there."""

    assignment: dict[str, str]
    """The final placement (the migration target, or an earlier state that keeps the bound)."""
    moved: tuple[str, ...]
    steps: tuple[RestoreStep, ...]
    worst_before: float
    worst: float
    proven: bool


def _group_columns(nodes: Sequence[Node]) -> list[list[int]]:
    """Failure groups as lists of node indices: one per node, or one per domain."""
    keys: dict[str, list[int]] = {}
    for j, node in enumerate(nodes):
        keys.setdefault(node.domain if node.domain is not None else f"\0{node.name}", []).append(j)
    return list(keys.values())


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
    exact = True

    def scaled(values: Iterable[float], rounding: Any) -> list[int]:
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
    ub = max(sum(t_int), 1)

    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{j}") for j in range(m)] for i in range(n)]
    y = [model.new_bool_var(f"y{j}") for j in range(m)]
    for i in range(n):
        model.add_exactly_one(x[i])
        for j in range(m):
            if w_int[i] > cap_int[j]:
                model.add(x[i][j] == 0)
            model.add_implication(x[i][j], y[j])
    for j in range(m):
        model.add(sum(w_int[i] * x[i][j] for i in range(n)) <= cap_int[j])
    if max_nodes is not None:
        model.add(sum(y) <= max_nodes)
    for members in _group_columns(slots):
        if len(members) == 1:
            col = [x[i][members[0]] for i in range(n)]
        else:
            col = []
            for i in range(n):
                in_group = model.new_bool_var("")
                model.add(in_group == sum(x[i][j] for j in members))
                col.append(in_group)
        lvar = [model.new_int_var(t_int[v], max(ub, t_int[v]), "") for v in range(n)]
        for v in range(n):
            model.add(lvar[v] <= r_int).only_enforce_if(col[v])
            for u in graph.preds[v]:
                ct = model.add(lvar[v] >= t_int[v] + lvar[u])
                if flags[u]:
                    ct.only_enforce_if(col[u])

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
        proven=status == cp_model.OPTIMAL and exact,
    )


class _Worst:
    """``H(K_p)`` per node, updated for the two nodes a move touches."""

    def __init__(
        self, graph: TaskGraph, backups: list[str] | None, assignment: Mapping[str, str]
    ) -> None:
        self.graph, self.backups = graph, backups
        self.members: dict[str, set[str]] = {}
        for task, node in assignment.items():
            self.members.setdefault(node, set()).add(task)
        self.h = {node: self._h(ts) for node, ts in self.members.items()}

    def _h(self, tasks: set[str]) -> float:
        return node_failure_latency(self.graph, self.backups, tasks)

    def worst(self) -> float:
        return max(self.h.values(), default=0.0)

    def trial(self, state: Mapping[str, str], moves: Mapping[str, str]) -> float:
        """The worst single-node failure if ``moves`` were applied to ``state``."""
        touched: dict[str, set[str]] = {}
        for task, node in moves.items():
            for p in (state.get(task), node):
                if p is not None and p not in touched:
                    touched[p] = set(self.members.get(p, set()))
            old = state.get(task)
            if old is not None:
                touched[old].discard(task)
            touched[node].add(task)
        h = dict(self.h)
        for p, tasks in touched.items():
            h[p] = self._h(tasks)
        return max(h.values(), default=0.0)

    def apply(self, state: dict[str, str], moves: Mapping[str, str]) -> None:
        for task, node in moves.items():
            old = state.get(task)
            if old is not None:
                self.members[old].discard(task)
                self.h[old] = self._h(self.members[old])
            self.members.setdefault(node, set()).add(task)
            self.h[node] = self._h(self.members[node])
            state[task] = node


def move_schedule(
    graph: TaskGraph,
    current: Mapping[str, str],
    target: Mapping[str, str],
    *,
    backups: Iterable[str] | None,
    capacity: Mapping[str, float],
    bound: float,
    batch: int = RESTORE_BATCH,
    stop_early: bool = True,
) -> list[RestoreStep]:
    """Order the moves from ``current`` to ``target`` into batches of at most ``batch``.

    Rule for every step, checked with the failure-effect evaluator: the worst
    single-node recovery after it is at most ``max(worst before it, bound)``;
    so while the bound is broken it never gets worse, and once it holds it is
    never broken again. Each batch also fits ``capacity`` once it has landed.
    Moves are added to a batch one at a time, the one with the lowest
    resulting worst first (task order breaks ties), so every prefix of a batch
    obeys the rule too. If no single move may go next, a pair is tried, then
    all remaining moves together (the target keeps the bound, so that last
    step is always allowed). When ``current`` broke the bound and a step
    restores it, the schedule stops there (unless ``stop_early`` is false: with
    failure domains, the single-node bound is not the whole guarantee).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> steps = move_schedule(g, {"a": "n1", "b": "n1", "c": "n1"},
    ...                       {"a": "n1", "b": "n2", "c": "n2"}, backups=["b"],
    ...                       capacity={"n1": 3, "n2": 3}, bound=2)
    >>> [(s.moves, s.worst) for s in steps]
    [({'b': 'n2'}, 2.0)]

    Notes
    -----
    O(k² · (V + E)) for k moves (each candidate re-evaluates the two nodes it touches).
    """
    blist = None if backups is None else list(backups)
    todo = [t for t in graph.tasks if current.get(t) != target[t]]
    lost = {t for t in todo if current.get(t) not in capacity}
    state = {t: n for t, n in current.items() if t in graph._index and t not in lost}
    cache = _Worst(graph, blist, state)
    steps: list[RestoreStep] = []
    broken = bool(lost) or cache.worst() > bound + _EPS
    load: dict[str, float] = {}
    for t, node in state.items():
        load[node] = load.get(node, 0.0) + graph.weight[graph.index(t)]

    def fits(moves: Mapping[str, str]) -> bool:
        new = dict(load)
        for t, node in moves.items():
            w = graph.weight[graph.index(t)]
            if t in state:
                new[state[t]] -= w
            new[node] = new.get(node, 0.0) + w
        grown = {node for node in moves.values()}  # a node that only loses tasks may stay over
        return all(new[p] <= capacity.get(p, 0.0) + _EPS for p in grown)

    def restored() -> bool:
        """Whether the state already keeps the bound within capacity (the rest is not needed)."""
        fits_all = all(v <= capacity.get(p, 0.0) + _EPS for p, v in load.items() if v > _EPS)
        return stop_early and broken and not lost and fits_all and cache.worst() <= bound + _EPS

    while todo and not restored():
        chosen: dict[str, str] = {}
        limit = max(cache.worst(), bound) + _EPS
        while len(chosen) < batch:
            best: tuple[float, str] | None = None
            # tasks not running anywhere come back first, as soon as they fit
            back = [
                t for t in todo if t in lost and t not in chosen and fits({**chosen, t: target[t]})
            ]
            if back:
                best = (cache.trial(state, {**chosen, back[0]: target[back[0]]}), back[0])
            for t in [] if back else todo:
                if t in chosen:
                    continue
                trial = {**chosen, t: target[t]}
                if not fits(trial):
                    continue
                h = cache.trial(state, trial)
                if h <= limit and (best is None or h < best[0] - _EPS):
                    best = (h, t)
            if best is None:
                break
            chosen[best[1]] = target[best[1]]
            limit = max(best[0], bound) + _EPS
        if not chosen:
            for k, a in enumerate(todo):
                for b in todo[k + 1 :]:
                    trial = {a: target[a], b: target[b]}
                    if fits(trial) and cache.trial(state, trial) <= limit:
                        chosen = trial
                        break
                if chosen:
                    break
        if not chosen:
            chosen = {t: target[t] for t in todo}
        for t, node in chosen.items():
            w = graph.weight[graph.index(t)]
            if t in state:
                load[state[t]] -= w
            load[node] = load.get(node, 0.0) + w
        cache.apply(state, chosen)
        steps.append(RestoreStep(chosen, cache.worst()))
        todo = [t for t in todo if t not in chosen]
        lost -= set(chosen)
    return steps


def _heuristic_hint(
    graph: TaskGraph,
    nodes: Sequence[Node],
    current: Mapping[str, str],
    *,
    bound: float,
    backups: list[str] | None,
    time_limit: float,
) -> dict[str, str] | None:
    """A valid start for the search: a fresh placement, renamed onto where tasks run now."""
    pool = NodePool.of(nodes)
    try:
        fresh = place(graph, pool, bound=bound, backups=backups, time_limit=time_limit / 2)
    except Infeasible:
        return None
    if pool.domains():
        return dict(fresh.assignment)
    return relabel_nodes(fresh, graph, pool.nodes, current)


def plan_restore(
    graph: TaskGraph,
    nodes: Sequence[Node],
    current: Mapping[str, str],
    *,
    bound: float,
    backups: Iterable[str] | None,
    hint: Mapping[str, str] | None = None,
    time_limit: float = 2.0,
    batch: int = RESTORE_BATCH,
) -> RestorePlan:
    """A minimum-migration target and the safe batches that reach it (see the module doc).

    Without a ``hint``, a fresh heuristic placement (:func:`planners.placement.place`
    with ``backups``) renamed onto the nodes where its groups' tasks run is the
    search's start; if the search finds nothing within its budget, that
    placement is the target (``proven`` false).

    Raises
    ------
    Infeasible
        No placement on ``nodes`` keeps the bound (wait for more capacity).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = plan_restore(g, [Node("n1", 3), Node("n2", 3)],
    ...                  {"a": "n1", "b": "n1", "c": "n1"}, bound=2, backups=["a", "b"])
    >>> p.worst_before, p.worst <= 2, len(p.moved), len(p.steps)
    (3.0, True, 1, 1)
    """
    blist = None if backups is None else list(backups)
    if hint is None:
        hint = _heuristic_hint(
            graph, nodes, current, bound=bound, backups=blist, time_limit=time_limit
        )
    try:
        mig = min_migration(
            graph, nodes, current, bound=bound, backups=blist, hint=hint, time_limit=time_limit
        )
    except Infeasible:
        if hint is None:
            raise
        mig = Migration(  # the search ran out of budget: the heuristic plan still keeps the bound
            assignment=dict(hint),
            moved=tuple(t for t in graph.tasks if current.get(t) != hint[t]),
            worst=worst_node_failure(graph, blist, hint)[0],
            proven=False,
        )
    usable = {n.name for n in nodes}
    placed = {t: n for t, n in current.items() if n in usable}
    before = worst_node_failure(graph, blist, placed)[0] if len(placed) == len(graph) else 0.0
    steps = move_schedule(
        graph,
        current,
        mig.assignment,
        backups=blist,
        capacity={n.name: n.cpu for n in nodes},
        bound=bound,
        batch=batch,
        stop_early=all(n.domain is None for n in nodes),
    )
    final = dict(current)
    for step in steps:
        final.update(step.moves)
    final = {t: final[t] for t in graph.tasks}
    return RestorePlan(
        assignment=final,
        moved=tuple(t for t in graph.tasks if current.get(t) != final[t]),
        steps=tuple(steps),
        worst_before=before,
        worst=worst_node_failure(graph, blist, final)[0],
        proven=mig.proven and final == mig.assignment,
    )
