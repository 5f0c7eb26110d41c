"""Re-optimization's estimates: task metrics → per-operator weight, failure rate and
reprocessing latency, and the topology those estimates describe.

Split from :mod:`backstop.domain.recommend` (which decides on a better plan from these
estimates). The estimates follow DESIGN.md: a task's weight is a high quantile of its
CPU use; its failure rate is failures per observed second (with half a failure of prior,
so a clean history still yields a finite MTBF); its reprocessing latency is half of
Young's optimal checkpoint interval ``sqrt(2·C·MTBF)``, where ``C`` is the mean
checkpoint duration. The single-process pandas path here runs the very same arithmetic
as the Spark transforms of :mod:`backstop.jobs.reoptimize`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backstop.domain.spec import StreamTopology, cpu_cores

if TYPE_CHECKING:  # imported where used: the operator imports this module, not pandas
    import pandas as pd

__all__ = [
    "MILLICORE_SLACK",
    "NODE_COLUMNS",
    "TASK_COLUMNS",
    "EstimateParams",
    "estimate_operators_pandas",
    "estimated_topology",
    "millicores",
    "operator_of",
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

#: Millicores a CPU value may exceed a whole millicore by and still count as it
#: (floating-point noise of ``cores * 1000``, far below what a request can express).
MILLICORE_SLACK = 1e-6


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


def millicores(cores: float) -> int:
    """``cores`` rounded up to a whole millicore, the unit of a CPU request.

    A value already on the millicore grid stays there: ``2.007 * 1000`` is
    ``2007.0000000000002`` in floating point, which a plain ``ceil`` turns into
    2008, so products within :data:`MILLICORE_SLACK` of a whole millicore
    count as it. The Spark job buckets CPU with the same arithmetic.

    Examples
    --------
    >>> millicores(2.007), millicores(0.1), millicores(0.10001)
    (2007, 100, 101)
    """
    return math.ceil(cores * 1000 - MILLICORE_SLACK)


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
        The same columns as :func:`backstop.jobs.transforms.transform_operator_estimates`.

    Notes
    -----
    Two group-bys (per task, then per operator), O(rows). The CPU quantile is
    exact here; Spark's is this one rounded up to a millicore (:func:`millicores`),
    which is what a CPU request can express.
    """
    import numpy as np  # here: the operator imports this module, never pandas
    import pandas as pd

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
    per_task["observed"] = np.where(  # rows within one clock tick: no span (as in Spark)
        (n > 1) & (span > 0), span * n / (n - 1).clip(lower=1), params.default_interval * n
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
    import numpy as np
    import pandas as pd

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
            cpu = f"{millicores(weight)}m"
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
