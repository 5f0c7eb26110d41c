"""Re-optimization's domain logic: metrics → estimates → a better plan, without Spark.

Why a separate module: the Spark job (:mod:`backstop.jobs.reoptimize`) distributes
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

import numpy as np
import pandas as pd

from backstop.domain.planning import plan_topology
from backstop.domain.spec import StreamTopology, cpu_cores, expand, parse_topology, spec_hash
from backstop.domain.status import build_plan_status
from planners import Infeasible, InvalidTopology, PlannerError, TaskGraph
from planners.evaluate import check_plan, node_failure_latency, worst_node_failure
from planners.placement import Node

__all__ = [
    "NODE_COLUMNS",
    "TASK_COLUMNS",
    "EstimateParams",
    "PlanParams",
    "SimulationParams",
    "check_recommendation",
    "dumps",
    "estimate_operators_pandas",
    "estimated_topology",
    "improvement",
    "monte_carlo",
    "operator_of",
    "recommend_topology",
    "should_apply",
    "spec_hash",
    "tradeoff_point",
    "young_interval",
]

#: Task metrics: one row per task per interval (see docs/reoptimization.md).
TASK_COLUMNS: dict[str, str] = {
    "topology": "string",
    "task": "string",
    "timestamp": "timestamp",
    "tuples_in": "long",
    "tuples_out": "long",
    "cpu": "double",
    "checkpoint_interval": "double",
    "checkpoint_duration": "double",
    "failures": "long",
}
#: Node metrics: one row per node per interval; ``domain`` (zone/rack) is optional.
NODE_COLUMNS: dict[str, str] = {
    "node": "string",
    "timestamp": "timestamp",
    "failures": "long",
}


@dataclass(frozen=True)
class EstimateParams:
    """How operator estimates are made from task metrics.

    Attributes
    ----------
    quantile:
        CPU quantile taken as a task's weight (0.95: a task is given what it
        uses in all but its busiest 5 % of intervals).
    prior_failures:
        Failures added to every operator's count (a Jeffreys-style prior), so
        an operator that never failed gets a finite, conservative MTBF.
    default_interval:
        Seconds one row stands for when a task has a single row.
    min_latency, max_checkpoint_interval:
        Clamp the result: latencies below ``min_latency`` seconds are not
        credible, and no checkpoint interval longer than this is recommended.
    """

    quantile: float = 0.95
    prior_failures: float = 0.5
    default_interval: float = 60.0
    min_latency: float = 0.01
    max_checkpoint_interval: float = 600.0


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


def young_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Young's optimal checkpoint interval ``sqrt(2·C·MTBF)``.

    Parameters
    ----------
    checkpoint_cost:
        ``C``, seconds one checkpoint takes.
    mtbf:
        Mean time between failures, seconds.

    Returns
    -------
    float
        Seconds between checkpoints; the expected reprocessing latency after a
        failure is half of it.

    Examples
    --------
    >>> young_interval(0.5, 3600.0)
    60.0

    References
    ----------
    J. W. Young, "A first order approximation to the optimum checkpoint
    interval", CACM 17(9), 1974.
    """
    return math.sqrt(2.0 * max(checkpoint_cost, 0.0) * max(mtbf, 0.0))


def operator_of(task: str) -> str:
    """The operator of a task id ``<operator>-<index>``.

    Examples
    --------
    >>> operator_of("hot-topics-2")
    'hot-topics'
    """
    head, _, tail = task.rpartition("-")
    return head if head and tail.isdigit() else task


# ------------------------------------------------------------------ pandas path
def estimate_operators_pandas(tasks: pd.DataFrame, params: EstimateParams) -> pd.DataFrame:
    """Per-operator estimates from task metrics, single process (the benchmark's reference).

    Parameters
    ----------
    tasks:
        Rows with :data:`TASK_COLUMNS` (``timestamp`` as datetime64).
    params:
        See :class:`EstimateParams`.

    Returns
    -------
    pandas.DataFrame
        The same columns as :func:`backstop.jobs.reoptimize.transform_operator_estimates`.

    Notes
    -----
    Two group-bys (per task, then per operator), O(rows). The CPU quantile is
    exact here and approximate in Spark (``percentile_approx``).
    """
    df = tasks.dropna(subset=["topology", "task", "timestamp", "cpu"])
    df = df[(df["cpu"] >= 0) & (df["failures"] >= 0) & (df["checkpoint_duration"] >= 0)]
    df = df.assign(operator=df["task"].str.replace(r"-\d+$", "", regex=True))
    epoch = pd.Timestamp(0, tz="UTC")
    df = df.assign(ts=(pd.to_datetime(df["timestamp"], utc=True) - epoch).dt.total_seconds())
    g = df.groupby(["topology", "operator", "task"], sort=False)
    per_task = g.agg(
        rows=("ts", "size"),
        first=("ts", "min"),
        last=("ts", "max"),
        failures=("failures", "sum"),
        ckpt_duration=("checkpoint_duration", "sum"),
        ckpt_interval=("checkpoint_interval", "sum"),
        tuples_in=("tuples_in", "sum"),
        tuples_out=("tuples_out", "sum"),
        cpu_q=("cpu", lambda s: s.quantile(params.quantile, interpolation="lower")),
    ).reset_index()
    span = per_task["last"] - per_task["first"]
    n = per_task["rows"]
    per_task["observed"] = np.where(
        n > 1, span * n / (n - 1).clip(lower=1), params.default_interval * n
    )
    op = (
        per_task.groupby(["topology", "operator"], sort=True)
        .agg(
            tasks=("task", "size"),
            rows=("rows", "sum"),
            observed_seconds=("observed", "sum"),
            failures=("failures", "sum"),
            ckpt_duration=("ckpt_duration", "sum"),
            ckpt_interval=("ckpt_interval", "sum"),
            tuples_in=("tuples_in", "sum"),
            tuples_out=("tuples_out", "sum"),
            cpu_quantile=("cpu_q", "max"),
        )
        .reset_index()
    )
    return _finish_estimates(op, params)


