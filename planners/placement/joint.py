"""Beyond the seeds: backups and placement chosen together (the operator's default)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from planners.graph import TaskGraph
from planners.placement.cpsat import _cp_sat
from planners.placement.model import _EPS, NodePool, Placement
from planners.placement.registry import _algorithm, require_valid
from planners.placement.search import _best_fit_target, _exact_slots, _heuristic_states, _small
from planners.placement.state import (
    _finish,
    _Latency,
    _NoRoom,
    _prepare,
    _Problem,
    _State,
    _state_from,
)

# ------------------------------------------------------------------ joint plan


def _descendants(graph: TaskGraph) -> list[int]:
    """Each task's descendants as a bitset (bit ``s`` set for every task below it)."""
    down = [0] * len(graph)
    for v in reversed(range(len(graph))):
        acc = 0
        for s in graph.succs[v]:
            acc |= down[s] | (1 << s)
        down[v] = acc
    return down


@dataclass
class _Raise:
    """What dropping one backup does to one failure group (not yet applied)."""

    group: int
    added: set[int]  # tasks that become relevant: the task and what it now recomputes
    ell: dict[int, float]  # the new ℓ of every task whose ℓ changes
    h: float


class _Backups:
    """Backup flags over a fixed placement, with each failure group's ``H`` kept current.

    Why incremental: the drop pass asks, for every task, whether its backup can go.
    Recomputing ``H`` of every group below the task made that O(n · groups · |F|)
    (5 s at 500 tasks). Per group this keeps the relevant set (``F`` plus the healthy
    tasks without backups it recomputes), ``ℓ`` of each and ``H``. Dropping ``u``'s
    backup changes only the groups with a successor of ``u`` relevant (``u`` itself
    not failing there): ``u`` and its unflagged ancestors become relevant, and ``ℓ``
    can only rise, and only downstream of ``u``. So a check touches the tasks whose
    ``ℓ`` changes, in topological order, and stops at the first group over the bound.
    """

    def __init__(self, prob: _Problem, groups: Iterable[set[int]], flags: Sequence[bool]) -> None:
        graph = prob.graph
        self.bound = prob.bound + _EPS
        self.lat = _Latency(graph, flags, prob.budget)
        self.succset = graph.succ_sets
        self.members: list[set[int]] = [g for g in groups if g]
        self.group_of = [-1] * len(graph)
        self.rel: list[set[int]] = []
        self.ell: list[dict[int, float]] = []
        self.h: list[float] = []
        self.readers: list[set[int]] = [set() for _ in range(len(graph))]
        for gi, fail in enumerate(self.members):
            for v in fail:
                self.group_of[v] = gi
            rel = set(self.lat.relevant(fail))
            ell = self.lat.ell(rel)
            self.rel.append(rel)
            self.ell.append(ell)
            self.h.append(max(map(ell.__getitem__, fail)))
            for x in rel:
                self.readers[x].add(gi)

    def trial(self, u: int) -> list[_Raise] | None:
        """The groups' changes if ``u`` kept no backup, or None if one breaks the bound."""
        hit: set[int] = set()
        for s in self.succset[u]:
            hit |= self.readers[s]
        hit.discard(self.group_of[u])  # u fails there too: its buffer never counted
        out: list[_Raise] = []
        self.lat.set_flag(u, False)
        try:
            for gi in sorted(hit):
                r = self._raise(gi, u)
                if r is None:
                    return None
                out.append(r)
        finally:
            self.lat.set_flag(u, True)
        return out

    def _raise(self, gi: int, u: int) -> _Raise | None:
        lat, rel, old = self.lat, self.rel[gi], self.ell[gi]
        predset, t, unflagged = lat.predset, lat.t, lat.unflagged
        added = {u}
        stack = [u]
        while stack:
            new = (predset[stack.pop()] & unflagged) - rel - added
            if new:
                added |= new
                stack.extend(new)
        ell: dict[int, float] = {}
        for v in sorted(added):  # u and the ancestors it now recomputes
            ps = [ell[p] if p in ell else old[p] for p in (predset[v] & rel) | (predset[v] & added)]
            ell[v] = t[v] + max(ps) if ps else t[v]
        fail, h = self.members[gi], self.h[gi]
        heap = [u]
        while heap:  # ℓ rises downstream of u only; topological order = index order
            c = heapq.heappop(heap)
            lc = ell[c]
            for s in self.succset[c] & rel:
                cand = t[s] + lc
                cur = ell[s] if s in ell else old[s]
                if cand > cur:
                    if s not in ell:
                        heapq.heappush(heap, s)
                    ell[s] = cand
                    if s in fail:
                        if cand > self.bound:
                            lat.work.spend(len(added) + len(ell))
                            return None
                        h = max(h, cand)
        lat.work.spend(len(added) + len(ell))  # each a set intersection and a heap step
        return _Raise(gi, added, ell, h)

    def apply(self, u: int, raises: Sequence[_Raise]) -> None:
        """Drop ``u``'s backup with the changes :meth:`trial` found."""
        self.lat.set_flag(u, False)
        for r in raises:
            self.rel[r.group] |= r.added
            self.ell[r.group].update(r.ell)
            self.h[r.group] = r.h
            for x in r.added:
                self.readers[x].add(r.group)

    def can_drop(self, u: int) -> bool:
        return self.trial(u) is not None

    def drop_greedy(self, order: Iterable[int]) -> None:
        for u in order:
            if self.lat.flags[u]:
                raises = self.trial(u)
                if raises is not None:
                    self.apply(u, raises)


