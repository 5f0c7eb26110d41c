"""Query-centric recovery scheduling after node loss.

Follows Su, Zhou, *Incremental Recovery in Distributed Stream Processing Systems*.

When several nodes fail together, the surviving and replacement nodes rarely have room
for every failed task at once, and replacements arrive one by one. Restarting tasks in
topological order (the operator-centric way) spends that scarce capacity on tasks that
complete no query. Here each trigger (failure detected, node Ready, node back) gets a
plan that recovers the failed tasks which *fit now, node by node* and maximise the
summed priority of the queries they fully recover. A query is an output task with its
upstream closure (the seed's query partition); it counts as recovered only when every
failed task in that closure is running again.

Every algorithm shares one signature and one validator
(:func:`check_recovery`), so the seed's heuristics (OC, BestDensity, DP) and
the exact CP-SAT model can be compared on equal terms, and ``auto`` never
returns less than BestDensity. :class:`RecoverySession` strings the plans of
one incident together (repeated failures join the session), and
:func:`simulate_timeline` replays a trace of losses and node arrivals to
measure priority-weighted unavailability of incremental, operator-centric and
blocking recovery. :func:`execute_recovery_plan` turns a plan into the seed's
Algorithm 2 actions (the first plan's global rollback included), and
:func:`recover_complete_failure` plans the seed's Section 6, a complete failure
recovered onto nodes acquired one by one; both are listed in
:data:`RECOVERY_PROCEDURES`.
"""

from __future__ import annotations

from planners.recovery.best_density import (
    PRUNED_PAIR_POOL,
    approximation_bound,
    recover_best_density,
    recover_best_density_pruned,
    recover_best_density_strong,
)
from planners.recovery.exact import recover_auto, recover_exact
from planners.recovery.execute import PlanExecution, execute_recovery_plan, execute_recovery_plans
from planners.recovery.heuristics import recover_dp, recover_operator_centric
from planners.recovery.model import (
    DEFAULT_UTILIZATION,
    InvalidEvent,
    RecoveryAlgorithm,
    RecoveryStep,
    check_recovery,
    failed_queries,
    free_capacity,
    node_load,
)
from planners.recovery.registry import RECOVERY_ALGORITHMS, schedule_recovery
from planners.recovery.session import (
    MODES,
    Event,
    Mode,
    NodeBack,
    NodeReady,
    NodesLost,
    RecoverySession,
)
from planners.recovery.standby import CompleteFailureRecovery, recover_complete_failure
from planners.recovery.timeline import TimedStep, Timeline, fill_leftover, simulate_timeline

RECOVERY_PROCEDURES = {
    "execute-plan": execute_recovery_plan,
    "execute-plans": execute_recovery_plans,
    "complete-failure": recover_complete_failure,
}
"""The seed's procedures around the plans, by name: Algorithm 2 (each plan, and an
incident's plans with the first one's global rollback) and Section 6's complete failure.
Their signatures differ from those of :data:`RECOVERY_ALGORITHMS`, which all choose a plan."""

__all__ = [
    "DEFAULT_UTILIZATION",
    "MODES",
    "PRUNED_PAIR_POOL",
    "RECOVERY_ALGORITHMS",
    "RECOVERY_PROCEDURES",
    "CompleteFailureRecovery",
    "Event",
    "InvalidEvent",
    "Mode",
    "NodeBack",
    "NodeReady",
    "NodesLost",
    "PlanExecution",
    "RecoveryAlgorithm",
    "RecoverySession",
    "RecoveryStep",
    "TimedStep",
    "Timeline",
    "approximation_bound",
    "check_recovery",
    "execute_recovery_plan",
    "execute_recovery_plans",
    "failed_queries",
    "fill_leftover",
    "free_capacity",
    "node_load",
    "recover_auto",
    "recover_best_density",
    "recover_best_density_pruned",
    "recover_best_density_strong",
    "recover_complete_failure",
    "recover_dp",
    "recover_exact",
    "recover_operator_centric",
    "schedule_recovery",
    "simulate_timeline",
]
