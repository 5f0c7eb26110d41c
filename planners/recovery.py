"""Query-centric recovery scheduling after node loss (seed ``incremental-recovery.txt``).

Why this module exists: when several nodes fail together, the surviving and
replacement nodes rarely have room for every failed task at once, and
replacements arrive one by one. Restarting tasks in topological order (the
operator-centric way) spends that scarce capacity on tasks that complete no
query. Here each trigger (failure detected, node Ready, node back) gets a plan
that recovers the failed tasks which *fit now, node by node* and maximise the
summed priority of the queries they fully recover. A query is an output task
with its upstream closure (the seed's query partition); it counts as recovered
only when every failed task in that closure is running again.

Every algorithm shares one signature and one validator
(:func:`check_recovery`), so the seed's heuristics (OC, BestDensity, DP) and
the exact CP-SAT model can be compared on equal terms, and ``auto`` never
returns less than BestDensity. :class:`RecoverySession` strings the plans of
one incident together (repeated failures join the session), and
:func:`simulate_timeline` replays a trace of losses and node arrivals to
measure priority-weighted unavailability of incremental, operator-centric and
blocking recovery.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from planners.budget import WorkBudget, deterministic_cp_sat
from planners.errors import PlannerError, UnknownAlgorithm
from planners.graph import TaskGraph

__all__ = [
    "DEFAULT_UTILIZATION",
    "RECOVERY_ALGORITHMS",
    "InvalidEvent",
    "NodeBack",
    "NodeReady",
    "NodesLost",
    "RecoveryAlgorithm",
    "RecoverySession",
    "RecoveryStep",
    "TimedStep",
    "Timeline",
    "check_recovery",
    "failed_queries",
    "free_capacity",
    "node_load",
    "recover_auto",
    "recover_best_density",
    "recover_dp",
    "recover_exact",
    "recover_operator_centric",
    "schedule_recovery",
    "simulate_timeline",
]

DEFAULT_UTILIZATION = 0.8
"""The seed's upper bound on a node's CPU usage during recovery (Section 5)."""

_EPS = 1e-9
_SCALE = 1000  # CPU in millicores for CP-SAT (Kubernetes' own granularity)
_AUTO_DP_QUERIES = 20  # auto runs the seed's DP for its pooled bound up to this many
_RULES = ("best", "worst")  # best fit first: keeps large holes for later plans


class InvalidEvent(PlannerError, ValueError):
    """A session event names an unknown node, or a node back that was never lost."""


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class RecoveryStep:
    """One recovery plan: which failed tasks restart where, and what it buys.

    Attributes
    ----------
    algorithm:
        Name of the algorithm that produced the plan.
    recover:
        ``{task id: node}`` for the failed tasks recovered by this plan.
    pending:
        Failed tasks left for a later plan, in topological order.
    recovered_queries:
        Output task ids of the failed queries whose failed tasks are all recovered.
    recovered_priority:
        Summed priority of ``recovered_queries``.
    failed_priority:
        Summed priority of every failed query (a query with a failed task upstream).
    optimal:
        ``True`` if proven optimal for the per-node problem, ``False`` if not
        proven (e.g. the solver's time ran out), ``None`` for heuristics.
    upper_bound:
        A proven upper bound on the recoverable priority, when the algorithm has one.
    """

    algorithm: str
    recover: dict[str, str]
    pending: tuple[str, ...]
    recovered_queries: tuple[str, ...]
    recovered_priority: float
    failed_priority: float
    optimal: bool | None
    upper_bound: float | None = None


class RecoveryAlgorithm(Protocol):
    """The one signature every recovery algorithm shares."""

    def __call__(
        self,
        graph: TaskGraph,
        failed: Collection[str],
        capacity: Mapping[str, float],
        *,
        time_limit: float = 5.0,
    ) -> RecoveryStep: ...


# --------------------------------------------------------------------------- helpers


def free_capacity(
    allocatable: Mapping[str, float],
    used: Mapping[str, float],
    cap: float = DEFAULT_UTILIZATION,
) -> dict[str, float]:
    """Free CPU per node for recovery: ``allocatable × cap − used``, never below 0.

    Parameters
    ----------
    allocatable:
        Allocatable CPU (cores) of each available node.
    used:
        CPU already requested on each node; nodes missing here use nothing, and
        entries for nodes not in ``allocatable`` (lost nodes) are ignored.
    cap:
        Utilisation cap in ``(0, 1]`` (the seed uses 0.8).

    Returns
    -------
    dict
        ``{node: free cores}`` for every node of ``allocatable``.

    Raises
    ------
    ValueError
        If ``cap`` is not in ``(0, 1]`` or an allocatable CPU is negative.

    Examples
    --------
    >>> free_capacity({"n1": 4, "n2": 2}, {"n1": 1.5, "gone": 3})
    {'n1': 1.7000000000000002, 'n2': 1.6}
    """
    if not 0 < cap <= 1:
        raise ValueError(f"utilisation cap {cap} must be in (0, 1]")
    out: dict[str, float] = {}
    for node, cpu in allocatable.items():
        if cpu < 0:
            raise ValueError(f"node {node!r} has negative allocatable CPU {cpu}")
        out[node] = max(0.0, float(cpu) * cap - float(used.get(node, 0.0)))
    return out


def node_load(
    graph: TaskGraph, assignment: Mapping[str, str], exclude: Collection[str] = ()
) -> dict[str, float]:
    """CPU requested on each node by the tasks of ``assignment`` (minus ``exclude``).

    Raises
    ------
    InvalidTopology
        If the assignment names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> node_load(g, {"a": "n1", "b": "n1"})
    {'n1': 2.0}
    """
    skip = set(exclude)
    load: dict[str, float] = {}
    for task, node in assignment.items():
        w = graph.weight[graph.index(task)]
        if task not in skip:
            load[node] = load.get(node, 0.0) + w
    return load


def failed_queries(graph: TaskGraph, failed: Collection[str]) -> dict[str, frozenset[str]]:
    """The failed queries: output task id → the failed tasks of its upstream closure.

    A query (the seed's query partition) is an output task with everything it
    transitively reads from. It has failed when that closure holds a failed
    task, and it is recovered once all of those are recovered.

    Raises
    ------
    InvalidTopology
        If ``failed`` names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...                     latency={"s": 1, "a": 1, "b": 1})
    >>> sorted((q, sorted(ts)) for q, ts in failed_queries(g, ["s", "b"]).items())
    [('a', ['s']), ('b', ['b', 's'])]
    """
    fi = set(graph.indices(failed))
    out: dict[str, frozenset[str]] = {}
    for q in sorted(graph.outputs):
        hit = graph.upstream_closure[q] & fi
        if hit:
            out[graph.tasks[q]] = frozenset(graph.tasks[i] for i in hit)
    return out


class _Problem:
    """Failed tasks and queries as bitmasks over the failed tasks (topological order)."""

    def __init__(self, graph: TaskGraph, failed: Collection[str], capacity: Mapping[str, float]):
        idx = sorted(set(graph.indices(failed)))
        for node, cap in capacity.items():
            if not cap >= 0 or math.isinf(cap):
                raise ValueError(f"node {node!r} has invalid free capacity {cap}")
        self.graph = graph
        self.failed = idx  # graph indices, topological order
        self.pos = {v: p for p, v in enumerate(idx)}
        self.weight = [graph.weight[v] for v in idx]
        # by name, never in the caller's (API list) order: ties break the same way every time
        self.capacity = {str(n): float(c) for n, c in sorted(capacity.items())}
        self.total = sum(self.capacity.values())
        fset = set(idx)
        self.qout: list[int] = []  # output task index per query
        self.qmask: list[int] = []
        self.qprio: list[float] = []
        for q in sorted(graph.outputs):
            hit = graph.upstream_closure[q] & fset
            if hit:
                self.qout.append(q)
                self.qmask.append(sum(1 << self.pos[v] for v in hit))
                self.qprio.append(graph.priority[q])
        self.full = (1 << len(idx)) - 1
        union = 0
        for m in self.qmask:
            union |= m
        self.orphans = self.full & ~union  # failed tasks in no failed query

    @property
    def nq(self) -> int:
        return len(self.qmask)

    def bits(self, mask: int) -> list[int]:
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return out

    def cost(self, mask: int) -> float:
        return sum(self.weight[p] for p in self.bits(mask))

    def priority(self, mask: int) -> float:
        return float(sum(p for m, p in zip(self.qmask, self.qprio, strict=True) if m & ~mask == 0))

    def step(
        self,
        algorithm: str,
        placement: Mapping[int, str],
        optimal: bool | None,
        upper_bound: float | None = None,
    ) -> RecoveryStep:
        """Build the result from ``{failed position: node}``."""
        g = self.graph
        mask = sum(1 << p for p in placement)
        recovered = [
            g.tasks[q] for q, m in zip(self.qout, self.qmask, strict=True) if m & ~mask == 0
        ]
        return RecoveryStep(
            algorithm=algorithm,
            recover={g.tasks[self.failed[p]]: n for p, n in sorted(placement.items())},
            pending=tuple(g.tasks[v] for p, v in enumerate(self.failed) if p not in placement),
            recovered_queries=tuple(recovered),
            recovered_priority=self.priority(mask),
            failed_priority=float(sum(self.qprio)),
            optimal=optimal,
            upper_bound=upper_bound,
        )


def _place(weights: Mapping[int, float], remaining: dict[str, float]) -> dict[int, str] | None:
    """Place items on nodes, largest first; update ``remaining`` only on success.

    The seed assigns each recovered partition to the node with the most free
    resources (worst fit). We try best fit first, which keeps large free blocks
    for the tasks later plans must place (measured in ``bench/bench_recovery.py``:
    lower unavailability for every algorithm), and fall back to worst fit.
    """
    if not weights:
        return {}
    if sum(weights.values()) > sum(remaining.values()) + _EPS * (1 + len(weights)):
        return None
    order = sorted(weights, key=lambda p: (-weights[p], p))
    for rule in _RULES:
        rem = dict(remaining)
        out: dict[int, str] = {}
        for p in order:
            w = weights[p]
            fits = [n for n, c in rem.items() if c + _EPS >= w]
            if not fits:
                break
            if rule == "worst":
                node = max(fits, key=lambda n: (rem[n], _neg(n)))
            else:
                node = min(fits, key=lambda n: (rem[n], n))
            rem[node] -= w
            out[p] = node
        else:
            remaining.update(rem)
            return out
    return None


def _neg(name: str) -> tuple[int, ...]:
    """A key that orders names in reverse, so ``max`` breaks ties by the smallest name."""
    return tuple(-ord(c) for c in name)


def _fill_orphans(prob: _Problem, placement: dict[int, str], remaining: dict[str, float]) -> None:
    """Recover failed tasks that belong to no failed query where capacity is left.

    They earn no priority, but they must come back eventually and cost nothing
    that a query needed in this plan.
    """
    for p in prob.bits(prob.orphans):
        if p in placement:
            continue
        got = _place({p: prob.weight[p]}, remaining)
        if got:
            placement.update(got)


def _remaining_after(prob: _Problem, placement: Mapping[int, str]) -> dict[str, float]:
    rem = dict(prob.capacity)
    for p, n in placement.items():
        rem[n] -= prob.weight[p]
    return rem


# --------------------------------------------------------------------------- algorithms


def recover_operator_centric(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The seed's operator-centric baseline (OC): cheapest task first, in topological order.

    Failed tasks are taken level by level (a task's level is the length of the
    longest path from a source to it); within a level the task with the
    smallest CPU request goes first. Each one is placed if some node has room
    (best fit), and skipped otherwise. Queries play no part
    in the choice.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.
    capacity:
        Free CPU per available node, after the utilisation cap (see :func:`free_capacity`).
    time_limit:
        Unused; part of the shared signature.

    Returns
    -------
    RecoveryStep
        ``optimal`` is ``None`` (a heuristic).

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
    >>> step = recover_operator_centric(g, ["s-0", "a-0", "b-0"], {"n1": 3.0})
    >>> step.recover, step.recovered_queries
    ({'s-0': 'n1', 'a-0': 'n1'}, ('a-0',))

    Notes
    -----
    O(F log F + F·N) for F failed tasks and N nodes. It ignores query
    structure, so it may spend capacity on tasks that complete no query; the
    seed reports it as the worst of its three algorithms.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 7 ("OC"); seed ``incremental-recovery.txt``.
    """
    del time_limit
    prob = _Problem(graph, failed, capacity)
    level = [0] * len(graph)
    for v, ps in enumerate(graph.preds):
        level[v] = max((level[u] + 1 for u in ps), default=0)
    order = sorted(
        range(len(prob.failed)), key=lambda p: (level[prob.failed[p]], prob.weight[p], p)
    )
    remaining = dict(prob.capacity)
    placement: dict[int, str] = {}
    for p in order:
        got = _place({p: prob.weight[p]}, remaining)
        if got:
            placement.update(got)
    return prob.step("operator-centric", placement, None)


def recover_best_density(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The seed's BestDensity (Algorithm 3): grow seed plans by profit density.

    The profit density of a failed query ``Q_i`` given the tasks already in a
    candidate plan is ``prt_i / Σ c_k / f_k`` over its failed tasks ``p_k`` not
    yet in the plan, where ``c_k`` is the CPU of ``p_k`` and ``f_k`` the number
    of still-unrecovered failed queries sharing it. Candidate plans start as the
    empty plan, every single query and every pair of queries that fit; each is
    extended greedily with the densest query that still fits; the plan with the
    highest recovered priority wins. Unlike the seed, a query "fits" only if its
    new tasks can be packed on the nodes (largest first, best fit, falling back
    to the seed's most-free-node rule), so the plan is feasible node by node.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.
    capacity:
        Free CPU per available node, after the utilisation cap.
    time_limit:
        Seconds; once exceeded, no further candidate plans are started (the
        best so far is returned).

    Returns
    -------
    RecoveryStep
        ``optimal`` is ``True`` only when every failed query is recovered, else ``None``.

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
    >>> step = recover_best_density(g, ["s-0", "a-0", "b-0"], {"n1": 3.0})
    >>> step.recover, step.recovered_queries, step.recovered_priority
    ({'s-0': 'n1', 'b-0': 'n1'}, ('b-0',), 5.0)

    Notes
    -----
    With M failed queries there are O(M²) candidate plans, each extended at
    most M times over M queries: O(M⁴·F) in this direct form (the seed states
    O(M³ log M) for its bookkeeping). For M > 48 only pairs among the 48
    densest queries seed the candidates, to keep the time bounded. Against the
    aggregate-capacity optimum the seed proves a ratio of ``1 − e^(−1/d)``,
    ``d`` being the most queries sharing one task; per-node packing may lose
    more, which :func:`recover_exact` and ``auto`` make up for.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5, Algorithm 3, Theorem 5.1; seed ``incremental-recovery.txt``.
    """
    budget = WorkBudget(time_limit)
    prob = _Problem(graph, failed, capacity)
    nq = prob.nq

    def density(plan: int, q: int, share: list[int]) -> tuple[float, float]:
        new = prob.qmask[q] & ~plan
        cost = 0.0
        denom = 0.0
        for p in prob.bits(new):
            cost += prob.weight[p]
            denom += prob.weight[p] / max(1, share[p])
        pd = prob.qprio[q] / denom if denom > 0 else math.inf
        return pd, cost

    def extend(plan: int, placement: dict[int, str], rem: dict[str, float]) -> int:
        blocked: set[int] = set()
        while True:
            open_q = [q for q in range(nq) if prob.qmask[q] & ~plan and q not in blocked]
            if not open_q:
                return plan
            share = [0] * len(prob.failed)
            for q in open_q:
                for p in prob.bits(prob.qmask[q] & ~plan):
                    share[p] += 1
            free = sum(rem.values())
            best: tuple[float, float, float, int] | None = None
            for q in open_q:
                pd, cost = density(plan, q, share)
                if cost > free + _EPS:
                    continue
                key = (pd, prob.qprio[q], -cost, -q)
                if best is None or key > best:
                    best = key
            if best is None:
                return plan
            q = -best[3]
            new = prob.qmask[q] & ~plan
            got = _place({p: prob.weight[p] for p in prob.bits(new)}, rem)
            if got is None:
                blocked.add(q)
                continue
            placement.update(got)
            plan |= new

    # Seeds: empty, singles, pairs (the seed: best single + all pairs).
    share0 = [0] * len(prob.failed)
    for m in prob.qmask:
        for p in prob.bits(m):
            share0[p] += 1
    fits = [q for q in range(nq) if prob.cost(prob.qmask[q]) <= prob.total + _EPS]
    by_density = sorted(fits, key=lambda q: (-density(0, q, share0)[0], q))
    pair_pool = sorted(by_density[:48])
    seeds: list[tuple[int, ...]] = [()]
    seeds += [(q,) for q in by_density]
    seeds += [
        (a, b)
        for i, a in enumerate(pair_pool)
        for b in pair_pool[i + 1 :]
        if prob.cost(prob.qmask[a] | prob.qmask[b]) <= prob.total + _EPS
    ]
    best_plan: tuple[float, int, float] | None = None
    best_place: dict[int, str] = {}
    seen_start: set[int] = set()
    for k, start in enumerate(seeds):
        if k > 0 and budget.exhausted:
            break
        budget.spend(nq * len(prob.failed))  # one extension: every open query, every task
        plan = 0
        for q in start:
            plan |= prob.qmask[q]
        if plan in seen_start:
            continue
        seen_start.add(plan)
        rem = dict(prob.capacity)
        placement = _place({p: prob.weight[p] for p in prob.bits(plan)}, rem)
        if placement is None:
            continue
        plan = extend(plan, placement, rem)
        pr = prob.priority(plan)
        key = (pr, sum(1 for m in prob.qmask if m & ~plan == 0), -prob.cost(plan))
        if best_plan is None or key > best_plan:
            best_plan, best_place = key, placement
        if pr >= sum(prob.qprio) - _EPS:
            break  # every failed query recovered: nothing can do better
    _fill_orphans(prob, best_place, _remaining_after(prob, best_place))
    step = prob.step("best-density", best_place, None)
    if step.recovered_priority >= step.failed_priority - _EPS:
        step = replace(step, optimal=True, upper_bound=step.failed_priority)
    return step


def recover_dp(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The seed's dynamic programme (Algorithm 4): every union of failed queries within R.

    Like the seed, it grows candidate plans (unions of whole failed queries'
    task sets) whose *total* cost stays within ``R = Σ capacity``, which is
    the seed's single-pool problem, and keeps the one with the highest summed
    priority. Duplicate plans are merged, which is where it saves over
    enumerating raw subsets. Then plans are tried in decreasing priority until
    one packs on the nodes; since the pooled problem relaxes the per-node one,
    the first plan that packs is optimal when it has the pooled optimum's priority.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.
    capacity:
        Free CPU per available node, after the utilisation cap.
    time_limit:
        Seconds for the enumeration; if it runs out, the best plan found so far
        is returned with ``optimal=False``.

    Returns
    -------
    RecoveryStep
        ``optimal`` is ``True`` when the enumeration finished and the pooled
        optimum packed node by node; ``upper_bound`` is the pooled optimum.

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
    >>> step = recover_dp(g, ["s-0", "a-0", "b-0"], {"n1": 3.0})
    >>> step.recovered_queries, step.optimal
    (('b-0',), True)

    Notes
    -----
    O(2^M · M) plans and time for M failed queries, as in the seed; use it for
    M up to about 20. On a single node it solves exactly the per-node problem.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Appendix B, Algorithm 4; seed ``incremental-recovery.txt``.
    """
    budget = WorkBudget(time_limit)
    prob = _Problem(graph, failed, capacity)
    costs: dict[int, float] = {0: 0.0}
    frontier = [0]
    complete = True
    while frontier and complete:
        nxt: list[int] = []
        for plan in frontier:
            if budget.exhausted:
                complete = False
                break
            budget.spend(len(prob.qmask))
            for m in prob.qmask:
                new = plan | m
                if new == plan or new in costs:
                    continue
                c = costs[plan] + prob.cost(m & ~plan)
                if c <= prob.total + _EPS:
                    costs[new] = c
                    nxt.append(new)
        frontier = nxt
    ranked = sorted(costs, key=lambda s: (-prob.priority(s), costs[s], s))
    pooled_best = prob.priority(ranked[0])
    placement: dict[int, str] = {}
    chosen = 0
    for plan in ranked:
        rem = dict(prob.capacity)
        got = _place({p: prob.weight[p] for p in prob.bits(plan)}, rem)
        if got is not None:
            placement, chosen = got, plan
            break
    optimal = complete and prob.priority(chosen) >= pooled_best - _EPS
    _fill_orphans(prob, placement, _remaining_after(prob, placement))
    bound = pooled_best if complete else None
    return prob.step("dp", placement, optimal, bound)


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
    Definition 2 and Appendix D.1 (the problem); seed ``incremental-recovery.txt``.
    """
    from ortools.sat.python import cp_model

    prob = _Problem(graph, failed, capacity)
    nodes = sorted(prob.capacity)
    caps = {n: math.floor(prob.capacity[n] * _SCALE + 1e-6) for n in nodes}
    wint = [math.ceil(w * _SCALE - 1e-6) for w in prob.weight]
    in_query = [p for p in range(len(prob.failed)) if not (prob.orphans >> p) & 1]
    model = cp_model.CpModel()
    x: dict[tuple[int, str], cp_model.IntVar] = {}
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
    if hint is not None:
        for p in in_query:
            t = graph.tasks[prob.failed[p]]
            for n in nodes:
                if (p, n) in x:
                    model.add_hint(x[p, n], 1 if hint.recover.get(t) == n else 0)
        done = set(hint.recovered_queries)
        for q, out in enumerate(prob.qout):
            model.add_hint(y[q], 1 if graph.tasks[out] in done else 0)
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
        Never a lower recovered priority than :func:`recover_best_density`.
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
    Section 5; seed ``incremental-recovery.txt``.
    """
    bd = recover_best_density(graph, failed, capacity, time_limit=time_limit / 3)
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


RECOVERY_ALGORITHMS: dict[str, RecoveryAlgorithm] = {
    "operator-centric": recover_operator_centric,
    "best-density": recover_best_density,
    "dp": recover_dp,
    "exact": recover_exact,
    "auto": recover_auto,
}
"""Every recovery algorithm by name; ``auto`` is the default."""


def schedule_recovery(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    algorithm: str = "auto",
    time_limit: float = 5.0,
) -> RecoveryStep:
    """Run the recovery algorithm named ``algorithm`` (see :data:`RECOVERY_ALGORITHMS`).

    Raises
    ------
    UnknownAlgorithm
        If ``algorithm`` is not registered; the message lists the names.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> schedule_recovery(g, ["a", "b"], {"n": 3.0}).recover
    {'a': 'n', 'b': 'n'}
    """
    try:
        fn = RECOVERY_ALGORITHMS[algorithm]
    except KeyError:
        names = ", ".join(sorted(RECOVERY_ALGORITHMS))
        raise UnknownAlgorithm(
            f"unknown recovery algorithm {algorithm!r}; choose one of: {names}"
        ) from None
    return fn(graph, failed, capacity, time_limit=time_limit)


def check_recovery(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    step: RecoveryStep,
) -> list[str]:
    """Every way ``step`` breaks the recovery-plan invariants (empty if valid).

    Checks: every recovered task was failed; recovered and pending partition the
    failed tasks, each once; every node exists and its free capacity is never
    exceeded; ``recovered_queries`` are exactly the failed queries whose failed
    tasks are all recovered; both priorities match.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> bad = RecoveryStep("x", {"a": "n"}, (), ("b",), 1.0, 1.0, None)
    >>> check_recovery(g, ["a", "b"], {"n": 0.5}, bad)  # doctest: +NORMALIZE_WHITESPACE
    ['failed tasks neither recovered nor pending: b',
     'node n: 1 cores recovered onto 0.5 free',
     "recovered_queries ['b'] != ['']", 'recovered_priority 1.0 != 0']
    """
    problems: list[str] = []
    known = set(graph.tasks)
    fset = {t for t in failed if t in known}
    problems += [f"failed task {t!r} is unknown" for t in failed if t not in known]
    for t in step.recover:
        if t not in fset:
            problems.append(f"recovered task {t} was not failed")
    pend = list(step.pending)
    if len(set(pend)) != len(pend):
        problems.append("pending lists a task twice")
    both = set(pend) & set(step.recover)
    if both:
        problems.append(f"tasks both recovered and pending: {', '.join(sorted(both))}")
    missing = fset - set(pend) - set(step.recover)
    if missing:
        problems.append(f"failed tasks neither recovered nor pending: {', '.join(sorted(missing))}")
    extra = set(pend) - fset
    if extra:
        problems.append(f"pending tasks that were not failed: {', '.join(sorted(extra))}")
    load: dict[str, float] = {}
    for t, n in step.recover.items():
        if n not in capacity:
            problems.append(f"task {t} recovered onto unknown or unavailable node {n}")
            continue
        if t in known:
            load[n] = load.get(n, 0.0) + graph.weight[graph.index(t)]
    for n, used in sorted(load.items()):
        if used > capacity[n] + 1e-6:
            problems.append(f"node {n}: {used:g} cores recovered onto {capacity[n]:g} free")
    fq = failed_queries(graph, fset)
    rec = set(step.recover)
    want = sorted(q for q, ts in fq.items() if ts <= rec)
    if sorted(step.recovered_queries) != want:
        problems.append(f"recovered_queries {sorted(step.recovered_queries)} != {want or ['']}")
    prio = {q: graph.priority[graph.index(q)] for q in fq}
    if abs(step.failed_priority - sum(prio.values())) > 1e-6:
        problems.append(f"failed_priority {step.failed_priority} != {sum(prio.values())}")
    got = sum(prio[q] for q in want)
    if abs(step.recovered_priority - got) > 1e-6:
        problems.append(f"recovered_priority {step.recovered_priority} != {got}")
    return problems


# --------------------------------------------------------------------------- session


@dataclass(frozen=True)
class NodesLost:
    """Nodes that count as lost (NotReady past the grace period, or deleted)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NodeReady:
    """A node became Ready: a replacement with ``cpu`` allocatable cores, or a lost node back."""

    node: str
    cpu: float | None = None


@dataclass(frozen=True)
class NodeBack:
    """A lost node returned (empty: its pods are gone), with its old allocatable CPU."""

    node: str


Event = NodesLost | NodeReady | NodeBack
Mode = Literal["incremental", "blocking", "operator-centric"]
MODES: tuple[Mode, ...] = ("incremental", "blocking", "operator-centric")


@dataclass(frozen=True)
class RecoverySession:
    """The recovery of one incident, as a pure state machine.

    Transitions return a new session and never mutate this one. ``apply``
    changes the cluster view for one event; :meth:`plan` issues the next plan
    step; :meth:`handle` does both. Tasks running on a node that is later lost
    (including tasks an earlier step recovered there) become failed again: the
    seed's repeated failures join the running session instead of starting over.

    Modes: ``incremental`` issues a query-centric plan (``algorithm``) at every
    trigger; ``operator-centric`` does the same with the OC baseline;
    ``blocking`` waits until every failed task fits, then recovers all at once.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "q-0", "q-1"], [("s-0", "q-0"), ("s-0", "q-1")],
    ...                     latency={"s-0": 1, "q-0": 1, "q-1": 1})
    >>> s = RecoverySession.start(g, {"s-0": "a", "q-0": "b", "q-1": "b"},
    ...                           {"a": 4, "b": 4}, algorithm="best-density")
    >>> s, step = s.handle(NodesLost(("b",)))
    >>> sorted(step.recover), sorted(s.failed)
    (['q-0', 'q-1'], [])
    """

    graph: TaskGraph
    assignment: dict[str, str]
    """Running tasks → node (failed tasks are absent)."""
    node_cpu: dict[str, float]
    """Allocatable CPU of the available nodes."""
    down: dict[str, float] = field(default_factory=dict)
    """Allocatable CPU of lost nodes, for when they come back."""
    failed: frozenset[str] = frozenset()
    mode: Mode = "incremental"
    algorithm: str = "auto"
    utilization: float = DEFAULT_UTILIZATION
    time_limit: float = 5.0
    steps: tuple[RecoveryStep, ...] = ()

    @classmethod
    def start(
        cls,
        graph: TaskGraph,
        assignment: Mapping[str, str],
        node_cpu: Mapping[str, float],
        *,
        mode: Mode = "incremental",
        algorithm: str = "auto",
        utilization: float = DEFAULT_UTILIZATION,
        time_limit: float = 5.0,
    ) -> RecoverySession:
        """A session over a healthy placement.

        Raises
        ------
        InvalidTopology
            If the assignment names an unknown task.
        InvalidEvent
            If it names a node missing from ``node_cpu``.
        UnknownAlgorithm
            If ``algorithm`` or ``mode`` is unknown.
        """
        graph.indices(assignment)
        for t, n in assignment.items():
            if n not in node_cpu:
                raise InvalidEvent(f"task {t} is assigned to node {n!r}, which has no capacity")
        if algorithm not in RECOVERY_ALGORITHMS:
            names = ", ".join(sorted(RECOVERY_ALGORITHMS))
            raise UnknownAlgorithm(f"unknown recovery algorithm {algorithm!r}; choose: {names}")
        if mode not in MODES:
            raise UnknownAlgorithm(f"unknown recovery mode {mode!r}; choose: {', '.join(MODES)}")
        if not 0 < utilization <= 1:
            raise ValueError(f"utilisation cap {utilization} must be in (0, 1]")
        return cls(
            graph=graph,
            assignment=dict(assignment),
            node_cpu={n: float(c) for n, c in node_cpu.items()},
            mode=mode,
            algorithm=algorithm,
            utilization=utilization,
            time_limit=time_limit,
        )

    @property
    def done(self) -> bool:
        """Nothing is failed."""
        return not self.failed

    def capacity(self) -> dict[str, float]:
        """Free CPU per available node for recovery (cap applied, running tasks subtracted)."""
        return free_capacity(
            self.node_cpu, node_load(self.graph, self.assignment), self.utilization
        )

    def available_queries(self) -> frozenset[str]:
        """Output tasks whose whole upstream closure is running."""
        fi = set(self.graph.indices(self.failed))
        return frozenset(
            self.graph.tasks[q]
            for q in self.graph.outputs
            if not self.graph.upstream_closure[q] & fi
        )

    def apply(self, event: Event) -> RecoverySession:
        """The session after ``event``, without planning.

        Raises
        ------
        InvalidEvent
            A lost node that was never known, or a node back that was never lost.
        """
        if isinstance(event, NodesLost):
            lost = [n for n in event.nodes if n not in self.down]
            unknown = [n for n in lost if n not in self.node_cpu]
            if unknown:
                raise InvalidEvent(f"lost node(s) {', '.join(unknown)} are not known")
            gone = set(lost)
            newly = {t for t, n in self.assignment.items() if n in gone}
            return replace(
                self,
                assignment={t: n for t, n in self.assignment.items() if n not in gone},
                node_cpu={n: c for n, c in self.node_cpu.items() if n not in gone},
                down={**self.down, **{n: self.node_cpu[n] for n in lost}},
                failed=self.failed | newly,
            )
        if isinstance(event, NodeBack):
            if event.node not in self.down:
                raise InvalidEvent(f"node {event.node!r} is back but was never lost")
            return self.apply(NodeReady(event.node, self.down[event.node]))
        if event.node in self.node_cpu:
            return self  # already available: a duplicate Ready
        cpu = event.cpu if event.cpu is not None else self.down.get(event.node)
        if cpu is None or cpu < 0:
            raise InvalidEvent(f"node {event.node!r} is Ready but its CPU is unknown")
        return replace(
            self,
            node_cpu={**self.node_cpu, event.node: float(cpu)},
            down={n: c for n, c in self.down.items() if n != event.node},
        )

    def plan(self) -> tuple[RecoverySession, RecoveryStep | None]:
        """Issue the next plan step, if it recovers anything.

        Returns
        -------
        (session, step)
            ``step`` is ``None`` when nothing can be recovered now (or nothing
            is failed); the session then is unchanged.
        """
        if not self.failed:
            return self, None
        capacity = self.capacity()
        if self.mode == "blocking":
            step = _recover_all(self.graph, self.failed, capacity, self.time_limit)
        else:
            name = "operator-centric" if self.mode == "operator-centric" else self.algorithm
            step = schedule_recovery(
                self.graph, self.failed, capacity, algorithm=name, time_limit=self.time_limit
            )
        if step is None or not step.recover:
            return self, None
        return (
            replace(
                self,
                assignment={**self.assignment, **step.recover},
                failed=self.failed - set(step.recover),
                steps=(*self.steps, step),
            ),
            step,
        )

    def handle(self, event: Event) -> tuple[RecoverySession, RecoveryStep | None]:
        """Apply ``event``, then plan."""
        return self.apply(event).plan()


def _recover_all(
    graph: TaskGraph, failed: Collection[str], capacity: Mapping[str, float], time_limit: float
) -> RecoveryStep | None:
    """Blocking recovery: every failed task at once, or nothing (``None``)."""
    prob = _Problem(graph, failed, capacity)
    rem = dict(prob.capacity)
    placement = _place({p: prob.weight[p] for p in range(len(prob.failed))}, rem)
    if placement is None and prob.cost(prob.full) <= prob.total + _EPS:
        ex = recover_exact(graph, failed, capacity, time_limit=time_limit)
        if not ex.pending:
            return replace(ex, algorithm="blocking")
    if placement is None:
        return None
    return prob.step("blocking", placement, True, prob.priority(prob.full))


# --------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class TimedStep:
    """A plan step issued at ``time`` (seconds since the trace's start)."""

    time: float
    step: RecoveryStep


@dataclass(frozen=True)
class Timeline:
    """When each query came back on one trace of losses and arrivals, and what it cost.

    Attributes
    ----------
    mode, algorithm:
        How the session recovered.
    steps:
        The plan steps, with the time each was issued.
    downtime:
        Seconds each query (output task id) was unavailable; queries never hit
        have no entry.
    back_at:
        Time each hit query last came back (``None``: still down at the horizon).
    unavailability:
        ``Σ priority × downtime`` (priority-seconds); lower is better.
    finished_at:
        Time nothing was failed any more (``None``: not within the trace).
    horizon:
        The time downtime of unrecovered queries is counted up to.
    """

    mode: str
    algorithm: str
    steps: tuple[TimedStep, ...]
    downtime: dict[str, float]
    back_at: dict[str, float | None]
    unavailability: float
    finished_at: float | None
    horizon: float

    @property
    def complete(self) -> bool:
        """Every failed task was recovered within the trace."""
        return self.finished_at is not None


def simulate_timeline(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    node_cpu: Mapping[str, float],
    lost_at: Mapping[str, float],
    arrivals: Mapping[str, float],
    *,
    mode: Mode = "incremental",
    algorithm: str = "auto",
    utilization: float = DEFAULT_UTILIZATION,
    time_limit: float = 5.0,
    horizon: float | None = None,
) -> Timeline:
    """Replay node losses and arrivals through a :class:`RecoverySession`.

    Parameters
    ----------
    graph:
        The task DAG.
    assignment:
        The healthy placement, task id → node.
    node_cpu:
        Allocatable CPU of every node that appears: the initial ones and the
        replacements.
    lost_at:
        Node → time it is lost.
    arrivals:
        Node → time it becomes Ready. A node that is not lost is a replacement
        that is absent before then; a lost node arriving later is that node back.
    mode, algorithm, utilization, time_limit:
        Passed to the session.
    horizon:
        Time up to which still-down queries accumulate downtime; default the last event.

    Returns
    -------
    Timeline
        Plans are issued instantly at each event time (all events at the same
        time are applied first); a query is back when its closure runs again.

    Raises
    ------
    InvalidEvent
        A lost node missing from ``node_cpu``, or a lost node "arriving" before it was lost.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "q-0", "q-1"], [("s-0", "q-0"), ("s-0", "q-1")],
    ...     latency={"s-0": 1, "q-0": 1, "q-1": 1}, priority={"q-0": 1, "q-1": 3})
    >>> tl = simulate_timeline(g, {"s-0": "a", "q-0": "b", "q-1": "b"},
    ...     {"a": 2.5, "b": 4, "c": 1.25}, lost_at={"b": 0}, arrivals={"c": 10},
    ...     algorithm="best-density")
    >>> tl.downtime, tl.unavailability
    ({'q-0': 10.0}, 10.0)

    Notes
    -----
    One plan per distinct event time, so the cost is that many calls of the algorithm.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Sections 2.2.3 and 7.2 (incremental vs. blocking); seed ``incremental-recovery.txt``.
    """
    for n in lost_at:
        if n not in node_cpu:
            raise InvalidEvent(f"lost node {n!r} has no CPU in node_cpu")
        if n in arrivals and arrivals[n] < lost_at[n]:
            raise InvalidEvent(f"node {n!r} arrives at {arrivals[n]} before it is lost")
    initial = {n: c for n, c in node_cpu.items() if n not in arrivals or n in lost_at}
    session = RecoverySession.start(
        graph,
        assignment,
        initial,
        mode=mode,
        algorithm=algorithm,
        utilization=utilization,
        time_limit=time_limit,
    )
    events: dict[float, list[Event]] = {}
    for n, t in lost_at.items():
        events.setdefault(float(t), []).append(NodesLost((n,)))
    for n, t in arrivals.items():
        ev: Event = NodeBack(n) if n in lost_at else NodeReady(n, float(node_cpu[n]))
        events.setdefault(float(t), []).append(ev)
    times = sorted(events)
    end = float(horizon) if horizon is not None else (times[-1] if times else 0.0)
    outputs = [graph.tasks[q] for q in sorted(graph.outputs)]
    prio = {q: graph.priority[graph.index(q)] for q in outputs}
    down_since: dict[str, float] = {}
    downtime: dict[str, float] = {}
    back_at: dict[str, float | None] = {}
    steps: list[TimedStep] = []
    finished: float | None = 0.0 if session.done else None
    for t in times:
        # losses first, then arrivals, so a same-time replacement can take the load
        batch = sorted(events[t], key=lambda e: 0 if isinstance(e, NodesLost) else 1)
        for ev in batch:
            session = session.apply(ev)
        session, step = session.plan()
        if step is not None:
            steps.append(TimedStep(t, step))
        up = session.available_queries()
        for q in outputs:
            if q not in up and q not in down_since:
                down_since[q] = t
                downtime.setdefault(q, 0.0)
                back_at[q] = None
            elif q in up and q in down_since:
                downtime[q] += t - down_since.pop(q)
                back_at[q] = t
        if not session.done:
            finished = None
        elif finished is None:
            finished = t
    for q, since in down_since.items():
        downtime[q] += max(0.0, end - since)
    return Timeline(
        mode=mode,
        algorithm="operator-centric" if mode == "operator-centric" else algorithm,
        steps=tuple(steps),
        downtime=downtime,
        back_at=back_at,
        unavailability=sum(prio[q] * d for q, d in downtime.items()),
        finished_at=finished if session.done else None,
        horizon=end,
    )


def fill_leftover(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    step: RecoveryStep,
) -> RecoveryStep:
    """Use the capacity a query-centric step leaves idle for more failed tasks.

    A query-centric plan only recovers tasks that complete a query now; the
    rest of the capacity stays idle. Every failed task must come back anyway,
    so this starts the remaining ones early, most valuable first: by the
    largest priority of a failed query the task feeds, then topological order,
    each placed best fit where it fits. ``recovered_queries`` and the priorities
    are recomputed, so a query completed by the filling counts as recovered.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        The failed tasks the step was planned for.
    capacity:
        Free CPU per node the step was planned for.
    step:
        The step to extend (its own placements are kept).

    Returns
    -------
    RecoveryStep
        The extended step (``algorithm`` gets a ``+fill`` suffix when it added tasks).

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "s-1", "q-0"], [("s-0", "q-0"), ("s-1", "q-0")],
    ...                     latency={"s-0": 1, "s-1": 1, "q-0": 1})
    >>> empty = RecoveryStep("auto", {}, ("s-0", "s-1"), (), 0.0, 1.0, None)
    >>> filled = fill_leftover(g, ["s-0", "s-1"], {"n": 1.5}, empty)
    >>> sorted(filled.recover), filled.recovered_queries
    (['s-0'], ())

    Notes
    -----
    O(F log F + F·N) for F failed tasks and N nodes.

    References
    ----------
    ``incremental-recovery.txt`` recovers whole query partitions; filling the
    remainder is Backstop's addition, measured in ``bench/bench_recovery.py``.
    """
    remaining = dict(capacity)
    for task, node in step.recover.items():
        remaining[node] = remaining.get(node, 0.0) - graph.weight[graph.index(task)]
    fq = failed_queries(graph, failed)
    value: dict[str, float] = {}
    for q, tasks in fq.items():
        for t in tasks:
            value[t] = max(value.get(t, 0.0), graph.priority[graph.index(q)])
    todo = sorted(
        (t for t in failed if t not in step.recover),
        key=lambda t: (-value.get(t, 0.0), graph.index(t)),
    )
    recover = dict(step.recover)
    for t in todo:
        w = graph.weight[graph.index(t)]
        fits = [n for n, c in remaining.items() if c + _EPS >= w]
        if not fits:
            continue
        node = min(fits, key=lambda n: (remaining[n], n))
        remaining[node] -= w
        recover[t] = node
    if len(recover) == len(step.recover):
        return step
    done = set(recover)
    queries = tuple(sorted(q for q, ts in fq.items() if ts <= done))
    return replace(
        step,
        algorithm=step.algorithm + "+fill",
        recover=recover,
        pending=tuple(graph.ids(graph.index(t) for t in failed if t not in done)),
        recovered_queries=queries,
        recovered_priority=sum(graph.priority[graph.index(q)] for q in queries),
    )
