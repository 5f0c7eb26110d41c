"""Re-placement that moves as few running tasks as possible.

Every pod that moves is a task restarted from its last checkpoint, so a re-plan
must not move pods for nothing. When the placement in force still keeps the bound on the
nodes there are now, a re-plan keeps it (zero pods move) unless a fresh plan needs fewer
nodes. Otherwise the fresh plan's groups of tasks are put on the nodes where most of
their tasks already run. The planners are deterministic (:mod:`planners.budget`), so an
unchanged input gives the same fresh plan, and the dry run (``backstop plan
--from-cluster``) shows exactly what the operator will do.

:func:`place_min_migration` is the one entry point; the operator's re-plans
(spec changes, a re-plan after a recovery that broke the bound) go through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planners.errors import Infeasible
from planners.evaluate import check_plan, worst_correlated_failure, worst_node_failure
from planners.fewest_moves import min_migration
from planners.graph import TaskGraph
from planners.placement import Node, NodePool, Placement, place, plan_joint, require_valid

__all__ = ["current_still_valid", "place_min_migration", "relabel_nodes"]

_EPS = 1e-9


def current_still_valid(
    graph: TaskGraph,
    pool: NodePool,
    current: Mapping[str, str],
    *,
    bound: float,
    backups: Iterable[str] | None,
) -> bool:
    """Whether ``current`` places every task on the pool's nodes within capacity and bound.

    Every single node failure (and, when the nodes carry domains, every domain
    failure) must keep ``bound`` under ``backups`` (``None``: every task keeps one).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> pool = NodePool.of([Node("n1", 2), Node("n2", 2)])
    >>> current_still_valid(g, pool, {"a": "n1", "b": "n1"}, bound=2, backups=None)
    True
    >>> current_still_valid(g, pool, {"a": "n1", "b": "n1"}, bound=1, backups=None)
    False
    """
    if pool.unbounded or set(current) != set(graph.tasks):
        return False
    blist = None if backups is None else list(backups)
    capacity = {n.name: n.cpu for n in pool.nodes}
    if check_plan(graph, bound=bound, backups=blist, assignment=current, capacity=capacity):
        return False
    domains = pool.domains()
    if domains:
        h, _ = worst_correlated_failure(graph, blist, current, domains=domains)
        return h <= bound + _EPS
    return True


def relabel_nodes(
    placement: Placement, graph: TaskGraph, nodes: Iterable[Node], current: Mapping[str, str]
) -> dict[str, str]:
    """Rename the plan's nodes to keep as many tasks as possible where they run now.

    A plan partitions the tasks into groups; which node hosts which group is
    free as long as the group fits. A min-cost assignment (OR-Tools) between
    groups and nodes maximises the tasks that stay put; nodes are taken in name
    order, so ties break the same way every time. Failure domains make node
    identity matter, so callers skip this when domains are in use.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [], latency={"a": 1, "b": 1})
    >>> p = Placement("x", 1.0, {"a": "n1", "b": "n2"}, None, 2, 1.0, None)
    >>> relabel_nodes(p, g, [Node("n1", 1), Node("n2", 1)], {"a": "n2"})
    {'a': 'n2', 'b': 'n1'}
    """
    from ortools.graph.python import linear_sum_assignment

    groups = placement.by_node()
    if not current or not groups:
        return dict(placement.assignment)
    ordered = sorted(nodes, key=lambda n: n.name)
    names = list(groups)
    load = {g: sum(graph.weight[graph.index(t)] for t in groups[g]) for g in names}
    solver = linear_sum_assignment.SimpleLinearSumAssignment()
    for gi, g in enumerate(names):
        for ni, n in enumerate(ordered):
            if load[g] <= n.cpu + _EPS:
                stay = sum(1 for t in groups[g] if current.get(t) == n.name)
                solver.add_arc_with_cost(gi, ni, -stay)
    if solver.solve() != solver.OPTIMAL:
        return dict(placement.assignment)
    rename = {names[gi]: ordered[solver.right_mate(gi)].name for gi in range(len(names))}
    return {t: rename[n] for t, n in placement.assignment.items()}


def place_min_migration(
    graph: TaskGraph,
    pool: NodePool,
    current: Mapping[str, str] | None,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    choose_backups: bool = True,
    algorithm: str = "auto",
    time_limit: float = 10.0,
    domains: Mapping[str, str] | None = None,
) -> Placement:
    """A valid placement that moves as few tasks of ``current`` as this planner can.

    1. A fresh plan: :func:`~planners.placement.plan_joint` when
       ``choose_backups``, else :func:`~planners.placement.place` with ``backups``.
    2. If ``current`` (with ``backups``, the backups in force) still covers every
       task, fits and keeps the bound, and the fresh plan does not need fewer
       nodes, ``current`` is kept as it is: zero tasks move. With
       ``choose_backups`` this needs the backups in force (``backups`` given):
       keeping the placement but changing every task's role would restart
       every pod anyway.
    3. Otherwise the fewest moves that keep the bound with the fresh plan's
       backups on at most as many nodes as the fresh plan uses
       (:func:`planners.fewest_moves.min_migration`, CP-SAT), starting from
       the fresh plan with its node groups renamed onto the nodes where most of
       their tasks run (:func:`relabel_nodes`; not with failure domains); that
       renamed plan is kept if the search finds nothing that moves fewer tasks.

    Parameters
    ----------
    graph:
        The task DAG.
    pool:
        The nodes now (explicit; ``current`` on an on-demand pool is never kept).
    current:
        ``{task: node}`` in force (may be partial or invalid), or ``None``.
    bound:
        Recovery-latency bound ``R`` in seconds.
    backups:
        The backups in force with ``current`` (``None``: every task); with
        ``choose_backups=False`` also the backups the fresh plan must use.
    choose_backups:
        Whether the fresh plan chooses the backups too (the joint plan).
    algorithm, time_limit, domains:
        As in :func:`~planners.placement.place`.

    Returns
    -------
    Placement
        ``algorithm`` ends in ``+kept`` when ``current`` was kept.

    Raises
    ------
    Infeasible
        As the fresh plan raises it (``current`` is never kept then either: a
        plan that exists proves the bound can be kept, not the reverse).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> pool = NodePool.of([Node("n1", 1), Node("n2", 1), Node("n3", 1)])
    >>> p = place_min_migration(g, pool, {"a": "n3", "b": "n2"}, bound=2, backups=["a"])
    >>> p.assignment, p.algorithm
    ({'a': 'n3', 'b': 'n2'}, 'auto+kept')

    With bound 1, ``a`` and ``b`` can no longer share a node: one of them moves,
    the other stays on ``n3``.

    >>> g2 = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1},
    ...                      weight={"a": 0.5, "b": 0.5})
    >>> p = place_min_migration(g2, pool, {"a": "n3", "b": "n3"}, bound=1, backups=["a"])
    >>> sorted(p.assignment.values()).count("n3"), p.nodes_used
    (1, 2)

    Notes
    -----
    The fresh plan's cost, plus O(V + E) per node for the validity check, a
    min-cost assignment over (groups × nodes) for the renaming and, when the
    plan in force is no longer valid, the minimum-migration search with the
    same budget (minimal over all placements for the fresh plan's backups,
    when it finishes; see :mod:`planners.restore`).
    """
    pool = pool.with_domains(domains)
    fresh = _fresh_plan(graph, pool, bound, backups, choose_backups, algorithm, time_limit)
    if not current:
        return fresh
    kept_backups = None if backups is None else tuple(dict.fromkeys(backups))
    known = not (choose_backups and backups is None)
    if known and current_still_valid(graph, pool, current, bound=bound, backups=kept_backups):
        used = len(set(current.values()))
        if fresh.nodes_used >= used:
            assignment = {t: current[t] for t in graph.tasks}
            return Placement(
                algorithm=f"{fresh.algorithm}+kept",
                bound=float(bound),
                assignment=assignment,
                backups=kept_backups,
                nodes_used=used,
                worst=worst_node_failure(graph, kept_backups, assignment)[0],
                optimal=None,
            )
    if pool.unbounded:
        return fresh
    return _fewest_moves(graph, pool, current, fresh, bound, time_limit)


def _fresh_plan(
    graph: TaskGraph,
    pool: NodePool,
    bound: float,
    backups: Iterable[str] | None,
    choose_backups: bool,
    algorithm: str,
    time_limit: float,
) -> Placement:
    """The plan from scratch: the joint plan, or a placement for ``backups``."""
    if choose_backups:
        return plan_joint(graph, pool, bound=bound, algorithm=algorithm, time_limit=time_limit)
    return require_valid(  # a *-2sp baseline's plan may break the bound
        place(
            graph,
            pool,
            bound=bound,
            backups=backups,
            algorithm=algorithm,
            time_limit=time_limit,
        )
    )


def _fewest_moves(
    graph: TaskGraph,
    pool: NodePool,
    current: Mapping[str, str],
    fresh: Placement,
    bound: float,
    time_limit: float,
) -> Placement:
    """Step 3 of :func:`place_min_migration`: the fresh plan's backups, moved the least."""
    start = fresh.assignment if pool.domains() else relabel_nodes(fresh, graph, pool.nodes, current)
    assignment, algorithm = start, fresh.algorithm
    try:  # the fewest moves for the fresh plan's backups, the renamed plan as the hint
        mig = min_migration(
            graph,
            pool.nodes,
            current,
            bound=bound,
            backups=fresh.backups,
            hint=start,
            time_limit=time_limit,
            max_nodes=fresh.nodes_used,  # nodes first, then moves (as in step 2)
        )
    except Infeasible:
        mig = None
    if mig is not None and len(mig.moved) < sum(
        1 for t in graph.tasks if current.get(t) != start[t]
    ):
        assignment, algorithm = mig.assignment, f"{fresh.algorithm}+min-migration"
    return Placement(
        algorithm=algorithm,
        bound=fresh.bound,
        assignment=assignment,
        backups=fresh.backups,
        nodes_used=len(set(assignment.values())),
        worst=worst_node_failure(graph, fresh.backups, assignment)[0],
        optimal=fresh.optimal if assignment is start else None,
    )
