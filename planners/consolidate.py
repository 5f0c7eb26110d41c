"""Scale-down consolidation: fewer nodes, reached only through steps that keep the bound.

After a restore onto whatever capacity was there, or once a larger node joins, the
tasks may run on more nodes than a plan needs. Freeing a node is worth some restarts,
but never a moment in which one node failure would break the bound. So, like the restore
(:mod:`planners.restore`), consolidation is a minimum-migration target (here: at most as
many nodes as a fresh plan needs, the fewest moves for that) reached in small batches;
because the current placement keeps the bound, the schedule's rule (never worse than
``max(previous, bound)``) means every intermediate state keeps it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from planners.errors import Infeasible
from planners.evaluate import check_plan, worst_node_failure
from planners.graph import TaskGraph
from planners.migration import relabel_nodes
from planners.placement import Node, NodePool, place
from planners.restore import RESTORE_BATCH, RestorePlan, min_migration, move_schedule

__all__ = ["plan_consolidation"]


def plan_consolidation(
    graph: TaskGraph,
    nodes: Sequence[Node],
    current: Mapping[str, str],
    *,
    bound: float,
    backups: Iterable[str] | None,
    time_limit: float = 2.0,
    batch: int = RESTORE_BATCH,
) -> RestorePlan | None:
    """Batches that move ``current`` onto fewer nodes, every step keeping the bound.

    Returns ``None`` when there is nothing to gain: ``current`` does not keep
    the bound on ``nodes`` (that is a restore's job), or no placement with the
    fresh plan's node count (:func:`planners.placement.place` with ``backups``)
    needs fewer nodes than ``current`` uses.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> p = plan_consolidation(g, [Node("n1", 2), Node("n2", 2)], {"a": "n1", "b": "n2"},
    ...                        bound=2, backups=["a"])
    >>> len(p.moved), len(set(p.assignment.values())), p.worst <= 2
    (1, 1, True)

    Notes
    -----
    A fresh placement, then :func:`planners.restore.min_migration` limited to
    its node count and :func:`planners.restore.move_schedule`.
    """
    blist = None if backups is None else list(backups)
    capacity = {n.name: n.cpu for n in nodes}
    if set(current) != set(graph.tasks) or check_plan(
        graph, bound=bound, backups=blist, assignment=current, capacity=capacity
    ):
        return None
    used = len(set(current.values()))
    pool = NodePool.of(nodes)
    try:
        fresh = place(graph, pool, bound=bound, backups=blist, time_limit=time_limit / 2)
    except Infeasible:
        return None
    if fresh.nodes_used >= used:
        return None
    hint = fresh.assignment if pool.domains() else relabel_nodes(fresh, graph, nodes, current)
    try:
        mig = min_migration(
            graph,
            nodes,
            current,
            bound=bound,
            backups=blist,
            hint=hint,
            time_limit=time_limit,
            max_nodes=fresh.nodes_used,
        )
    except Infeasible:
        return None
    steps = move_schedule(
        graph, current, mig.assignment, backups=blist, capacity=capacity, bound=bound, batch=batch
    )
    return RestorePlan(
        assignment=dict(mig.assignment),
        moved=mig.moved,
        steps=tuple(steps),
        worst_before=worst_node_failure(graph, blist, current)[0],
        worst=mig.worst,
        proven=mig.proven,
    )
