"""``status.plan``: the summary of a plan users read and the pods it asks for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from backstop.domain.status.types import PlanStatus

if TYPE_CHECKING:  # planning imports incidents, which imports this package
    from backstop.domain.planning import TopologyPlan
    from planners import TaskGraph


def build_plan_status(
    generation: int,
    graph: TaskGraph,
    plan: TopologyPlan,
    *,
    replicas: Mapping[str, Iterable[str]] | None = None,
    availability: float | None = None,
) -> dict[str, Any]:
    """``status.plan``: the summary users read and the write-ahead record of the plan."""
    p = plan.placement
    out: dict[str, Any] = {
        "generation": generation,
        "algorithm": p.algorithm,
        "tasks": len(graph),
        "backupCount": len(plan.backups),
        "backups": sorted(plan.backups, key=graph.index),
        "nodesUsed": p.nodes_used,
        "worstRecoveryLatency": round(p.worst, 6),
        "bound": p.bound,
        "detectionSeconds": plan.detection,
        "restartSeconds": plan.restart,
        "boundSatisfied": p.worst <= p.bound + 1e-9,
        "optimal": p.optimal,
        "assignment": dict(sorted(p.assignment.items(), key=lambda kv: graph.index(kv[0]))),
        "worstByNode": {k: round(v, 6) for k, v in plan.worst_by_node.items()},
        "moved": plan.moved,
    }
    if replicas is not None:
        out["replicas"] = {t: list(ns) for t, ns in sorted(replicas.items())}
        out["replicated"] = sorted(replicas)
        out["availability"] = availability
    return out


def expected_pods(plan: PlanStatus) -> dict[str, str]:
    """``{task-or-replica key: node}`` the recorded plan asks for."""
    want = {f"primary/{t}": n for t, n in (plan.assignment or {}).items()}
    for t, nodes in (plan.replicas or {}).items():
        for k, n in enumerate(nodes):
            want[f"replica-{k}/{t}"] = n
    return want