def _finish_estimates(op: pd.DataFrame, params: EstimateParams) -> pd.DataFrame:
    """The derived columns, shared by the pandas path and its tests."""
    rate = (op["failures"] + params.prior_failures) / op["observed_seconds"]
    mtbf = 1.0 / rate
    c = op["ckpt_duration"] / op["rows"]
    young = np.sqrt(2.0 * c * mtbf).clip(upper=params.max_checkpoint_interval)
    out = pd.DataFrame(
        {
            "topology": op["topology"],
            "operator": op["operator"],
            "tasks": op["tasks"].astype("int64"),
            "rows": op["rows"].astype("int64"),
            "observed_seconds": op["observed_seconds"].astype(float),
            "failures": op["failures"].astype("int64"),
            "failure_rate": rate.astype(float),
            "mtbf_seconds": mtbf.astype(float),
            "cpu_quantile": op["cpu_quantile"].astype(float),
            "checkpoint_duration": c.astype(float),
            "checkpoint_interval": (op["ckpt_interval"] / op["rows"]).astype(float),
            "young_interval": young.astype(float),
            "reprocessing_latency": (young / 2.0).clip(lower=params.min_latency).astype(float),
            "tuples_in_rate": (op["tuples_in"] / op["observed_seconds"]).astype(float),
            "tuples_out_rate": (op["tuples_out"] / op["observed_seconds"]).astype(float),
        }
    )
    return out.reset_index(drop=True)


# ------------------------------------------------------------------ planning
def estimated_topology(
    topo: StreamTopology, estimates: Sequence[Mapping[str, Any]]
) -> tuple[StreamTopology, list[dict[str, Any]]]:
    """A copy of ``topo`` with the estimated latency and weight of every measured operator.

    The user's spec is never rewritten: this copy only feeds the planners. A
    task's CPU weight becomes ``max(request, estimated quantile)``: Kubernetes
    admits pods by their requests, so a plan may not pack tighter than the
    requests allow, but it must spread tasks that really use more.

    Returns
    -------
    (topology, rows)
        The copy, and one row per operator: spec values, estimates and whether
        the operator was measured.
    """
    by_op = {str(e["operator"]): e for e in estimates}
    ops = []
    rows: list[dict[str, Any]] = []
    for op in topo.spec.operators:
        est = by_op.get(op.name)
        row: dict[str, Any] = {
            "operator": op.name,
            "measured": est is not None,
            "specLatency": op.reprocessing_latency,
            "specCpu": op.resources.cpu_cores,
        }
        if est is None:
            ops.append(op)
            row.update(latency=op.reprocessing_latency, cpu=op.resources.cpu_cores)
        else:
            latency = float(est["reprocessing_latency"])
            weight = max(op.resources.cpu_cores, float(est["cpu_quantile"]))
            cpu = f"{math.ceil(weight * 1000)}m"
            ops.append(
                op.model_copy(
                    update={
                        "reprocessing_latency": latency,
                        "resources": op.resources.model_copy(update={"cpu": cpu}),
                    }
                )
            )
            row.update(
                latency=latency,
                cpu=cpu_cores(cpu),
                cpuQuantile=float(est["cpu_quantile"]),
                failureRate=float(est["failure_rate"]),
                mtbfSeconds=float(est["mtbf_seconds"]),
                checkpointDuration=float(est["checkpoint_duration"]),
                checkpointInterval=float(est["checkpoint_interval"]),
                recommendedCheckpointInterval=float(est["young_interval"]),
                tuplesInRate=float(est["tuples_in_rate"]),
                tuplesOutRate=float(est["tuples_out_rate"]),
                observedSeconds=float(est["observed_seconds"]),
            )
        rows.append(row)
    spec = topo.spec.model_copy(update={"operators": ops})
    return topo.model_copy(update={"spec": spec}), rows


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
    bound = topo.spec.recovery_latency_bound
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
            bound=topo.spec.recovery_latency_bound,
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
    bound = topo.spec.recovery_latency_bound * factor
    spec = topo.spec.model_copy(update={"recovery_latency_bound": bound})
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
