"""The RTAP seed's packing with backtracking: tasks made unfit are picked out and re-queued."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from planners.graph import TaskGraph
from planners.placement.model import _EPS, NodePool, Placement
from planners.placement.orders import _wud_order
from planners.placement.state import (
    _finish,
    _greedy,
    _no_room,
    _NoRoom,
    _prepare,
    _State,
)


def _evicted(state: _State, i: int, k: int) -> set[int] | None:
    """The tasks that adding ``i`` to node ``k`` makes unfit, or ``None`` if ``i`` is.

    ``ℓ`` is evaluated over ``k``'s failure group with ``i`` added; every task
    whose ``ℓ`` then exceeds the bound is unfit. Removing tasks never raises
    another's ``ℓ`` (the model is monotone in the failed set), so once these
    are picked out the rest of the group keeps the bound.
    """
    lat = state.lat
    fail = state.group.get(state.key[k], set()) | {i}
    ell = lat.ell(lat.relevant(fail))
    if ell[i] > state.bound + _EPS:
        return None
    return {v for v in fail if ell[v] > state.bound + _EPS}


def _choose(state: _State, i: int, bins: Sequence[int], may_evict: bool) -> tuple[int, set[int]]:
    """Best fit over opened nodes: the least CPU left once ``i`` is in and the unfit are out."""
    w, cpu = state.graph.weight, [s.cpu for s in state.slots]
    best: tuple[float, int, set[int]] | None = None
    for k in bins:
        out = _evicted(state, i, k)
        if out is None or (out and not may_evict):
            continue
        load = state.load[k] - sum(w[v] for v in out) + w[i]
        if load > cpu[k] + _EPS:
            continue
        resid = cpu[k] - load
        if best is None or resid < best[0] - _EPS:
            best = (resid, k, out)
    if best is None:
        raise _NoRoom(i)
    return best[1], best[2]


def _pack_backtracking(state: _State, order: Sequence[int]) -> _State:
    """Pack ``order`` as one group; tasks made unfit go back into the queue at their rank.

    A task may pick others out only the first time it is packed; a task that
    was picked out is packed again only where nothing else becomes unfit, so
    the queue empties after at most ``n`` evicting placements.
    """
    rank = {v: r for r, v in enumerate(order)}
    queue = [(r, v) for v, r in rank.items()]
    heapq.heapify(queue)
    requeued: set[int] = set()
    bins: list[int] = []
    while queue:
        _, i = heapq.heappop(queue)
        try:
            k, out = _choose(state, i, bins, may_evict=i not in requeued)
        except _NoRoom:
            k, out = state.open_new(i, set(bins).__contains__), set()
            bins.append(k)
        for v in out:
            state.remove(v)
            requeued.add(v)
            heapq.heappush(queue, (rank[v], v))
        state.put(i, k)
    return state


def place_rtap_bf_backtrack(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    time_limit: float = 10.0,
) -> Placement:
    """Best fit in weighted-upstream-degree order, picking out the tasks a new one makes unfit.

    The seed's packing before grouping (Section 4.3): tasks are taken in WUD
    order (ties by breadth-first order) as one queue; a task goes to the
    opened node with the least CPU left where its own recovery latency keeps
    the bound, and the tasks on that node it pushes over the bound ("extra
    heights will be added to items 7, 6, 5, and 4, which makes them unfit")
    are "picked out and put back into the item queue for further decisions"
    at their place in the order. The result is compared with the seed's
    Algorithm 1 packing by best fit (:func:`place_rtap_bf`, its greedy start),
    and the one with fewer nodes is returned.

    Parameters
    ----------
    graph, pool, bound, backups, time_limit:
        As in :func:`planners.placement.place_nfdh` (``time_limit`` unused).

    Returns
    -------
    Placement
        Never more nodes than :func:`place_rtap_bf` on the same input.

    Raises
    ------
    Infeasible
        As in :func:`planners.placement.place_nfdh`.

    Examples
    --------
    ``b`` (downstream of ``a``) comes first in WUD order; ``a`` then joins its
    node, which makes ``b`` unfit (``ℓ_b = 0.8 + 0.3 > 1``): ``b`` is picked out
    and packed again on a node of its own (``c`` fits best beside ``a``).

    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b")],
    ...                     latency={"a": 0.8, "b": 0.3, "c": 0.5},
    ...                     weight={"a": 0.5, "b": 0.4, "c": 0.5})
    >>> p = place_rtap_bf_backtrack(g, NodePool.uniform(1), bound=1)
    >>> p.nodes_used, p.assignment["a"] == p.assignment["c"] != p.assignment["b"]
    (2, True)

    Notes
    -----
    O(n²) placements at most (each of the ``n`` first placements picks out at
    most ``n`` tasks), each O(m) recovery evaluations for ``m`` opened nodes.

    Deviations from the seed, which describes the backtracking only in words:
    a re-queued task may not pick out others in turn (so the queue empties),
    and the Algorithm 1 plan is kept when the backtracking packing uses more
    nodes. The seed's Fig. 4 topology is drawn, not listed, and its Table 2
    (``t_v`` and ``WUD_v``) cannot rebuild it: no upstream set gives tasks 8
    and 9 their printed WUD by eq. (10) (``docs/benchmarks/rtap-seed.md``), so
    the example here is our own.

    References
    ----------
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency
    Constraint*, Section 4.3 (Fig. 4(b)) and Algorithm 1.
    """
    name = "rtap-bf-backtrack"
    prob = _prepare(graph, pool, bound, backups)
    order = _wud_order(graph)
    plans: list[_State] = []
    failure: _NoRoom | None = None
    for backtracking in (True, False):
        try:
            if backtracking:
                plans.append(_pack_backtracking(prob.state(), order))
            else:
                plans.append(_greedy(prob, order, "bf", grouped=True))
        except _NoRoom as err:  # an explicit pool may hold one packing and not the other
            failure = err
    if not plans:
        assert failure is not None
        raise _no_room(prob, failure, name)
    best = min(plans, key=lambda st: len(st.used))  # the backtracking one on a tie
    return _finish(prob, best, name, None)