def _drop_orders(graph: TaskGraph) -> Iterator[list[int]]:
    """The drop orders, best first; lazily, since a large plan may have budget for one."""
    cands = [u for u in range(len(graph)) if graph.succs[u]]
    # cheapest first: short recompute, few tasks that read it
    yield sorted(cands, key=lambda u: (graph.latency[u], len(graph.succs[u]), u))
    down = [d.bit_count() for d in _descendants(graph)]
    yield sorted(cands, key=lambda u: (down[u], graph.latency[u], u))
    yield sorted(cands, key=lambda u: (-u,))
    yield sorted(cands)


def _min_backups(prob_all: _Problem, state: _State, deadline: int) -> list[bool]:
    """Fewest backups for a fixed placement: greedy drops in several orders."""
    graph = prob_all.graph
    best: list[bool] | None = None
    for order in _drop_orders(graph):
        groups = [state.group[k] for k in sorted(state.group)]
        tracker = _Backups(prob_all, groups, [True] * len(graph))
        tracker.drop_greedy(order)
        if best is None or sum(tracker.lat.flags) < sum(best):
            best = list(tracker.lat.flags)
        if prob_all.budget.past(deadline):
            break
    assert best is not None
    return [f and bool(graph.succs[i]) for i, f in enumerate(best)]


def _rebase(prob: _Problem, state: _State, flags: Sequence[bool]) -> _State:
    lat = _Latency(prob.graph, flags, prob.budget)
    st = _State(prob.graph, state.slots, lat, prob.bound)
    for i, k in sorted(state.where.items()):
        st.put(i, k, h=0.0)  # each group's H once, below
    for key, members in st.group.items():
        st.group_h[key] = lat.h(members)
    return st


def _repair_drops(
    prob: _Problem, state: _State, flags: list[bool], deadline: int
) -> tuple[_State, list[bool]]:
    """Local search: drop one more backup, then move tasks to repair the nodes it broke.

    A move takes a task off a node whose failure now breaks the bound and puts
    it on another used node where capacity and both failure groups stay within
    the bound; the node count never grows.
    """
    graph = prob.graph
    kept = [u for u in range(len(graph)) if flags[u]]
    for u in sorted(kept, key=lambda u: (graph.latency[u], u)):
        if prob.budget.past(deadline):
            break
        trial_flags = list(flags)
        trial_flags[u] = False
        trial = _rebase(prob, state, trial_flags)
        bad = [
            key for key, g in trial.group.items() if g and trial.group_h[key] > prob.bound + _EPS
        ]
        for key in bad:
            moves = 0
            while trial.group_h[key] > prob.bound + _EPS and moves < 8:
                moved = False
                for i in sorted(trial.group[key], key=lambda i: -graph.latency[i]):
                    src = trial.where[i]
                    trial.remove(i)
                    target = _best_fit_target(trial, i, exclude=src)
                    if target is not None and trial.key[target] != key:
                        trial.put(i, target)
                        moved = True
                        break
                    trial.put(i, src)
                moves += 1
                if not moved:
                    break
        if all(h <= prob.bound + _EPS for h in trial.group_h.values()) and len(trial.used) <= len(
            state.used
        ):
            state, flags = trial, trial_flags
    return state, flags


