"""The seed's BestDensity (Algorithm 3), as written and pruned, and its Theorem 5.1 bound.

BestDensity is the main heuristic of *Incremental Recovery in Distributed Stream
Processing Systems* (Section 5), and three readings of it are compared in
``bench/bench_recovery.py``: as the paper writes it (the densest single query plus every
pair, Algorithm 3, lines 1–19), with the pairs pruned to the 48 densest queries (bounded
time for hundreds of queries), and the strongest seeding (every single too) that
``auto`` uses. Theorem 5.1's ratio (:func:`approximation_bound`) is checked against the
optimum on every benchmark instance.

Deviations from the paper, in all readings:

- Algorithm 3, line 25 (``Cost(CP_i) + C_m^i ≤ R``): a query fits only if its new tasks
  also pack node by node (largest first, best fit, falling back to the paper's
  most-free-node rule at the end of Section 5); the paper checks the pooled ``R`` and
  assigns afterwards. On one node (the seed's Fig. 16 setting) the two agree.
- Section 5's extension step ("the failed query that has the largest profit density"): ties go
  to the higher priority, then the lower cost, then the first query; the seed
  keeps the last of equal densities (``PD ≥ maxDens``).
- Algorithm 3, line 32 (the plan "where the sum of priorities … is the maximum"):
  ties go to more recovered queries, then the lower cost.
- failed tasks that belong to no failed query are recovered where capacity is
  left (they earn nothing and cost no query anything); the seed has no such tasks.
- a work budget (``time_limit``) stops starting new candidates; with the
  default the seed's 18-query instances always finish.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace

from planners.budget import WorkBudget
from planners.graph import TaskGraph
from planners.recovery.model import (
    _EPS,
    RecoveryStep,
    _fill_orphans,
    _place,
    _Problem,
    _remaining_after,
    failed_queries,
)

__all__ = [
    "PRUNED_PAIR_POOL",
    "approximation_bound",
    "recover_best_density",
    "recover_best_density_pruned",
    "recover_best_density_strong",
]

PRUNED_PAIR_POOL = 48
"""``best-density-pruned`` seeds pairs only among this many densest queries."""


def approximation_bound(graph: TaskGraph, failed: Collection[str]) -> float:
    """Theorem 5.1's ratio ``1 − e^(−1/d)``, ``d`` the most failed queries sharing a failed task.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        Ids of the failed tasks.

    Returns
    -------
    float
        The ratio the seed claims BestDensity's recovered priority reaches
        against the optimum; ``1.0`` when nothing failed.

    Raises
    ------
    InvalidTopology
        If ``failed`` names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...                     latency={"s": 1, "a": 1, "b": 1})
    >>> round(approximation_bound(g, ["s"]), 4)  # s is shared by 2 queries
    0.3935
    >>> round(approximation_bound(g, ["a"]), 4)
    0.6321

    Notes
    -----
    The proof (Appendix D.2) starts from "the first 2 queries in
    RP*", so it assumes the optimum recovers at least two queries. When it
    recovers one, the seed's single candidate is the *densest* query, not the
    most valuable one, and the ratio can fall to nearly 0 (see
    ``tests/unit/test_recovery_seed.py``); ``best-density-strong`` seeds every single
    query and so recovers at least the best single one.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5, Theorem 5.1.
    """
    share: dict[str, int] = {}
    for tasks in failed_queries(graph, failed).values():
        for t in tasks:
            share[t] = share.get(t, 0) + 1
    d = max(share.values(), default=0)
    return 1.0 if d == 0 else 1.0 - math.exp(-1.0 / d)


def recover_best_density(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The seed's BestDensity (Algorithm 3) as written: the densest single plus every pair.

    The profit density of a failed query ``Q_i`` given the tasks already in a
    candidate plan is ``prt_i / Σ c_k / f_k`` over its failed tasks ``p_k`` not
    yet in the plan, where ``c_k`` is the CPU of ``p_k`` and ``f_k`` the number
    of still-unrecovered failed queries sharing it (Definition 3, Section 5).
    The candidate plans are the densest single query that fits (Algorithm 3,
    lines 9–10) and every pair of queries that fits (lines 11–19); each is extended
    greedily with the densest query that still fits (lines 20–31); the plan
    with the highest recovered priority wins (line 32). A query "fits" only if
    its new tasks pack on the nodes (see the module's deviations).

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
    With M failed queries there are up to ``M(M−1)/2 + 1`` candidates
    (Section 5), each extended at most M times over M queries: O(M⁴·F) in this direct
    form (the seed states O(M³ log M) for its bookkeeping). The seed proves
    ``1 − e^(−1/d)`` of the pooled optimum (:func:`approximation_bound`), which
    needs an optimum of two or more queries.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5, Algorithm 3 and Theorem 5.1.
    """
    return _best_density(
        graph,
        failed,
        capacity,
        time_limit,
        name="best-density",
        pair_pool_size=None,
        all_singles=False,
    )


