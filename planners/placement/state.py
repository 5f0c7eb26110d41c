"""The packing state every placement algorithm works on, and the shared checks."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from planners.budget import WorkBudget
from planners.errors import Infeasible, PlannerError
from planners.evaluate import (
    backup_flags,
    check_plan,
    worst_correlated_failure,
    worst_node_failure,
    worst_task_failure,
)
from planners.graph import TaskGraph
from planners.placement.model import _EPS, Node, NodePool, Placement
from planners.placement.orders import _height_order, _rtap_groups, _wud_order

# ------------------------------------------------------------------ the evaluator


class _Latency:
    """``H(F)`` for small failure sets, touching only the tasks that matter.

    Same model as :mod:`planners.evaluate`, but restricted to ``F`` plus the
    healthy tasks without backups that ``F`` reads through (they recompute), so
    that a packing step costs O(|F| + its edges) instead of O(V + E).

    Why sets: the tasks ``ℓ(v)`` depends on are exactly ``preds(v) ∩ relevant``
    (a pred counts when it failed or keeps no buffer, and those are the relevant
    ones), so each step is one C-level set intersection instead of a Python loop
    over every upstream task; a shuffle's consumer reads hundreds of them. Flags
    change only through :meth:`set_flag`, which keeps the set of tasks without
    backups current.
    """

    def __init__(
        self, graph: TaskGraph, flags: Sequence[bool], work: WorkBudget | None = None
    ) -> None:
        self.preds = graph.preds
        self.predset = graph.pred_sets
        self.t = graph.latency
        self.flags = list(flags)
        self.unflagged = {u for u, f in enumerate(self.flags) if not f}
        self.work = work if work is not None else WorkBudget(0.0)

    def set_flag(self, u: int, value: bool) -> None:
        """Give task ``u`` a backup (``True``) or take it away."""
        self.flags[u] = value
        if value:
            self.unflagged.discard(u)
        else:
            self.unflagged.add(u)

    def relevant(self, fail: set[int]) -> set[int]:
        """``fail`` plus the healthy tasks without backups it reads through, transitively."""
        unflagged = self.unflagged
        if not unflagged:
            return fail
        predset = self.predset
        relevant = set(fail)
        stack = list(fail)
        while stack:
            new = (predset[stack.pop()] & unflagged) - relevant
            if new:
                relevant |= new
                stack.extend(new)
        return relevant

    def h(self, members: Iterable[int]) -> float:
        fail = members if isinstance(members, set) else set(members)
        if not fail:
            return 0.0
        return self.h_relevant(fail, self.relevant(fail))

    def h_relevant(self, fail: set[int], relevant: set[int]) -> float:
        """``H(fail)`` given its relevant set (:meth:`relevant`)."""
        ell = self.ell(relevant)
        return max(map(ell.__getitem__, fail))

    def ell(self, relevant: set[int]) -> dict[int, float]:
        """``ℓ(v)`` of every relevant task (the tasks of ``F`` and those ``F`` recomputes)."""
        self.work.spend(len(relevant))
        predset, t = self.predset, self.t
        ell: dict[int, float] = {}
        get = ell.__getitem__
        for v in sorted(relevant):
            ps = predset[v] & relevant
            ell[v] = t[v] + max(map(get, ps)) if ps else t[v]
        return ell


# ------------------------------------------------------------------ packing state


class _NoRoom(Exception):
    def __init__(self, task: int) -> None:
        super().__init__(task)
        self.task = task


class _State:
    """A partial placement over the pool's slots (nodes in opening order)."""

    def __init__(
        self, graph: TaskGraph, slots: Sequence[Node], lat: _Latency, bound: float
    ) -> None:
        self.graph = graph
        self.slots = slots
        self.lat = lat
        self.bound = bound
        self.key = [s.domain if s.domain is not None else f"\0{s.name}" for s in slots]
        self.load = [0.0] * len(slots)
        self.where: dict[int, int] = {}
        self.members: list[set[int]] = [set() for _ in slots]
        self.group: dict[str, set[int]] = {}
        self.group_h: dict[str, float] = {}
        self._hw: dict[tuple[int, str], float] = {}  # h_with since the last put/remove

    def copy(self) -> _State:
        self.lat.work.spend(len(self.where) + len(self.slots))  # a copy is work too
        new = _State.__new__(_State)
        new.graph, new.slots, new.lat, new.bound = self.graph, self.slots, self.lat, self.bound
        new.key = self.key
        new.load = list(self.load)
        new.where = dict(self.where)
        new.members = [set(m) for m in self.members]
        new.group = {k: set(v) for k, v in self.group.items()}
        new.group_h = dict(self.group_h)
        new._hw = {}
        return new

    @property
    def used(self) -> list[int]:
        return [k for k, m in enumerate(self.members) if m]

    def cap_ok(self, i: int, k: int) -> bool:
        return self.load[k] + self.graph.weight[i] <= self.slots[k].cpu + _EPS

    def h_with(self, i: int, k: int) -> float:
        """``H`` of ``k``'s failure group with ``i`` added (kept until the next change,
        so that :meth:`put` right after a check does not compute it again)."""
        key = self.key[k]
        h = self._hw.get((i, key))
        if h is None:
            h = self.lat.h(self.group.get(key, set()) | {i})
            self._hw[(i, key)] = h
        return h

    def fits(self, i: int, k: int) -> bool:
        return self.cap_ok(i, k) and self.h_with(i, k) <= self.bound + _EPS

    def put(self, i: int, k: int, h: float | None = None) -> None:
        key = self.key[k]
        if h is None:
            h = self._hw.get((i, key))
        self._hw.clear()
        self.load[k] += self.graph.weight[i]
        self.where[i] = k
        self.members[k].add(i)
        self.group.setdefault(key, set()).add(i)
        self.group_h[key] = h if h is not None else self.lat.h(self.group[key])

    def remove(self, i: int) -> None:
        k = self.where.pop(i)
        key = self.key[k]
        self._hw.clear()
        self.load[k] -= self.graph.weight[i]
        self.members[k].discard(i)
        self.group[key].discard(i)
        self.group_h[key] = self.lat.h(self.group[key])

    def open_new(self, i: int, is_open: Callable[[int], bool]) -> int:
        for k in range(len(self.slots)):
            if not self.members[k] and not is_open(k) and self.fits(i, k):
                return k
        raise _NoRoom(i)

    def assignment(self) -> dict[str, str]:
        g = self.graph
        return {g.tasks[i]: self.slots[k].name for i, k in sorted(self.where.items())}


