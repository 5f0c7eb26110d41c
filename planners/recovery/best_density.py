"""The seed's BestDensity (Algorithm 3)."""

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
)


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
