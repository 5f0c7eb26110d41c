"""Recovery-latency-aware placement: which node each task runs on (RTAP seeds).

Why this module exists: tasks placed on one node fail together, and a task that
fails together with its upstream must wait for it to recover before it can replay
(the correlated failure effect of ``rtap-journal.txt``). So a placement is not
plain bin packing: every node failure ``K_p`` (and, with failure domains, every
zone or rack) must keep ``H(K_p)`` within the recovery-latency bound, while using
as few nodes as possible.

Every algorithm shares one signature and is registered by name in
:data:`PLACEMENT_ALGORITHMS`; :func:`place` dispatches on it:

- ``nfdh``, ``ffdh``, ``bfdh``: the seed's 2SP-based greedy baselines (sort by
  reprocessing latency, then next/first/best fit with the recovery check);
- ``rtap-nf``, ``rtap-ff``, ``rtap-bf``: the seed's Algorithm 1 (weighted upstream
  degree order, grouping, then 1-D packing per group);
- ``exact``: CP-SAT (ortools, :mod:`planners.placement_cpsat`) within a budget,
  starting from the best heuristic;
- ``auto``: the best of several latency-aware greedy packings, improved by a local
  search that empties nodes, then CP-SAT when the instance is small.

:func:`plan_joint` goes beyond the seeds: it chooses the backups *and* the
placement so that every node failure keeps the bound, with as few nodes as
possible and then as few backups as possible.

Budgets (``time_limit``) are deterministic work limits (:mod:`planners.budget`):
the same input and budget give the same placement on any machine, and nodes are
taken in name order, so the dry run shows what the operator will do.

Every result is checked by :func:`planners.evaluate.check_plan` (and by the
correlated-failure evaluator when nodes carry domains) before it is returned: a
planner bug surfaces as an ``AssertionError`` here, never as a silently broken
guarantee.

Nodes are real: each :class:`Node` has its own available CPU (allocatable minus
what already runs there) and an optional failure domain. A :class:`NodePool` is
either such an explicit list or "as many identical nodes of size X as needed".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from planners.budget import WorkBudget
from planners.errors import Infeasible, PlannerError, UnknownAlgorithm
from planners.evaluate import (
    backup_flags,
    check_plan,
    worst_correlated_failure,
    worst_node_failure,
    worst_task_failure,
)
from planners.graph import TaskGraph
from planners.placement_cpsat import _canonical, _cp_sat

__all__ = [
    "PLACEMENT_ALGORITHMS",
    "Node",
    "NodePool",
    "Placement",
    "PlacementAlgorithm",
    "place",
    "place_auto",
    "place_bfdh",
    "place_exact",
    "place_ffdh",
    "place_nfdh",
    "place_rtap_bf",
    "place_rtap_ff",
    "place_rtap_nf",
    "plan_joint",
    "weighted_upstream_degree",
]

_EPS = 1e-9
_EXACT_MAX_TASKS = 60  # "auto" calls CP-SAT only up to this many tasks
_EXACT_MAX_VARS = 60_000  # ... and only if the model stays this small


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Node:
    """A node a task can land on.

    Attributes
    ----------
    name:
        The Kubernetes node name (``kubernetes.io/hostname``).
    cpu:
        Available cores: allocatable CPU minus the requests already running there.
    domain:
        Failure domain (zone or rack label value), or ``None`` for "only itself".
    """

    name: str
    cpu: float
    domain: str | None = None


@dataclass(frozen=True)
class NodePool:
    """Where tasks may go: explicit nodes, or identical nodes created on demand.

    Use :meth:`uniform` for "as many nodes of ``cpu`` cores as needed" (named
    ``node-0``, ``node-1``, …, the seeds' unit bins) and :meth:`of` for an
    explicit list of (possibly different) nodes.

    Examples
    --------
    >>> NodePool.uniform(1).slots(2)
    [Node(name='node-0', cpu=1.0, domain=None), Node(name='node-1', cpu=1.0, domain=None)]
    >>> [n.name for n in NodePool.of([Node("a", 2), Node("b", 4)]).slots(5)]
    ['b', 'a']
    """

    nodes: tuple[Node, ...] = ()
    node_cpu: float | None = None
    prefix: str = "node-"

    @classmethod
    def uniform(cls, cpu: float, *, prefix: str = "node-") -> NodePool:
        """As many identical nodes of ``cpu`` cores as needed."""
        if not cpu > 0:
            raise PlannerError(f"node size must be positive, got {cpu!r} cores")
        return cls(node_cpu=float(cpu), prefix=prefix)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> NodePool:
        """Exactly these nodes (names must be unique), kept sorted by name.

        Sorted so that the plan never depends on the order the caller (a file,
        or the API server's list) happened to give them in.
        """
        listed = tuple(sorted(nodes, key=lambda n: n.name))
        seen: set[str] = set()
        for n in listed:
            if n.name in seen:
                raise PlannerError(f"node {n.name!r} is listed twice")
            if n.cpu < 0:
                raise PlannerError(f"node {n.name!r} has negative CPU {n.cpu!r}")
            seen.add(n.name)
        if not listed:
            raise PlannerError("the node pool is empty")
        return cls(nodes=listed)

    @property
    def unbounded(self) -> bool:
        """Whether nodes are created on demand (identical sizes)."""
        return self.node_cpu is not None

    def slots(self, n_tasks: int) -> list[Node]:
        """The nodes a planner may open, in the order it opens them.

        On-demand pools offer one node per task (never more is needed); explicit
        pools offer their nodes largest first, so that a new node is the one most
        likely to take the next task.
        """
        if self.node_cpu is not None:
            return [Node(f"{self.prefix}{k}", self.node_cpu) for k in range(max(n_tasks, 1))]
        return sorted(self.nodes, key=lambda n: (-n.cpu, n.name))

    def largest(self) -> float:
        """The largest node size."""
        if self.node_cpu is not None:
            return self.node_cpu
        return max(n.cpu for n in self.nodes)

    def with_domains(self, domains: Mapping[str, str] | None) -> NodePool:
        """The same pool with node domains set from ``{node: domain}``."""
        if not domains:
            return self
        if self.node_cpu is not None:
            raise PlannerError("failure domains need an explicit node list, not --node-cpu")
        return NodePool(
            nodes=tuple(replace(n, domain=domains.get(n.name, n.domain)) for n in self.nodes)
        )

    def domains(self) -> dict[str, str] | None:
        """``{node: domain}`` for nodes that have one, or ``None`` if none has."""
        out = {n.name: n.domain for n in self.nodes if n.domain is not None}
        return out or None


@dataclass(frozen=True)
class Placement:
    """A placement (and its backups), as checked by the failure-effect evaluator.

    Attributes
    ----------
    algorithm:
        The algorithm name that produced it.
    bound:
        The recovery-latency bound it keeps (seconds).
    assignment:
        ``{task id: node name}`` for every task.
    backups:
        Tasks that keep upstream backups; ``None`` means every task (the seeds).
    nodes_used:
        Number of distinct nodes in ``assignment``.
    worst:
        The evaluator's worst single-node failure ``max_p H(K_p)`` (seconds).
    optimal:
        ``True`` if proven optimal (CP-SAT), ``False`` if not proven, ``None``
        for heuristics that make no claim.
    """

    algorithm: str
    bound: float
    assignment: dict[str, str]
    backups: tuple[str, ...] | None
    nodes_used: int
    worst: float
    optimal: bool | None

    def by_node(self) -> dict[str, list[str]]:
        """``{node: [tasks]}``, nodes and tasks in a stable order."""
        out: dict[str, list[str]] = {}
        for task, node in self.assignment.items():
            out.setdefault(node, []).append(task)
        return {k: out[k] for k in sorted(out, key=_natural)}


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


class PlacementAlgorithm(Protocol):
    """The one signature every placement algorithm has."""

    def __call__(
        self,
        graph: TaskGraph,
        pool: NodePool,
        *,
        bound: float,
        backups: Iterable[str] | None = None,
        time_limit: float = 10.0,
    ) -> Placement: ...


# ------------------------------------------------------------------ the evaluator


class _Latency:
    """``H(F)`` for small failure sets, touching only the tasks that matter.

    Same model as :mod:`planners.evaluate`, but restricted to ``F`` plus the
    healthy tasks without backups that ``F`` reads through (they recompute), so
    that a packing step costs O(|F| + its edges) instead of O(V + E).
    """

    def __init__(
        self, graph: TaskGraph, flags: Sequence[bool], work: WorkBudget | None = None
    ) -> None:
        self.preds = graph.preds
        self.t = graph.latency
        self.flags = list(flags)
        self.work = work if work is not None else WorkBudget(0.0)

    def h(self, members: Iterable[int]) -> float:
        fail = set(members)
        if not fail:
            return 0.0
        flags, preds = self.flags, self.preds
        relevant = set(fail)
        stack = list(fail)
        while stack:
            v = stack.pop()
            for u in preds[v]:
                if u not in relevant and not flags[u]:
                    relevant.add(u)
                    stack.append(u)
        self.work.spend(len(relevant))
        ell: dict[int, float] = {}
        for v in sorted(relevant):
            worst = 0.0
            for u in preds[v]:
                if u in fail or not flags[u]:
                    a = ell[u]
                    if a > worst:
                        worst = a
            ell[v] = self.t[v] + worst
        return max(ell[v] for v in fail)


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
        return new

    @property
    def used(self) -> list[int]:
        return [k for k, m in enumerate(self.members) if m]

    def cap_ok(self, i: int, k: int) -> bool:
        return self.load[k] + self.graph.weight[i] <= self.slots[k].cpu + _EPS

    def h_with(self, i: int, k: int) -> float:
        g = self.group.get(self.key[k], set())
        return self.lat.h(g | {i})

    def fits(self, i: int, k: int) -> bool:
        return self.cap_ok(i, k) and self.h_with(i, k) <= self.bound + _EPS

    def put(self, i: int, k: int, h: float | None = None) -> None:
        key = self.key[k]
        self.load[k] += self.graph.weight[i]
        self.where[i] = k
        self.members[k].add(i)
        self.group.setdefault(key, set()).add(i)
        self.group_h[key] = h if h is not None else self.lat.h(self.group[key])

    def remove(self, i: int) -> None:
        k = self.where.pop(i)
        key = self.key[k]
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


def _pack(state: _State, groups: Sequence[Sequence[int]], strategy: Strategy) -> _State:
    """1-D packing of each group in turn (bins are never shared across groups)."""
    w = state.graph.weight
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
                for k in bins:
                    if not state.cap_ok(i, k):
                        continue
                    resid = state.slots[k].cpu - state.load[k] - w[i]
                    if resid < best - _EPS and state.h_with(i, k) <= state.bound + _EPS:
                        best, chosen = resid, k
            if chosen is None:
                chosen = state.open_new(i, opened.__contains__)
                bins.append(chosen)
                opened.add(chosen)
            state.put(i, chosen)
    return state


# ------------------------------------------------------------------ orders, groups


def weighted_upstream_degree(graph: TaskGraph) -> list[float]:
    """The seed's packing "hardness" ``WUD_v = |U_v| / n · Σ_{u ∈ U_v} t_u`` (eq. 10).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "c"), ("b", "c")],
    ...                     latency={"a": 1, "b": 2, "c": 1})
    >>> weighted_upstream_degree(g)
    [0.0, 0.0, 2.0]
    """
    n = len(graph)
    return [len(ps) / n * sum(graph.latency[u] for u in ps) for ps in graph.preds]


def _bfs_rank(graph: TaskGraph) -> list[int]:
    rank = [-1] * len(graph)
    queue = deque(graph.sources)
    for s in queue:
        rank[s] = 0
    pos = 0
    seen = set(queue)
    while queue:
        v = queue.popleft()
        rank[v] = pos
        pos += 1
        for s in graph.succs[v]:
            if s not in seen:
                seen.add(s)
                queue.append(s)
    return rank


def _wud_order(graph: TaskGraph) -> list[int]:
    wud, rank = weighted_upstream_degree(graph), _bfs_rank(graph)
    return sorted(range(len(graph)), key=lambda v: (-wud[v], rank[v]))


def _height_order(graph: TaskGraph) -> list[int]:
    return sorted(range(len(graph)), key=lambda v: (-graph.latency[v], -graph.weight[v], v))


def _rtap_groups(
    graph: TaskGraph, order: Sequence[int], single: Sequence[float], bound: float
) -> list[list[int]]:
    """The seed's grouping step: first-fit colouring of rigid conflicts.

    Task ``v`` joins the first group holding no adjacent task ``u`` with
    ``h_u + t_v > R`` (upstream ``u``) or ``h_v + t_u > R`` (downstream ``u``),
    where ``h`` is the single-failure recovery latency: such a pair can never
    share a node, whatever else is there. The seed states the test over every
    member of the group; we apply it to backup-dependent (adjacent) pairs only,
    since the seed itself notes that independent tasks may share a node.
    """
    t = graph.latency
    groups: list[list[int]] = []
    member_of: list[set[int]] = []
    for v in order:
        conflicts = {u for u in graph.preds[v] if single[u] + t[v] > bound + _EPS}
        conflicts |= {u for u in graph.succs[v] if single[v] + t[u] > bound + _EPS}
        for g, members in enumerate(member_of):
            if not (conflicts & members):
                groups[g].append(v)
                members.add(v)
                break
        else:
            groups.append([v])
            member_of.append({v})
    return groups


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
) -> Placement:
    """Build the result and run the shared invariant checks on it."""
    graph = prob.graph
    blist = prob.backups if backups == "problem" else backups
    if prob.pool.unbounded:  # name on-demand nodes node-0, node-1, … without gaps
        state = _state_from(prob, prob.slots, _canonical(state, prob.slots))
    assignment = state.assignment()
    capacity = {s.name: s.cpu for s in prob.slots}
    violations = check_plan(
        graph, bound=prob.bound, backups=blist, assignment=assignment, capacity=capacity
    )
    assert not violations, f"{algorithm} broke an invariant: {violations[0].message}"
    domains = prob.pool.domains()
    if domains:
        h, label = worst_correlated_failure(graph, blist, assignment, domains=domains)
        assert h <= prob.bound + _EPS, f"{algorithm}: losing {label} takes {h:g}s"
    worst, _ = worst_node_failure(graph, blist, assignment)
    return Placement(
        algorithm=algorithm,
        bound=float(prob.bound),
        assignment=assignment,
        backups=blist,
        nodes_used=len(set(assignment.values())),
        worst=worst,
        optimal=optimal,
    )


def _greedy(prob: _Problem, order: Sequence[int], strategy: Strategy, grouped: bool) -> _State:
    groups = _rtap_groups(prob.graph, order, prob.single, prob.bound) if grouped else [list(order)]
    return _pack(prob.state(), groups, strategy)


def _run_greedy(
    name: str,
    graph: TaskGraph,
    pool: NodePool,
    bound: float,
    backups: Iterable[str] | None,
    strategy: Strategy,
    grouped: bool,
) -> Placement:
    prob = _prepare(graph, pool, bound, backups)
    order = _wud_order(graph) if grouped else _height_order(graph)
    try:
        state = _greedy(prob, order, strategy, grouped)
    except _NoRoom as err:
        raise _no_room(prob, err, name) from None
    return _finish(prob, state, name, None)


# ------------------------------------------------------------------ baselines


def place_nfdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Next-fit decreasing height with the recovery check (the seed's A^NFDH).

    Tasks are sorted by reprocessing latency (the item height), ties by
    decreasing CPU (the width); each goes to the current node if it fits there
    (capacity, and the node's failure keeps the bound), else a new node is opened.

    Parameters
    ----------
    graph:
        The task DAG.
    pool:
        The nodes (explicit, or identical nodes on demand).
    bound:
        Recovery-latency bound ``R`` in seconds.
    backups:
        Tasks that keep upstream backups; ``None`` (the seeds' model) means all.
    time_limit:
        Unused (the greedy takes milliseconds); part of the shared signature.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        A task wider than every node, a task whose own recovery exceeds the
        bound (the message names the smallest feasible bound), or no node left.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1},
    ...                     weight={"a": 0.5, "b": 0.5})
    >>> place_nfdh(g, NodePool.uniform(1), bound=1).nodes_used
    2
    >>> place_nfdh(g, NodePool.uniform(1), bound=2).nodes_used
    1

    Notes
    -----
    O(n log n) to sort plus O(|K_p| + its edges) per recovery check.

    References
    ----------
    Section 4.2 of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("nfdh", graph, pool, bound, backups, "nf", grouped=False)


def place_ffdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """First-fit decreasing height with the recovery check (the seed's A^FFDH).

    Same order as :func:`place_nfdh`; each task goes to the first opened node
    where it fits and the node's failure keeps the bound.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = place_ffdh(g, NodePool.uniform(2), bound=1)
    >>> p.nodes_used, p.assignment["a"] != p.assignment["b"]
    (2, True)

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Section 4.2 of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("ffdh", graph, pool, bound, backups, "ff", grouped=False)


def place_bfdh(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Best-fit decreasing height with the recovery check (the seed's A^BFDH).

    Same order as :func:`place_nfdh`; each task goes to the opened node with the
    least CPU left after it, among those where the node's failure keeps the bound.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> place_bfdh(g, NodePool.uniform(2), bound=2).nodes_used
    1

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Section 4.2 of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("bfdh", graph, pool, bound, backups, "bf", grouped=False)


# ------------------------------------------------------------------ Algorithm 1


def place_rtap_nf(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with next fit (A^RTAP-NF).

    Tasks are sorted by weighted upstream degree (:func:`weighted_upstream_degree`,
    ties by breadth-first order), partitioned into groups that hold no pair of
    adjacent tasks that could never share a node, and each group is packed on its
    own nodes with next fit and the recovery check.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> place_rtap_nf(g, NodePool.uniform(2), bound=1).nodes_used
    2

    Notes
    -----
    O(n log n) to sort, O(n · d) to group (d = degree), then as next fit.

    References
    ----------
    Algorithm 1 and equation (10) of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("rtap-nf", graph, pool, bound, backups, "nf", grouped=True)


def place_rtap_ff(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with first fit (A^RTAP-FF).

    As :func:`place_rtap_nf`, packing each group with first fit.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "c"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> place_rtap_ff(g, NodePool.uniform(3), bound=2).nodes_used
    1

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Algorithm 1 of ``seeds/rtap-journal.txt``.
    """
    return _run_greedy("rtap-ff", graph, pool, bound, backups, "ff", grouped=True)


def place_rtap_bf(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The seed's Algorithm 1 with best fit (A^RTAP-BF), its best variant.

    As :func:`place_rtap_nf`, packing each group with best fit (least CPU left).

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`place_nfdh`.

    Returns
    -------
    Placement

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = place_rtap_bf(g, NodePool.uniform(3), bound=1)
    >>> p.nodes_used, p.worst
    (2, 1.0)

    Notes
    -----
    O(n · m) recovery checks for m opened nodes.

    References
    ----------
    Algorithm 1 of ``seeds/rtap-journal.txt``; Table 5 reports it best of six.
    """
    return _run_greedy("rtap-bf", graph, pool, bound, backups, "bf", grouped=True)


# ------------------------------------------------------------------ local search


def _best_fit_target(state: _State, i: int, exclude: int) -> int | None:
    w = state.graph.weight[i]
    best, chosen = math.inf, None
    for k in state.used:
        if k == exclude or not state.cap_ok(i, k):
            continue
        resid = state.slots[k].cpu - state.load[k] - w
        if resid < best - _EPS and state.h_with(i, k) <= state.bound + _EPS:
            best, chosen = resid, k
    return chosen


def _empty_nodes(state: _State, deadline: int) -> _State:
    """Local search: move every task off a node into other used nodes, repeatedly.

    Tries the least-loaded nodes first; a node is emptied only if all its tasks
    find a place (capacity and recovery check), so the node count never grows.
    """
    w = state.graph.weight
    work = state.lat.work
    improved = True
    while improved and not work.past(deadline):
        improved = False
        for k in sorted(state.used, key=lambda k: (state.load[k], -k)):
            if work.past(deadline):
                break
            trial = state.copy()
            tasks = sorted(trial.members[k], key=lambda i: (-w[i], i))
            for i in tasks:
                trial.remove(i)
            ok = True
            for i in tasks:
                target = _best_fit_target(trial, i, exclude=k)
                if target is None:
                    ok = False
                    break
                trial.put(i, target)
            if ok:
                state = trial
                improved = True
                break
    return state


def _heuristic_states(prob: _Problem, deadline: int) -> list[_State]:
    """Several latency-aware greedy packings (the seed's and ours), best first."""
    g = prob.graph
    n = len(g)
    wud = _wud_order(g)
    by_weight = sorted(range(n), key=lambda v: (-g.weight[v], -g.latency[v], v))
    by_height = _height_order(g)
    topo = list(range(n))
    attempts: list[tuple[Sequence[int], Strategy, bool]] = [
        (wud, "bf", True),  # rtap-bf: the floor
        (by_height, "bf", False),  # bfdh
        (wud, "ff", True),  # rtap-ff
        (by_height, "ff", False),  # ffdh
        (wud, "bf", False),
        (by_weight, "bf", False),
        (topo, "bf", False),
    ]
    states: list[_State] = []
    first_error: _NoRoom | None = None
    for order, strategy, grouped in attempts:
        if states and prob.budget.past(deadline):
            break
        try:
            states.append(_greedy(prob, order, strategy, grouped))
        except _NoRoom as err:
            first_error = first_error or err
    if not states:
        assert first_error is not None
        raise first_error
    states.sort(key=lambda s: len(s.used))
    return states


def _improve(prob: _Problem, deadline: int) -> _State:
    states = _heuristic_states(prob, deadline)
    best = states[0]
    for s in states[: min(3, len(states))]:
        improved = _empty_nodes(s, deadline)
        if len(improved.used) < len(best.used):
            best = improved
    return best


# ----------------------------------------------- CP-SAT: in planners/placement_cpsat.py


def _state_from(prob: _Problem, slots: Sequence[Node], where: Mapping[int, int]) -> _State:
    st = _State(prob.graph, slots, prob.lat, prob.bound)
    for i, j in sorted(where.items()):
        st.put(i, j)
    return st


def _exact_slots(prob: _Problem, incumbent: _State) -> list[Node]:
    if prob.pool.unbounded:
        return list(prob.slots[: len(incumbent.used)])
    return list(prob.slots)


def _model_size(n_tasks: int, n_slots: int, n_edges: int) -> int:
    return n_tasks * n_slots + n_slots * (n_tasks + 2 * n_edges)


# ------------------------------------------------------------------ exact, auto


def place_exact(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Fewest nodes by CP-SAT, starting from the best heuristic placement.

    The model is equations (4)–(9) of the seed with the recovery constraint (7)
    written as linear constraints over per-failure-group latencies (see Notes).
    The result is never worse than the heuristic it starts from.

    Parameters
    ----------
    graph, pool, bound, backups:
        As in :func:`place_nfdh`.
    time_limit:
        CP-SAT's budget in seconds.

    Returns
    -------
    Placement
        ``optimal`` is ``True`` only when CP-SAT proved optimality within the
        budget (and latencies/CPU are exact multiples of 1/1000).

    Raises
    ------
    Infeasible
        As in :func:`place_nfdh`; with an explicit pool, also when CP-SAT proves
        that no placement exists.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c", "d"], [("a", "b"), ("c", "d")],
    ...                     latency={t: 1 for t in "abcd"}, weight={t: 0.5 for t in "abcd"})
    >>> p = place_exact(g, NodePool.uniform(1), bound=1, time_limit=5)
    >>> p.nodes_used, p.optimal
    (2, True)

    Notes
    -----
    NP-hard (it contains bin packing); the model has O(m · (n + E)) constraints
    for m candidate nodes, with m capped by the heuristic's node count on
    on-demand pools. Practical up to a few dozen tasks.

    References
    ----------
    Model (4)–(9) of ``seeds/rtap-journal.txt`` (solved there by exhaustive search).
    """
    prob = _prepare(graph, pool, bound, backups, time_limit)
    try:
        incumbent: _State | None = _improve(
            prob, prob.budget.mark(min(0.25, 2.0 / max(time_limit, 1e-9)))
        )
    except _NoRoom:
        incumbent = None
    slots = _exact_slots(prob, incumbent) if incumbent is not None else list(prob.slots)
    budget = max(0.1, prob.budget.seconds_left())
    res = _cp_sat(prob, slots, incumbent, None, budget, joint=False)
    if res is None:
        if incumbent is None:
            raise Infeasible(
                f"no placement of the {len(graph)} tasks on the {len(prob.slots)} given nodes "
                f"keeps bound {bound:g}s (add nodes, or raise the bound)"
            )
        return _finish(prob, incumbent, "exact", False)
    state = _state_from(prob, slots, res.where)
    if incumbent is not None and len(incumbent.used) < len(state.used):
        return _finish(prob, incumbent, "exact", False)
    return _finish(prob, state, "exact", res.proven)


def place_auto(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """The default: latency-aware greedy packings, local search, then CP-SAT if small.

    Runs the seed's RTAP-BF/RTAP-FF, the BFDH/FFDH baselines and best fit in
    three more orders (WUD, CPU, topological), keeps the fewest nodes, then
    moves tasks off the emptiest nodes while every node failure keeps the bound.
    Small instances (≤ 60 tasks) then go to CP-SAT with the result as a hint.
    The result never uses more nodes than :func:`place_rtap_bf`.

    Parameters
    ----------
    graph, pool, bound, backups:
        As in :func:`place_nfdh`.
    time_limit:
        Total budget in seconds (local search and CP-SAT stop on it).

    Returns
    -------
    Placement
        ``optimal`` as in :func:`place_exact` when CP-SAT ran, else ``None``.

    Raises
    ------
    Infeasible
        As in :func:`place_exact`.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> p = place_auto(g, NodePool.uniform(3), bound=2)
    >>> p.nodes_used, p.worst <= 2
    (2, True)

    Notes
    -----
    Greedy passes O(n · m) recovery checks each; the local search repeats
    O(m) node-emptying attempts while it improves; CP-SAT as in :func:`place_exact`.

    References
    ----------
    Algorithm 1 and Section 4.2 of ``seeds/rtap-journal.txt``.
    """
    prob = _prepare(graph, pool, bound, backups, time_limit)
    deadline = prob.budget.mark()
    try:
        state = _improve(prob, prob.budget.mark(1 / 3))
    except _NoRoom as err:
        if _small(prob, len(prob.slots)):
            return replace(
                place_exact(graph, pool, bound=bound, backups=backups, time_limit=time_limit),
                algorithm="auto",
            )
        raise _no_room(prob, err, "auto") from None
    optimal: bool | None = None
    slots = _exact_slots(prob, state)
    lower = math.ceil(sum(graph.weight) / max(s.cpu for s in prob.slots) - _EPS)
    if prob.pool.unbounded and len(state.used) <= max(1, lower):
        optimal = True
    elif _small(prob, len(slots)) and not prob.budget.past(deadline):
        res = _cp_sat(prob, slots, state, None, prob.budget.seconds_until(deadline), joint=False)
        if res is not None:
            cand = _state_from(prob, slots, res.where)
            if len(cand.used) <= len(state.used):
                state, optimal = cand, res.proven
    return _finish(prob, state, "auto", optimal)


def _small(prob: _Problem, n_slots: int) -> bool:
    n = len(prob.graph)
    size = _model_size(n, n_slots, len(prob.graph.edges))
    return n <= _EXACT_MAX_TASKS and size <= _EXACT_MAX_VARS


PLACEMENT_ALGORITHMS: dict[str, PlacementAlgorithm] = {
    "auto": place_auto,
    "exact": place_exact,
    "rtap-bf": place_rtap_bf,
    "rtap-ff": place_rtap_ff,
    "rtap-nf": place_rtap_nf,
    "bfdh": place_bfdh,
    "ffdh": place_ffdh,
    "nfdh": place_nfdh,
}
"""Every placement algorithm by name; ``auto`` is the default."""


def _algorithm(name: str) -> PlacementAlgorithm:
    try:
        return PLACEMENT_ALGORITHMS[name]
    except KeyError:
        raise UnknownAlgorithm(
            f"unknown placement algorithm {name!r}; choose one of "
            + ", ".join(PLACEMENT_ALGORITHMS)
        ) from None


def place(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    algorithm: str = "auto",
    time_limit: float = 10.0,
    domains: Mapping[str, str] | None = None,
) -> Placement:
    """Place every task with the named algorithm (the family's dispatcher).

    Parameters
    ----------
    graph, bound, backups, time_limit:
        As in :func:`place_nfdh`.
    pool:
        The nodes; their ``domain`` fields are the failure domains.
    algorithm:
        A key of :data:`PLACEMENT_ALGORITHMS`; default ``"auto"``.
    domains:
        Optional ``{node: domain}`` overriding the nodes' domains (explicit pools
        only); with domains, losing a whole domain also keeps the bound.

    Returns
    -------
    Placement

    Raises
    ------
    UnknownAlgorithm
        For a name not in the registry.
    Infeasible
        As the algorithm raises it.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> pool = NodePool.of([Node("n1", 4, "z1"), Node("n2", 4, "z1"), Node("n3", 1, "z2")])
    >>> p = place(g, pool, bound=1, algorithm="rtap-bf")
    >>> p.assignment["a"] != p.assignment["b"], p.nodes_used
    (True, 2)

    Notes
    -----
    Complexity is the algorithm's.

    References
    ----------
    ``seeds/rtap-journal.txt``.
    """
    fn = _algorithm(algorithm)
    return fn(
        graph, pool.with_domains(domains), bound=bound, backups=backups, time_limit=time_limit
    )


# ------------------------------------------------------------------ joint plan


def _descendants(graph: TaskGraph) -> list[frozenset[int]]:
    down: list[frozenset[int]] = [frozenset()] * len(graph)
    for v in reversed(range(len(graph))):
        acc: set[int] = set()
        for s in graph.succs[v]:
            acc.add(s)
            acc |= down[s]
        down[v] = frozenset(acc)
    return down


class _Backups:
    """Backup flags over a fixed placement, with per-group ``H`` kept current."""

    def __init__(self, prob: _Problem, state: _State, flags: Sequence[bool]) -> None:
        self.prob = prob
        self.state = state
        self.lat = _Latency(prob.graph, flags, prob.budget)
        self.down = _descendants(prob.graph)

    def groups_hit(self, u: int) -> list[set[int]]:
        hit = self.down[u]
        return [g for g in self.state.group.values() if g and not hit.isdisjoint(g)]

    def can_drop(self, u: int) -> bool:
        self.lat.flags[u] = False
        ok = all(self.lat.h(g) <= self.prob.bound + _EPS for g in self.groups_hit(u))
        self.lat.flags[u] = True
        return ok

    def drop_greedy(self, order: Iterable[int]) -> None:
        for u in order:
            if self.lat.flags[u] and self.can_drop(u):
                self.lat.flags[u] = False


def _drop_orders(graph: TaskGraph, single: Sequence[float]) -> list[list[int]]:
    cands = [u for u in range(len(graph)) if graph.succs[u]]
    down = _descendants(graph)
    return [
        # cheapest first: short recompute, few tasks that read it
        sorted(cands, key=lambda u: (graph.latency[u], len(graph.succs[u]), u)),
        sorted(cands, key=lambda u: (len(down[u]), graph.latency[u], u)),
        sorted(cands, key=lambda u: (-u,)),
        sorted(cands),
    ]


def _min_backups(prob_all: _Problem, state: _State, deadline: int) -> list[bool]:
    """Fewest backups for a fixed placement: greedy drops in several orders."""
    graph = prob_all.graph
    best: list[bool] | None = None
    for order in _drop_orders(graph, prob_all.single):
        tracker = _Backups(
            prob_all, _rebase(prob_all, state, [True] * len(graph)), [True] * len(graph)
        )
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
        st.put(i, k)
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
        As :func:`place` raises it for every task keeping backups.
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
    One greedy drop pass is O(n) checks of the failure groups below the task;
    the CP-SAT model has O(m · (n + E)) constraints. No seed solves this joint
    problem; it is what the operator uses by default.

    References
    ----------
    DESIGN.md ("Ours (joint)"); combines ``seeds/rtap-journal.txt`` (placement)
    and ``seeds/minimum-backups-ftc.txt`` (backups).
    """
    fn = _algorithm(algorithm)
    pool = pool.with_domains(domains)
    placed = fn(graph, pool, bound=bound, backups=None, time_limit=time_limit / 2)
    prob = _prepare(graph, pool, bound, None, time_limit / 2)
    deadline = prob.budget.mark()
    slot_of = {s.name: k for k, s in enumerate(prob.slots)}
    where = {graph.index(t): slot_of[n] for t, n in placed.assignment.items()}
    state = _state_from(prob, prob.slots, where)
    candidates = [state]
    if algorithm == "auto":
        try:
            others = _heuristic_states(prob, deadline)
        except _NoRoom:
            others = []
        candidates.extend([s for s in others if len(s.used) <= len(state.used)][:3])
    best_state, best_flags = state, [bool(s) for s in graph.succs]
    best_count = math.inf
    for cand in candidates:
        flags = _min_backups(prob, cand, deadline)
        if sum(flags) < best_count:
            best_state, best_flags, best_count = cand, flags, sum(flags)
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