def plan_joint(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    algorithm: str = "auto",
    time_limit: float = 10.0,
    domains: Mapping[str, str] | None = None,
) -> Placement:
    """Choose backups and placement together: fewest nodes, then fewest backups.

    Every single node failure (and, with domains, every domain failure) keeps
    the bound. First the tasks are placed with every task keeping backups, which
    needs the fewest nodes of any backup choice (``H`` only grows when a backup
    is dropped); then backups are dropped greedily, in the order that drops the
    most, while every node failure stays within the bound. With ``auto`` a local
    search then drops more backups by moving tasks between the used nodes, and
    small instances (≤ 60 tasks) go to CP-SAT minimising nodes, then backups.
    With ``exact``, CP-SAT minimises nodes and then backups directly.

    It is an anytime plan: the first placement and one full drop pass always
    run (a valid plan, fast: the drop pass is incremental, see ``_Backups``);
    the other packings, drop orders, the local search and CP-SAT run only while
    the (deterministic) budget lasts.

    Parameters
    ----------
    graph:
        The task DAG.
    pool:
        The nodes.
    bound:
        Recovery-latency bound ``R`` in seconds.
    algorithm:
        The placement algorithm for the first step (a key of
        :data:`PLACEMENT_ALGORITHMS`).
    time_limit:
        Total budget in seconds.
    domains:
        Optional ``{node: domain}``, as in :func:`place`.

    Returns
    -------
    Placement
        ``backups`` lists the tasks that keep upstream backups (sinks never do:
        nobody reads them).

    Raises
    ------
    Infeasible
        As :func:`place` raises it for every task keeping backups, or when
        a ``*-2sp`` algorithm's first step breaks the bound
        (:func:`planners.placement.require_valid`).
    UnknownAlgorithm
        For a name not in the registry.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1}, weight={t: 0.5 for t in "abc"})
    >>> p = plan_joint(g, NodePool.uniform(1), bound=2)
    >>> p.nodes_used, len(p.backups)
    (2, 1)

    Notes
    -----
    One greedy drop pass is O(n) checks, each touching only the failure groups
    that read the task and the tasks whose ``ℓ`` rises;
    the CP-SAT model has O(m · (n + E)) constraints. No seed solves this joint
    problem; it is what the operator uses by default.

    References
    ----------
    Backstop's own; combines Li et al. *A Task Allocation Method for Stream Processing
    with Recovery Latency Constraint* (placement) and Li et al. *Minimum Backups for
    Stream Processing With Recovery Latency Guarantees* (backups).
    """
    fn = _algorithm(algorithm)
    pool = pool.with_domains(domains)
    placed = require_valid(fn(graph, pool, bound=bound, backups=None, time_limit=time_limit / 2))
    prob = _prepare(graph, pool, bound, None, time_limit / 2)
    deadline = prob.budget.mark()
    slot_of = {s.name: k for k, s in enumerate(prob.slots)}
    where = {graph.index(t): slot_of[n] for t, n in placed.assignment.items()}
    state = _state_from(prob, prob.slots, where)
    # anytime: the placement found first, with one full drop pass, is a valid plan
    # at once; other packings, drop orders, the local search and CP-SAT run only
    # while the budget lasts, and replace it only when they do better
    best_state, best_flags = state, _min_backups(prob, state, deadline)
    if algorithm == "auto" and not prob.budget.past(deadline):
        try:
            others = _heuristic_states(prob, deadline)
        except _NoRoom:
            others = []
        for cand in [s for s in others if len(s.used) <= len(state.used)][:3]:
            if prob.budget.past(deadline):
                break
            flags = _min_backups(prob, cand, deadline)
            if sum(flags) < sum(best_flags):
                best_state, best_flags = cand, flags
    if algorithm in ("auto", "exact"):
        if algorithm == "auto":
            local_deadline = prob.budget.mark(1 / 3)
            best_state, best_flags = _repair_drops(prob, best_state, best_flags, local_deadline)
        optimal: bool | None = None
        slots = _exact_slots(prob, best_state)
        if (algorithm == "exact" or _small(prob, len(slots))) and not prob.budget.past(deadline):
            res = _cp_sat(
                prob,
                slots,
                _rebase(prob, best_state, [True] * len(graph)),
                best_flags,
                prob.budget.seconds_until(deadline),
                joint=True,
            )
            if res is not None:
                cand_state = _state_from(prob, slots, res.where)
                key_new = (len(cand_state.used), sum(res.flags))
                if key_new <= (len(best_state.used), sum(best_flags)):
                    best_state, best_flags, optimal = cand_state, res.flags, res.proven
    else:
        optimal = None
    backups = tuple(graph.tasks[i] for i in range(len(graph)) if best_flags[i])
    return _finish(prob, best_state, algorithm, optimal, backups=backups)
