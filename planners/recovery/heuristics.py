"""The seed's operator-centric baseline (OC) and its dynamic programme (DP).

Both follow *Incremental Recovery in Distributed Stream Processing Systems*: Section 7's OC,
and Appendix B's Algorithm 4, whose candidate plans the DP searches with a bound.
BestDensity, the paper's main heuristic, has its own module.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

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
    Section 7 ("OC").
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


def recover_dp(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    time_limit: float = 5.0,
) -> RecoveryStep:
    """The seed's dynamic programme (Algorithm 4): the best union of failed queries within R.

    Like the seed, its candidate plans are unions of whole failed queries'
    task sets whose *total* cost stays within ``R = Σ capacity`` (the seed's
    single-pool problem), and it keeps the one with the highest summed
    priority. Instead of growing every candidate one resource unit at a time,
    it searches them depth first: complete the densest undecided query, or
    rule it out, and drop a branch when a fractional-knapsack bound (each task's
    cost shared among the queries that need it, as in the seed's profit
    density) shows it cannot beat the best plan so far. The bound never cuts
    off a better plan, so a finished search has the same optimum as the seed's
    enumeration. Then plans are tried in decreasing priority until one packs on
    the nodes; since the pooled problem relaxes the per-node one, the first
    plan that packs is optimal when it has the pooled optimum's priority.

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
    O(2^M · M) plans and time for M failed queries in the worst case, as in
    the seed; the bound makes it far cheaper in practice (the seed's 18-query
    instances of Section 7.3 finish in milliseconds at every resource level).
    On a single node it solves exactly the per-node problem.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Appendix B, Algorithm 4, and Definition 3 (profit density).
    """
    budget = WorkBudget(time_limit)
    prob = _Problem(graph, failed, capacity)
    search = _UnionSearch(prob, budget)
    complete = search.run()
    costs = search.seen
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


class _OutOfBudget(Exception):
    """The work budget ran out during :class:`_UnionSearch`."""


class _UnionSearch:
    """Depth-first branch and bound over unions of whole failed queries within the pool.

    Each branch point takes the undecided query of highest profit density and
    first completes it, then rules it out. A query that a plan covers anyway
    is counted without branching, and one whose missing tasks no longer fit is
    dropped. A branch stops when :meth:`_bound` shows it cannot beat the best
    plan so far, which starts as the greedy plan of :meth:`_greedy`.
    """

    def __init__(self, prob: _Problem, budget: WorkBudget) -> None:
        self.prob, self.budget = prob, budget
        start = self._greedy()
        self.seen: dict[int, float] = {0: 0.0, start: prob.cost(start)}
        self.best = prob.priority(start)

    def run(self) -> bool:
        """Search every plan; ``False`` if the budget ran out first."""
        try:
            self._visit(0, 0.0, (1 << self.prob.nq) - 1)
        except _OutOfBudget:
            return False
        return True

    def _visit(self, plan: int, cost: float, undecided: int) -> None:
        prob = self.prob
        self.budget.spend(4 * prob.nq)
        if self.budget.exhausted:
            raise _OutOfBudget  # this visit's work already went past the budget
        self.seen.setdefault(plan, cost)
        value = prob.priority(plan)
        self.best = max(self.best, value)
        room = prob.total - cost
        cand = []
        for q in prob.bits(undecided):
            new = prob.qmask[q] & ~plan
            if new and prob.cost(new) <= room + _EPS:
                cand.append(q)
        if not cand:
            return
        bound, density = self._bound(plan, cand, room)
        if value + bound <= self.best + _EPS:
            return  # no plan in this branch beats the best one so far
        q = max(cand, key=lambda k: (density[k], -k))
        rest = sum(1 << k for k in cand) & ~(1 << q)
        new = prob.qmask[q] & ~plan
        self._visit(plan | new, cost + prob.cost(new), rest)
        self._visit(plan, cost, rest)

    def _bound(self, plan: int, cand: list[int], room: float) -> tuple[float, dict[int, float]]:
        """An upper bound on the priority the ``cand`` queries add within ``room``.

        Each missing task's cost is charged in equal shares to the candidates
        that need it (the seed's profit-density denominator, Definition 3). Any
        set of candidates completed together is charged at most the cost of
        the tasks they add, so the fractional knapsack over these charges bounds
        the gain. Also returns each candidate's density, priority per charge.
        """
        prob = self.prob
        share = [0] * len(prob.weight)
        for q in cand:
            for p in prob.bits(prob.qmask[q] & ~plan):
                share[p] += 1
        charge = {}
        density = {}
        for q in cand:
            c = sum(prob.weight[p] / share[p] for p in prob.bits(prob.qmask[q] & ~plan))
            charge[q] = c
            density[q] = prob.qprio[q] / c if c > _EPS else math.inf
        gain = 0.0
        for q in sorted(cand, key=lambda k: -density[k]):
            if charge[q] <= room:
                gain, room = gain + prob.qprio[q], room - charge[q]
            else:
                return gain + prob.qprio[q] * room / charge[q], density
        return gain, density

    def _greedy(self) -> int:
        """Whole queries by priority per marginal cost while they fit: the first plan to beat."""
        prob = self.prob
        plan, room = 0, prob.total
        while True:
            pick, pick_cost, pick_key = 0, 0.0, -1.0
            for m, pr in zip(prob.qmask, prob.qprio, strict=True):
                new = m & ~plan
                c = prob.cost(new)
                if new and c <= room + _EPS:
                    key = pr / c if c > _EPS else math.inf
                    if key > pick_key:
                        pick, pick_cost, pick_key = new, c, key
            if not pick:
                return plan
            plan, room = plan | pick, room - pick_cost