def recover_best_density_pruned(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """BestDensity with its pairs drawn from the 48 densest queries only (bounded time).

    As :func:`recover_best_density`, except that pairs (lines 11–19) are formed
    only among the :data:`PRUNED_PAIR_POOL` densest queries that fit, which
    bounds the candidates at 1 + 48·47/2 whatever ``M`` is. Identical to the
    seed's for ``M ≤ 48``; the loss past that is measured in
    ``bench/bench_recovery.py`` (docs/benchmarks/index.md).

    Parameters
    ----------
    graph, failed, capacity, time_limit:
        As for :func:`recover_best_density`.

    Returns
    -------
    RecoveryStep

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "a-0", "b-0"], [("s-0", "a-0"), ("s-0", "b-0")],
    ...     latency={"s-0": 1, "a-0": 1, "b-0": 1}, weight={"s-0": 1, "a-0": 1, "b-0": 2},
    ...     priority={"a-0": 1, "b-0": 5})
    >>> recover_best_density_pruned(g, ["s-0", "a-0", "b-0"], {"n1": 3.0}).recovered_priority
    5.0

    Notes
    -----
    O(min(M, 48)² · M² · F).

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5, Algorithm 3, lines 11–19 (the pairs); the pruning is Backstop's.
    """
    return _best_density(
        graph,
        failed,
        capacity,
        time_limit,
        name="best-density-pruned",
        pair_pool_size=PRUNED_PAIR_POOL,
        all_singles=False,
    )


def recover_best_density_strong(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """BestDensity seeded with the empty plan, *every* single query and every pair.

    The seed's single candidate is only the densest query (lines 9–10); seeding
    every single one as well means the plan recovers at least the most valuable
    query that fits, which the seed's reading can miss by any factor when the
    optimum is one query (see :func:`approximation_bound`). ``auto`` starts here.

    Parameters
    ----------
    graph, failed, capacity, time_limit:
        As for :func:`recover_best_density`.

    Returns
    -------
    RecoveryStep
        Never below the best single query that packs.

    Examples
    --------
    >>> g = TaskGraph.build(["a-0", "b-0"], [], latency={"a-0": 1, "b-0": 1},
    ...     weight={"a-0": 0.1, "b-0": 1.0}, priority={"a-0": 1, "b-0": 5})
    >>> recover_best_density(g, ["a-0", "b-0"], {"n": 1.0}).recovered_queries
    ('a-0',)
    >>> recover_best_density_strong(g, ["a-0", "b-0"], {"n": 1.0}).recovered_queries
    ('b-0',)

    Notes
    -----
    O(M²) candidates as :func:`recover_best_density` (M more singles).

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5, Algorithm 3 (lines 1–19), with more seeds.
    """
    return _best_density(
        graph,
        failed,
        capacity,
        time_limit,
        name="best-density-strong",
        pair_pool_size=None,
        all_singles=True,
    )


def _density(prob: _Problem, plan: int, q: int, share: list[int]) -> tuple[float, float]:
    """Query ``q``'s priority per shared CPU of the tasks ``plan`` lacks, and their CPU."""
    new = prob.qmask[q] & ~plan
    cost = 0.0
    denom = 0.0
    for p in prob.bits(new):
        cost += prob.weight[p]
        denom += prob.weight[p] / max(1, share[p])
    pd = prob.qprio[q] / denom if denom > 0 else math.inf
    return pd, cost


def _extend(prob: _Problem, plan: int, placement: dict[int, str], rem: dict[str, float]) -> int:
    """Add the densest query that fits until none does (``placement``, ``rem`` updated)."""
    nq = prob.nq
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
            pd, cost = _density(prob, plan, q, share)
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


def _seeds(prob: _Problem, pair_pool_size: int | None, all_singles: bool) -> list[tuple[int, ...]]:
    """The candidate plans (Algorithm 3, lines 1–19): the densest fitting query, every pair."""
    nq = prob.nq
    share0 = [0] * len(prob.failed)
    for m in prob.qmask:
        for p in prob.bits(m):
            share0[p] += 1
    fits = [q for q in range(nq) if prob.cost(prob.qmask[q]) <= prob.total + _EPS]
    by_density = sorted(fits, key=lambda q: (-_density(prob, 0, q, share0)[0], q))
    pair_pool = sorted(by_density if pair_pool_size is None else by_density[:pair_pool_size])
    seeds: list[tuple[int, ...]] = [()] if all_singles else []
    seeds += [(q,) for q in (by_density if all_singles else by_density[:1])]
    seeds += [
        (a, b)
        for i, a in enumerate(pair_pool)
        for b in pair_pool[i + 1 :]
        if prob.cost(prob.qmask[a] | prob.qmask[b]) <= prob.total + _EPS
    ]
    return seeds


def _best_density(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    time_limit: float,
    *,
    name: str,
    pair_pool_size: int | None,
    all_singles: bool,
) -> RecoveryStep:
    budget = WorkBudget(time_limit)
    prob = _Problem(graph, failed, capacity)
    nq = prob.nq
    seeds = _seeds(prob, pair_pool_size, all_singles)
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
        plan = _extend(prob, plan, placement, rem)
        pr = prob.priority(plan)
        key = (pr, sum(1 for m in prob.qmask if m & ~plan == 0), -prob.cost(plan))
        if best_plan is None or key > best_plan:
            best_plan, best_place = key, placement
        if pr >= sum(prob.qprio) - _EPS:
            break  # every failed query recovered: nothing can do better
    _fill_orphans(prob, best_place, _remaining_after(prob, best_place))
    step = prob.step(name, best_place, None)
    if step.recovered_priority >= step.failed_priority - _EPS:
        step = replace(step, optimal=True, upper_bound=step.failed_priority)
    return step