Strategy = Literal["nf", "ff", "bf"]


def _canonical(state: _State, slots: Sequence[Node]) -> dict[int, int]:
    """Relabel identical nodes so that node k's first task has index ≥ k."""
    firsts = sorted({min(state.members[k]) for k in state.used})
    rename = {state.where[f]: r for r, f in enumerate(firsts)}
    return {i: rename[k] for i, k in state.where.items()}


def _pack(state: _State, groups: Sequence[Sequence[int]], strategy: Strategy) -> _State:
    """1-D packing of each group in turn (bins are never shared across groups)."""
    w = state.graph.weight
    cpu = [s.cpu for s in state.slots]
    load = state.load  # updated in place by put
    for group in groups:
        bins: list[int] = []
        opened: set[int] = set()
        for i in group:
            chosen: int | None = None
            if strategy == "nf":
                if bins and state.fits(i, bins[-1]):
                    chosen = bins[-1]
            elif strategy == "ff":
                chosen = next((k for k in bins if state.fits(i, k)), None)
            else:
                best = math.inf
                wi = w[i]
                for k in bins:  # cap_ok inlined: this loop runs n · bins times
                    if load[k] + wi > cpu[k] + _EPS:
                        continue
                    resid = cpu[k] - load[k] - wi
                    if resid < best - _EPS and state.h_with(i, k) <= state.bound + _EPS:
                        best, chosen = resid, k
            if chosen is None:
                chosen = state.open_new(i, opened.__contains__)
                bins.append(chosen)
                opened.add(chosen)
            state.put(i, chosen)
    return state


# ------------------------------------------------------------------ shared checks


@dataclass
class _Problem:
    graph: TaskGraph
    pool: NodePool
    bound: float
    flags: list[bool]
    backups: tuple[str, ...] | None
    slots: list[Node]
    lat: _Latency
    single: list[float]

    @property
    def budget(self) -> WorkBudget:
        """The work budget every search on this problem spends (deterministic)."""
        return self.lat.work

    def state(self) -> _State:
        return _State(self.graph, self.slots, self.lat, self.bound)


