"""Restoring the bound with the fewest moved tasks, in steps that never make things worse.

After a recovery onto too little capacity (or a drain, a spec change that could not
be fully applied, nodes leaving) the tasks all run, but the placement breaks the
recovery-latency bound. When capacity returns, a fresh plan would restore the bound but
restart most pods; every moved pod is a task replaying from its last checkpoint. So the
restore is two pure steps:

1. :func:`~planners.fewest_moves.min_migration`: the valid placement (capacity, and the
   bound for every single-node or failure-domain loss under the failure-effect model)
   that moves the fewest tasks away from where they run now. It is a CP-SAT model (the
   same latency encoding as the exact placement) whose objective counts moved tasks
   first and used nodes second; the heuristic re-plan of
   :func:`planners.migration.place_min_migration` is its starting hint, so a valid
   answer exists whenever that re-plan finds one.
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

from planners.errors import Infeasible
from planners.evaluate import node_failure_latency, worst_node_failure
from planners.fewest_moves import Migration, min_migration
from planners.graph import TaskGraph
from planners.migration import relabel_nodes
from planners.placement import Node, NodePool, place

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


class _Schedule:
    """A restore in progress: where tasks run, the nodes' loads, the moves still to make."""

    def __init__(
        self,
        graph: TaskGraph,
        current: Mapping[str, str],
        target: Mapping[str, str],
        backups: Iterable[str] | None,
        capacity: Mapping[str, float],
    ) -> None:
        blist = None if backups is None else list(backups)
        self.graph, self.target, self.capacity = graph, target, capacity
        self.todo = [t for t in graph.tasks if current.get(t) != target[t]]
        # tasks not running on a usable node: they come back first, as soon as they fit
        self.lost = {t for t in self.todo if current.get(t) not in capacity}
        self.state = {t: n for t, n in current.items() if t in graph._index and t not in self.lost}
        self.cache = _Worst(graph, blist, self.state)
        self.load: dict[str, float] = {}
        for t, node in self.state.items():
            self.load[node] = self.load.get(node, 0.0) + graph.weight[graph.index(t)]

    def fits(self, moves: Mapping[str, str]) -> bool:
        """Whether every node ``moves`` adds tasks to stays within its capacity."""
        new = dict(self.load)
        for t, node in moves.items():
            w = self.graph.weight[self.graph.index(t)]
            if t in self.state:
                new[self.state[t]] -= w
            new[node] = new.get(node, 0.0) + w
        grown = {node for node in moves.values()}  # a node that only loses tasks may stay over
        return all(new[p] <= self.capacity.get(p, 0.0) + _EPS for p in grown)

    def restored(self, bound: float) -> bool:
        """Whether the state keeps the bound within capacity (the rest is not needed)."""
        cap = self.capacity
        fits_all = all(v <= cap.get(p, 0.0) + _EPS for p, v in self.load.items() if v > _EPS)
        return not self.lost and fits_all and self.cache.worst() <= bound + _EPS

    def _best_next(self, chosen: Mapping[str, str], limit: float) -> tuple[float, str] | None:
        """The move to add to ``chosen``: a lost task that fits, else the lowest worst."""
        target, state = self.target, self.state
        back = [
            t
            for t in self.todo
            if t in self.lost and t not in chosen and self.fits({**chosen, t: target[t]})
        ]
        if back:
            return (self.cache.trial(state, {**chosen, back[0]: target[back[0]]}), back[0])
        best: tuple[float, str] | None = None
        for t in self.todo:
            if t in chosen:
                continue
            trial = {**chosen, t: target[t]}
            if not self.fits(trial):
                continue
            h = self.cache.trial(state, trial)
            if h <= limit and (best is None or h < best[0] - _EPS):
                best = (h, t)
        return best

    def _pair(self, limit: float) -> dict[str, str]:
        """The first pair of moves that fits and keeps ``limit`` (empty: none does)."""
        target, todo = self.target, self.todo
        for k, a in enumerate(todo):
            for b in todo[k + 1 :]:
                trial = {a: target[a], b: target[b]}
                if self.fits(trial) and self.cache.trial(self.state, trial) <= limit:
                    return trial
        return {}

    def next_batch(self, batch: int, bound: float) -> dict[str, str]:
        """The next step's moves (see :func:`move_schedule` for the rule)."""
        chosen: dict[str, str] = {}
        limit = max(self.cache.worst(), bound) + _EPS
        while len(chosen) < batch:
            best = self._best_next(chosen, limit)
            if best is None:
                break
            chosen[best[1]] = self.target[best[1]]
            limit = max(best[0], bound) + _EPS
        if not chosen:
            chosen = self._pair(limit)
        if not chosen:
            chosen = {t: self.target[t] for t in self.todo}
        return chosen

    def apply(self, chosen: Mapping[str, str]) -> None:
        """Make the moves: loads, the worst recovery, and what is left to do."""
        for t, node in chosen.items():
            w = self.graph.weight[self.graph.index(t)]
            if t in self.state:
                self.load[self.state[t]] -= w
            self.load[node] = self.load.get(node, 0.0) + w
        self.cache.apply(self.state, chosen)
        self.todo = [t for t in self.todo if t not in chosen]
        self.lost -= set(chosen)


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
    sched = _Schedule(graph, current, target, backups, capacity)
    broken = bool(sched.lost) or sched.cache.worst() > bound + _EPS
    steps: list[RestoreStep] = []
    while sched.todo and not (stop_early and broken and sched.restored(bound)):
        chosen = sched.next_batch(batch, bound)
        sched.apply(chosen)
        steps.append(RestoreStep(chosen, sched.cache.worst()))
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
