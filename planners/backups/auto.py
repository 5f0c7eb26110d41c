"""The default minimum-backup algorithm: shape detection, a greedy plan against a lower
bound, local search, then CP-SAT."""

from __future__ import annotations

from itertools import combinations
from math import comb

from planners.backups.bounds import path_lower_bound
from planners.backups.common import (
    EPS,
    BackupPlan,
    _ell,
    _finish,
    _forced,
    _require_feasible,
    _tree_greedy,
    topology_shape,
)
from planners.backups.dag import _ftc_dag
from planners.backups.exact import _exact
from planners.backups.local import _improve
from planners.budget import WorkBudget
from planners.graph import TaskGraph

PROOF_MAX_WORK = 200_000
"""Most task visits (plans tried × tasks and edges) ``auto`` spends enumerating the plans
of one backup fewer before it hands the proof to CP-SAT (a few tens of milliseconds)."""

CP_SAT_MIN_SECONDS = 0.5
"""Fewest nominal seconds of budget left for which ``auto`` still calls CP-SAT. Building the
model of a 10,000-task graph takes seconds of wall time by itself, which a solve of a few
hundredths of a nominal second cannot repay; with less left, the local-search plan stands,
not proven minimum. Counted in work, so the choice is the same on every machine."""

CP_SAT_SIZE_PER_SECOND = 5_000
"""Model entries (tasks plus edges) that one nominal second of budget left buys CP-SAT.
Its presolve, which CP-SAT's deterministic time hardly counts, takes about 4 s of wall time
on a model of 62,000 entries on the 2-core CI machine (a 10,000-task graph) and then finds
no plan better than local search's; ``auto`` calls CP-SAT only on a model this rate says
the budget left can pay for (at the default 10 s, up to 50,000 entries). A size, not a
clock: the choice is the same on every machine."""

# --------------------------------------------------------------------------- auto, registry


def _fewer(graph: TaskGraph, bound: float, flags: list[bool], forced: list[bool]) -> bool | None:
    """Whether ``flags`` is minimum, by trying every plan with one backup fewer.

    Feasibility is monotone (backing up one more task only removes terms of eq. 3), so
    when no plan of ``k - 1`` backups (with every forced one) keeps the bound, none
    smaller does either. Sinks never need a backup, so only the other free tasks are
    tried. Lowers ``flags`` in place while a smaller plan is found; returns ``True``
    once proven minimum, ``None`` when the next step would try more than
    :data:`PROOF_MAX_WORK` allows (CP-SAT decides then).
    """
    free = [u for u, ss in enumerate(graph.succs) if ss and not forced[u]]
    size = len(graph) + sum(len(ps) for ps in graph.preds)
    while True:
        k = sum(flags) - 1 - sum(forced)  # free backups in a plan of one fewer
        if k < 0:
            return True
        if comb(len(free), k) * size > PROOF_MAX_WORK:
            return None
        for combo in combinations(free, k):
            trial = list(forced)
            for u in combo:
                trial[u] = True
            if max(_ell(graph, trial)) <= bound + EPS:
                flags[:] = trial
                break
        else:
            return True


def backups_auto(graph: TaskGraph, bound: float, *, time_limit: float = 10.0) -> BackupPlan:
    """The default: the exact linear algorithm where the shape allows, else the best found.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Seconds for local search and CP-SAT on general DAGs: a deterministic work
        limit (:mod:`planners.budget`; also wall seconds inside a
        :func:`planners.budget.wall_limit`).

    Returns
    -------
    BackupPlan
        ``algorithm`` names the method used: ``auto:tree`` (line(s) and trees,
        always optimal), ``auto:greedy`` (the greedy plan, where it met the lower
        bound or beat the heuristic; then as for the next), ``auto:dag+local`` (the
        heuristic met the lower bound, no
        plan of one backup fewer keeps the bound, or the solver did not beat it),
        ``auto:enumerate`` (a plan of fewer backups found by trying them all), or
        ``auto:exact``.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("sabck", [("s", "a"), ("s", "b"), ("a", "c"), ("b", "c"),
    ...                               ("c", "k")], latency=dict.fromkeys("sabck", 1.0))
    >>> plan = backups_auto(g, 2.0)
    >>> len(plan.backups), plan.optimal
    (2, True)

    Notes
    -----
    Line(s) and trees: O(N) and optimal (:func:`backups_tree`). Other DAGs: first
    the lower bound of disjoint paths (:func:`planners.backups.bounds.path_lower_bound`)
    and the tree algorithm's greedy run on the DAG (an input is backed up when a
    consumer would otherwise exceed ``R``), both O(N + E); where the greedy plan meets
    the bound (uniform layers, such as forward chains joined by shuffles, at any
    scale) it is minimum and returned. Otherwise
    the seed's DAG heuristic (O(N²) worst case), local search (drop each
    backup that is not needed; add one task where that lets two backups go),
    each move checked incrementally against the bound, stopping once the plan meets
    the lower bound; the greedy plan replaces it where smaller. If the
    plan is above the bound and trying every plan of one
    backup fewer (where there are few) does not settle it, CP-SAT starts from it, with
    the bound as a constraint, and
    keeps whichever plan is smaller when the budget ends, or earlier once the
    solver has found nothing better for a tenth of the budget (at least 0.5 s).

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV (Algorithms 1-4) and problem (5).
    """
    _require_feasible(graph, bound)
    if topology_shape(graph) != "dag":
        return _finish(graph, bound, "auto:tree", _tree_greedy(graph, bound), True)
    lower = path_lower_bound(graph, bound)
    lazy = _tree_greedy(graph, bound)  # valid on any DAG: every input that would break R
    if sum(lazy) <= lower:
        return _finish(graph, bound, "auto:greedy", lazy, True)
    budget = WorkBudget(time_limit)
    flags = _ftc_dag(graph, bound)
    if sum(flags) > lower:
        flags = _improve(graph, bound, flags, budget=budget, floor=lower)
    source = "auto:dag+local"
    if sum(lazy) < sum(flags):
        flags, source = lazy, "auto:greedy"
    if sum(flags) <= lower:
        return _finish(graph, bound, source, flags, True)
    heuristic = sum(flags)
    proven = _fewer(graph, bound, flags, _forced(graph, bound))
    method = source if sum(flags) == heuristic else "auto:enumerate"
    if proven:
        return _finish(graph, bound, method, flags, True)
    left = budget.seconds_left()
    size = len(graph) + sum(len(ps) for ps in graph.preds)
    if left < CP_SAT_MIN_SECONDS or size > CP_SAT_SIZE_PER_SECOND * left:
        return _finish(graph, bound, method, flags, False)
    patience = max(0.5, 0.1 * time_limit)
    exact, proven = _exact(
        graph,
        bound,
        left,
        flags,
        patience,
        lower=lower,
    )
    if exact is not None and sum(exact) <= sum(flags):
        return _finish(graph, bound, "auto:exact", exact, proven)
    return _finish(graph, bound, method, flags, False)