def _prepare(
    graph: TaskGraph,
    pool: NodePool,
    bound: float,
    backups: Iterable[str] | None,
    time_limit: float = 0.0,
) -> _Problem:
    """Validate the inputs and reject what no placement can satisfy."""
    if not bound > 0:
        raise PlannerError(f"the recovery-latency bound must be positive, got {bound!r}")
    blist = None if backups is None else tuple(dict.fromkeys(backups))
    flags = backup_flags(graph, blist)
    if len(graph) == 0:
        raise PlannerError("the topology has no tasks")
    largest = pool.largest()
    for i, w in enumerate(graph.weight):
        if w > largest + _EPS:
            raise Infeasible(
                f"task {graph.tasks[i]} needs {w:g} CPU but the largest node has {largest:g} "
                "available"
            )
    single = [0.0] * len(graph)
    for v, ps in enumerate(graph.preds):
        single[v] = graph.latency[v] + max((single[u] for u in ps if not flags[u]), default=0.0)
    worst, task = worst_task_failure(graph, blist)
    if worst > bound + _EPS:
        what = "alone" if blist is None else "alone, with these backups,"
        raise Infeasible(
            f"task {task} {what} recovers in {worst:g}s > bound {bound:g}s; "
            f"the smallest feasible bound is {worst:g}s",
            smallest_bound=worst,
        )
    if not pool.unbounded:
        need, have = sum(graph.weight), sum(n.cpu for n in pool.nodes)
        if need > have + _EPS:
            raise Infeasible(f"the tasks need {need:g} CPU but the nodes have {have:g} available")
    slots = pool.slots(len(graph))
    lat = _Latency(graph, flags, WorkBudget(time_limit))
    return _Problem(graph, pool, bound, flags, blist, slots, lat, single)


def _no_room(prob: _Problem, err: _NoRoom, algorithm: str) -> Infeasible:
    task = prob.graph.tasks[err.task]
    return Infeasible(
        f"{algorithm} found no node for task {task} among the {len(prob.slots)} given nodes "
        f"within bound {prob.bound:g}s (add nodes, or raise the bound)"
    )


def _finish(
    prob: _Problem,
    state: _State,
    algorithm: str,
    optimal: bool | None,
    backups: tuple[str, ...] | Literal["problem"] | None = "problem",
    *,
    report: bool = False,
) -> Placement:
    """Build the result and run the shared invariant checks on it.

    With ``report`` (the 2SP baselines, which do not use the model to fit),
    what the checks find is recorded in :attr:`Placement.violations` instead
    of failing.
    """
    graph = prob.graph
    blist = prob.backups if backups == "problem" else backups
    if prob.pool.unbounded:  # name on-demand nodes node-0, node-1, … without gaps
        state = _state_from(prob, prob.slots, _canonical(state, prob.slots))
    assignment = state.assignment()
    capacity = {s.name: s.cpu for s in prob.slots}
    violations = check_plan(
        graph, bound=prob.bound, backups=blist, assignment=assignment, capacity=capacity
    )
    found = [v.message for v in violations]
    domains = prob.pool.domains()
    if domains:
        h, label = worst_correlated_failure(graph, blist, assignment, domains=domains)
        if h > prob.bound + _EPS:
            found.append(f"losing {label} takes {h:g}s > bound {prob.bound:g}s")
    assert report or not found, f"{algorithm} broke an invariant: {found[0]}"
    worst, _ = worst_node_failure(graph, blist, assignment)
    return Placement(
        algorithm=algorithm,
        bound=float(prob.bound),
        assignment=assignment,
        backups=blist,
        nodes_used=len(set(assignment.values())),
        worst=worst,
        optimal=optimal,
        violations=tuple(found),
    )


def _greedy(
    prob: _Problem, order: Sequence[int], strategy: Strategy, grouped: bool, literal: bool = False
) -> _State:
    if grouped:
        groups = _rtap_groups(prob.graph, order, prob.single, prob.bound, literal=literal)
    else:
        groups = [list(order)]
    return _pack(prob.state(), groups, strategy)


def _run_greedy(
    name: str,
    graph: TaskGraph,
    pool: NodePool,
    bound: float,
    backups: Iterable[str] | None,
    strategy: Strategy,
    grouped: bool,
    literal: bool = False,
) -> Placement:
    prob = _prepare(graph, pool, bound, backups)
    order = _wud_order(graph) if grouped else _height_order(graph)
    try:
        state = _greedy(prob, order, strategy, grouped, literal)
    except _NoRoom as err:
        raise _no_room(prob, err, name) from None
    return _finish(prob, state, name, None)


def _state_from(prob: _Problem, slots: Sequence[Node], where: Mapping[int, int]) -> _State:
    st = _State(prob.graph, slots, prob.lat, prob.bound)
    for i, j in sorted(where.items()):
        st.put(i, j, h=0.0)  # each group's H once, below, not once per task
    for key, members in st.group.items():
        st.group_h[key] = st.lat.h(members)
    return st
