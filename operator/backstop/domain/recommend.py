"""Re-optimization's domain logic: estimates → a better plan, without Spark.

The estimates themselves (metrics → per-operator weight, failure rate, latency) are
in :mod:`backstop.domain.estimates`.

A module of its own: the Spark job (:mod:`backstop.jobs.reoptimize`) distributes
this work (one topology per ``applyInPandas`` group), but the decisions
themselves (Young's checkpoint interval, which plan to recommend, how much it
gains, what failures cost) are plain functions of small inputs. Keeping them
here means they are unit-tested without a JVM, the operator can reuse the
apply decision, and the single-process pandas path the benchmark compares
against runs the very same arithmetic as the Spark transforms.

The estimates follow DESIGN.md: a task's weight is a high quantile of its CPU
use; its failure rate is failures per observed second (with half a failure of
prior, so a clean history still yields a finite MTBF); its reprocessing
latency is half of Young's optimal checkpoint interval ``sqrt(2·C·MTBF)``,
where ``C`` is the mean checkpoint duration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backstop.domain.budget import fixed_seconds
from backstop.domain.estimates import estimated_topology
from backstop.domain.planning import plan_topology
from backstop.domain.spec import expand, parse_topology, spec_hash
from backstop.domain.status import build_plan_status
from planners import Infeasible, InvalidTopology, PlannerError, TaskGraph
from planners.evaluate import check_plan, node_failure_latency, worst_node_failure
from planners.placement import Node

__all__ = [
    "PlanParams",
    "SimulationParams",
    "check_recommendation",
    "dumps",
    "improvement",
    "monte_carlo",
    "recommend_topology",
    "should_apply",
    "spec_hash",
    "tradeoff_point",
]


@dataclass(frozen=True)
class PlanParams:
    """How topologies are re-planned.

    Attributes
    ----------
    time_limit:
        Planner budget per plan, seconds.
    bound_factors:
        Multiples of the bound at which the trade-off curve is computed.
    """

    time_limit: float = 2.0
    bound_factors: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class SimulationParams:
    """The Monte Carlo failure model.

    Attributes
    ----------
    scenarios:
        Simulated windows per plan.
    horizon_seconds:
        Length of one window; failures within it are treated as simultaneous
        (conservative: they share one recovery, as in DESIGN's correlated model).
    seed:
        Random seed (runs are reproducible).
    """

    scenarios: int = 2000
    horizon_seconds: float = 3600.0
    seed: int = 7


def improvement(current: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[float, str]:
    """How much better ``new`` is than ``current``, in [-1, 1], and why.

    Plans are compared in the planners' own order: keeping the bound first,
    then nodes, then backups. A current plan that breaks the bound under the
    new estimates is improved by 1.0 by any plan that keeps it; otherwise the
    gain is the relative drop in nodes used, or, with as many nodes, in backups.

    Examples
    --------
    >>> cur = {"boundSatisfied": True, "nodesUsed": 4, "backupCount": 6}
    >>> improvement(cur, {"boundSatisfied": True, "nodesUsed": 3, "backupCount": 8})
    (0.25, 'nodes 4 -> 3')
    >>> improvement(cur, {"boundSatisfied": True, "nodesUsed": 4, "backupCount": 3})
    (0.5, 'backups 6 -> 3')
    """

    def sound(plan: Mapping[str, Any]) -> bool:
        return bool(plan.get("boundSatisfied")) and bool(plan.get("fitsCapacity", True))

    if not sound(current) and sound(new):
        what = "bound" if not current.get("boundSatisfied") else "nodes' CPU"
        return 1.0, f"the current plan breaks the {what} under the new estimates"
    if sound(current) and not sound(new):
        return -1.0, "the new plan would break the bound"
    n0, n1 = int(current["nodesUsed"]), int(new["nodesUsed"])
    if n0 != n1:
        return (n0 - n1) / max(n0, 1), f"nodes {n0} -> {n1}"
    b0, b1 = int(current["backupCount"]), int(new["backupCount"])
    if b0 != b1:
        return (b0 - b1) / max(b0, 1), f"backups {b0} -> {b1}"
    return 0.0, "same nodes and backups"


def should_apply(gain: float, min_improvement: float) -> bool:
    """Hysteresis: apply only a plan that improves by at least ``min_improvement``.

    A zero threshold still needs a strictly positive gain, so an equivalent
    plan never moves pods.

    Examples
    --------
    >>> should_apply(0.25, 0.1), should_apply(0.05, 0.1), should_apply(0.0, 0.0)
    (True, False, False)
    """
    return gain > 0 and gain >= min_improvement - 1e-12


def _plan_summary(
    graph: TaskGraph,
    bound: float,
    backups: Sequence[str] | None,
    assignment: Mapping[str, str],
    nodes: Sequence[Node],
) -> dict[str, Any]:
    """Nodes, backups, worst ``H`` and whether the plan keeps the bound and fits the CPU."""
    worst, node = worst_node_failure(graph, backups, assignment)
    load: dict[str, float] = {}
    for task, n in assignment.items():
        load[n] = load.get(n, 0.0) + graph.weight[graph.index(task)]
    cpu = {n.name: n.cpu for n in nodes}
    overloaded = sorted(n for n, w in load.items() if w > cpu.get(n, float("inf")) + 1e-9)
    return {
        "nodesUsed": len(set(assignment.values())),
        "backupCount": len(graph) if backups is None else len(backups),
        "worstRecoveryLatency": round(worst, 6),
        "worstNode": node,
        "boundSatisfied": worst <= bound + 1e-9,
        "fitsCapacity": not overloaded,
        "overloadedNodes": overloaded,
    }


def recommend_topology(
    manifest: Mapping[str, Any],
    estimates: Sequence[Mapping[str, Any]],
    nodes: Sequence[Node],
    current: Mapping[str, Any] | None,
    params: PlanParams,
) -> dict[str, Any]:
    """Re-plan one topology with estimated inputs and compare with its current plan.

    Parameters
    ----------
    manifest:
        The StreamTopology (as a dict).
    estimates:
        Rows of :func:`estimate_operators_pandas` for this topology.
    nodes:
        The nodes it may use (CPU available to it).
    current:
        Its current plan (``status.plan`` or ``backstop place --json``: needs
        ``assignment`` and ``backups``), or ``None`` to compare with what the
        operator would plan from the spec alone.
    params:
        See :class:`PlanParams`.

    Returns
    -------
    dict
        ``result`` (``Recommended``, ``NoMetrics``, ``Infeasible`` or
        ``Invalid``), ``message``, ``operators`` (spec vs estimate),
        ``current`` and ``plan`` summaries under the estimates, ``improvement``
        and its ``reason``; ``plan`` has the ``status.plan`` schema (its
        ``generation`` is the manifest's) and ``estimatedManifest`` is the
        planners' input.
    """
    name = str((manifest.get("metadata") or {}).get("name", "?"))
    out: dict[str, Any] = {"topology": name}
    try:
        topo = parse_topology(dict(manifest))
    except InvalidTopology as err:
        return {**out, "result": "Invalid", "message": str(err)}
    if not estimates:
        return {**out, "result": "NoMetrics", "message": f"no task metrics for {name!r}"}
    est_topo, rows = estimated_topology(topo, estimates)
    out["operators"] = rows
    graph = expand(est_topo.spec)
    bound = topo.spec.planning_bound
    generation = int((manifest.get("metadata") or {}).get("generation", 1))
    cur_assign: dict[str, str] | None = None
    if current and isinstance(current.get("assignment"), Mapping):
        cur_assign = {str(k): str(v) for k, v in current["assignment"].items()}
        if set(cur_assign) != set(graph.tasks):
            cur_assign = None  # a plan of another shape: compare with a fresh baseline
    try:
        if cur_assign is None:
            base = plan_topology(topo.spec, expand(topo.spec), nodes, time_limit=params.time_limit)
            cur_assign, cur_backups = dict(base.placement.assignment), sorted(base.backups)
            out["currentSource"] = "spec"
        else:
            assert current is not None
            cur_backups = [str(b) for b in current.get("backups") or []]
            out["currentSource"] = "status"
        out["current"] = {
            **_plan_summary(graph, bound, cur_backups, cur_assign, nodes),
            "assignment": cur_assign,
            "backups": cur_backups,
        }
        plan = plan_topology(
            est_topo.spec, graph, nodes, current=cur_assign, time_limit=params.time_limit
        )
    except Infeasible as err:
        return {**out, "result": "Infeasible", "message": f"infeasible: {err}"}
    except PlannerError as err:
        return {**out, "result": "Invalid", "message": str(err)}
    status_plan = build_plan_status(generation, graph, plan)
    status_plan["latencySource"] = "estimated"
    out["plan"] = status_plan
    gain, reason = improvement(out["current"], status_plan)
    out.update(
        result="Recommended",
        improvement=round(gain, 6),
        reason=reason,
        message=f"{reason}; {plan.moved} pods move",
        estimatedManifest=est_topo.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
    return out


def check_recommendation(rec: Mapping[str, Any], nodes: Sequence[Node]) -> list[str]:
    """Problems of a recommended plan under its own estimates (empty when sound)."""
    topo = parse_topology(dict(rec["estimatedManifest"]))
    graph = expand(topo.spec)
    plan = rec["plan"]
    return [
        v.message
        for v in check_plan(
            graph,
            bound=topo.spec.planning_bound,
            backups=plan["backups"],
            assignment=plan["assignment"],
            capacity={n.name: n.cpu for n in nodes},
        )
    ]


def tradeoff_point(
    manifest: Mapping[str, Any], nodes: Sequence[Node], factor: float, params: PlanParams
) -> dict[str, Any]:
    """Nodes and backups the planners need at ``factor`` × the bound (one curve point).

    ``manifest`` is the estimated manifest of a recommendation.
    """
    topo = parse_topology(dict(manifest))
    bound = topo.spec.planning_bound * factor  # the budget of H; R adds detection and restart
    spec = topo.spec.model_copy(update={"recovery_latency_bound": bound + fixed_seconds(topo.spec)})
    point: dict[str, Any] = {"boundFactor": factor, "bound": round(bound, 6)}
    try:
        plan = plan_topology(spec, expand(spec), nodes, time_limit=params.time_limit)
    except PlannerError as err:
        return {**point, "feasible": False, "message": str(err).splitlines()[0]}
    return {
        **point,
        "feasible": True,
        "nodesUsed": plan.placement.nodes_used,
        "backupCount": len(plan.backups),
        "worstRecoveryLatency": round(plan.worst, 6),
    }


# ------------------------------------------------------------------ Monte Carlo
def monte_carlo(
    graph: TaskGraph,
    bound: float,
    backups: Sequence[str] | None,
    assignment: Mapping[str, str],
    *,
    node_rate: Mapping[str, float],
    default_rate: float,
    correlated_rate: float,
    correlated_size: int,
    domains: Mapping[str, str] | None,
    params: SimulationParams,
) -> dict[str, Any]:
    """Availability and the recovery-latency distribution of a plan under random failures.

    Each scenario is one window of ``params.horizon_seconds``. Node ``n`` fails
    in it with probability ``1 − exp(−λ_n·T)`` (``λ_n`` from ``node_rate``, or
    ``default_rate``); independently, a correlated event (rate
    ``correlated_rate``) takes down ``correlated_size`` nodes of one failure
    domain (or any nodes, without domains). The failed tasks are those on
    failed nodes, and the scenario's recovery latency is ``H(F)`` of the
    failure-effect evaluator.

    Returns
    -------
    dict
        ``availability`` (1 − expected recovery time / T), ``boundProbability``
        (P[H ≤ bound] per window), ``failureProbability`` (P[some task fails]),
        and quantiles ``p50``/``p95``/``p99``/``max`` of ``H`` over windows with
        a failure (0 when none failed).

    Notes
    -----
    O(scenarios · nodes) sampling plus one O(V + E) evaluation per distinct
    failure set (cached; most windows fail nothing or one node).
    """
    import numpy as np  # here: the operator imports this module and never simulates

    rng = np.random.default_rng(params.seed)
    names = sorted(set(assignment.values()))
    t = params.horizon_seconds
    p = np.array([1.0 - math.exp(-node_rate.get(n, default_rate) * t) for n in names])
    fails = rng.random((params.scenarios, len(names))) < p
    p_corr = 1.0 - math.exp(-correlated_rate * t)
    corr = rng.random(params.scenarios) < p_corr
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        groups.setdefault((domains or {}).get(n, "*"), []).append(i)
    keys = sorted(groups)
    for s in np.flatnonzero(corr):
        members = groups[keys[int(rng.integers(len(keys)))]]
        k = min(correlated_size, len(members))
        fails[s, rng.choice(members, size=k, replace=False)] = True
    on_node: dict[str, list[str]] = {}
    for task, node in assignment.items():
        on_node.setdefault(node, []).append(task)
    cache: dict[bytes, float] = {}
    h = np.zeros(params.scenarios)
    for s in np.flatnonzero(fails.any(axis=1)):
        key = np.packbits(fails[s]).tobytes()
        if key not in cache:
            failed = [task for i in np.flatnonzero(fails[s]) for task in on_node[names[i]]]
            cache[key] = node_failure_latency(graph, backups, failed)
        h[s] = cache[key]
    hit = h[fails.any(axis=1)]

    def q(x: float) -> float:
        return round(float(np.quantile(hit, x)), 6) if hit.size else 0.0

    return {
        "scenarios": params.scenarios,
        "horizonSeconds": t,
        "availability": round(1.0 - float(h.mean()) / t, 9),
        "boundProbability": round(float((h <= bound + 1e-9).mean()), 6),
        "failureProbability": round(float(hit.size) / params.scenarios, 6),
        "p50": q(0.5),
        "p95": q(0.95),
        "p99": q(0.99),
        "max": round(float(hit.max()), 6) if hit.size else 0.0,
    }


def dumps(obj: Any) -> str:
    """Compact JSON for a DataFrame column."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)
