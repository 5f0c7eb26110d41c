"""Selective active replication on spare CPU.

Seed: Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
Event Processing Systems*.

Upstream backups bound how long recovery takes, but a query still goes dark while its
failed tasks restart. An active replica of a task takes over at once, so where the
cluster has spare CPU we can spend it on replicas, and the question is which tasks are
worth it. The seed rates tasks by an importance heuristic (QOD: how many queries depend
on the task; LU: how cheap it is; their product QOD·LU; or a random order as its
baseline), selects them in that order until the spare resources are used up, and places
the replicas by colored bin packing so that few replicas share a host.

Modules: ``model`` (plans, importance, the single-node availability and the
validator), ``crash`` (the seed's availability model: independent host crashes
with probability ``p``, exact where small, seeded Monte Carlo where large),
``placement`` (the placement step every selection shares, and the knapsack),
``select`` (the seed's sort-and-fill selection, Backstop's exact knapsack and
``best``, registered in :data:`SELECTIONS`), ``query`` (the seed's query-level
importance and selection, and its procedure 2 for replication levels), ``genetic``
(the seed's optimizer by genetic search), ``loadmodel`` (the seed's rate, load and
network model) and ``dynamic`` (migrating and splitting operators with their replicas off
overloaded hosts, the seed's dynamic replication). Every name is re-exported here.
"""

from __future__ import annotations

from planners.replication.crash import crash_availability, query_survival
from planners.replication.dynamic import Rebalance, plan_rebalance
from planners.replication.genetic import replicate_genetic
from planners.replication.loadmodel import OperatorLoad, load_model, load_rem
from planners.replication.model import (
    STRATEGIES,
    ReplicationPlan,
    availability,
    check_replication,
    importance,
)
from planners.replication.mqo import InvalidQuery, QueryGraph, add_query, to_task_graph
from planners.replication.placement import HOST_ORDERS, _knapsack
from planners.replication.query import (
    QUERY_COMBINE,
    query_importance,
    replicate_direct_level,
    replicate_query_fill,
)
from planners.replication.select import (
    SELECTIONS,
    ReplicationAlgorithm,
    replicate_best,
    replicate_knapsack,
    replicate_sort_fill,
    select_replicas,
)

__all__ = [
    "HOST_ORDERS",
    "QUERY_COMBINE",
    "SELECTIONS",
    "STRATEGIES",
    "InvalidQuery",
    "OperatorLoad",
    "QueryGraph",
    "Rebalance",
    "ReplicationAlgorithm",
    "ReplicationPlan",
    "_knapsack",
    "add_query",
    "availability",
    "check_replication",
    "crash_availability",
    "importance",
    "load_model",
    "load_rem",
    "plan_rebalance",
    "query_importance",
    "query_survival",
    "replicate_best",
    "replicate_direct_level",
    "replicate_genetic",
    "replicate_knapsack",
    "replicate_query_fill",
    "replicate_sort_fill",
    "select_replicas",
    "to_task_graph",
]
