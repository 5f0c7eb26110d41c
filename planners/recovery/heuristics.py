"""The seed's operator-centric baseline (OC) and its dynamic programme (DP).

Both follow *Incremental Recovery in Distributed Stream Processing Systems* as written
(Section 7's OC, Appendix B's Algorithm 4); BestDensity, the paper's main heuristic, has
its own module.
"""

from __future__ import annotations

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
    Appendix B, Algorithm 4.
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
