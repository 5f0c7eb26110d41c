"""Beyond the seeds: local search over the greedy packings, CP-SAT, and ``auto``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from planners.errors import Infeasible
from planners.graph import TaskGraph
from planners.placement.cpsat import _cp_sat
from planners.placement.model import _EPS, Node, NodePool, Placement
from planners.placement.orders import _height_order, _wud_order
from planners.placement.state import (
    Strategy,
    _finish,
    _greedy,
    _no_room,
    _NoRoom,
    _prepare,
    _Problem,
    _State,
    _state_from,
)

_EXACT_MAX_TASKS = 60  # "auto" calls CP-SAT only up to this many tasks
_EXACT_MAX_VARS = 60_000  # ... and only if the model stays this small


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


def _exact_slots(prob: _Problem, incumbent: _State) -> list[Node]:
    """The nodes CP-SAT needs: a plan as good as ``incumbent`` uses at most ``k`` nodes.

    ``k = len(incumbent.used)``. Without failure domains a node enters the model only
    through its CPU (its failure group is itself), and a larger node can take whatever
    a smaller one can: any plan on ``k`` nodes maps onto the ``k`` largest (the i-th
    largest it uses is no larger than the i-th largest there is). So the ``k`` largest
    nodes plus the incumbent's own (for the hint) lose no solution the objective
    prefers, and the model shrinks from every node of the cluster to at most ``2k``.
    """
    k = len(incumbent.used)
    if prob.pool.unbounded:
        return list(prob.slots[:k])
    if any(s.domain is not None for s in prob.slots):
        return list(prob.slots)
    keep = {incumbent.slots[j].name for j in incumbent.used}
    keep.update(s.name for s in prob.slots[:k])  # the pool's slots are largest first
    return [s for s in prob.slots if s.name in keep]


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
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Model (4)–(9) (solved there by exhaustive search).
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
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Algorithm 1 and Section 4.2.
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
