"""The re-optimization job (PySpark): task metrics → estimates → re-planned topologies.

Why Spark: a fleet's metrics (one row per task per interval, millions of rows a
day) outgrow one process's memory long before the planning does, and Spark
runs the same code embedded (``local[*]``, no setup) or on Spark's own
Kubernetes scheduler (``--master k8s://…``) for large fleets, so there is no
home-made distribution layer to maintain.

Every step is a pure ``transform_*(df, *, …) -> DataFrame`` chained with
``df.transform`` (see :func:`run_job`); :func:`main` only reads inputs and
writes outputs. Re-planning, Monte Carlo and the trade-off curve run the
project's planners in parallel across topologies with ``applyInPandas``; the
arithmetic lives in :mod:`backstop.domain.recommend`, shared with the single-process
pandas path the benchmark compares against. The input schema is documented
in ``docs/reoptimization.md``.

Run it with ``python -m backstop.jobs.reoptimize --help`` (or ``backstop
reoptimize`` for one topology). The operator runs it in a subprocess per run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from backstop.domain.recommend import (
    NODE_COLUMNS,
    TASK_COLUMNS,
    EstimateParams,
    PlanParams,
    SimulationParams,
    dumps,
    monte_carlo,
    recommend_topology,
    tradeoff_point,
)
from backstop.domain.spec import expand, parse_topology
from backstop.k8s.nodes import InvalidNodes, load_nodes
from planners import InvalidTopology, PlannerError
from planners.placement import Node

__all__ = [
    "EXIT_INPUT",
    "build_spark_job",
    "main",
    "read_metrics",
    "run_job",
    "spark_session",
    "topologies_frame",
    "transform_clean_node_metrics",
    "transform_clean_task_metrics",
    "transform_correlated_failures",
    "transform_monte_carlo",
    "transform_node_failure_rates",
    "transform_operator_estimates",
    "transform_recommend",
    "transform_recommendations",
    "transform_task_summary",
    "transform_tradeoff",
]

EXIT_INPUT = 2
_SPARK_TYPES = {
    "string": StringType(),
    "timestamp": TimestampType(),
    "long": LongType(),
    "double": DoubleType(),
}
RECOMMEND_SCHEMA = "topology string, result string, improvement double, recommendation string"
SIMULATION_SCHEMA = "topology string, simulation string"
TRADEOFF_SCHEMA = "topology string, bound_factor double, point string"


class InputError(Exception):
    """Input the job cannot use; the message says which file and why."""


# ------------------------------------------------------------------ session & I/O
def spark_session(
    master: str = "local[*]", conf: Mapping[str, str] | None = None, app: str = "backstop"
) -> SparkSession:
    """A SparkSession for the job: UI off, UTC, few shuffle partitions, Arrow on.

    Parameters
    ----------
    master:
        ``local[*]`` (default), ``local[N]`` or ``k8s://https://…``.
    conf:
        Extra Spark settings (they win over the defaults here).
    app:
        The application name.
    """
    if master.startswith("local"):
        # local workers are forked by the JVM: make them use this interpreter (and its
        # installed backstop), not whatever `python3` is first on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _schema(columns: Mapping[str, str]) -> StructType:
    return StructType([StructField(c, _SPARK_TYPES[t], True) for c, t in columns.items()])


def _format_of(path: Path) -> str:
    names = [path.name] if path.is_file() else [p.name for p in path.iterdir()]
    for n in names:
        if n.endswith(".parquet"):
            return "parquet"
        if n.endswith((".jsonl", ".json", ".ndjson")):
            return "json"
    raise InputError(f"{path}: no .parquet or .jsonl files (the metric formats this job reads)")


def read_metrics(spark: SparkSession, path: str, columns: Mapping[str, str]) -> DataFrame:
    """Read Parquet or JSON Lines metrics and check they have the columns of the schema.

    Parameters
    ----------
    spark:
        The session.
    path:
        A file or a directory of part files; the format follows the file names
        (``.parquet``; ``.jsonl``/``.json``/``.ndjson``). Remote URLs
        (``s3a://…``) are read as Parquet.
    columns:
        :data:`~backstop.domain.recommend.TASK_COLUMNS` or
        :data:`~backstop.domain.recommend.NODE_COLUMNS`.

    Raises
    ------
    InputError
        Missing path, unknown format, or missing columns (all named).
    """
    local = "://" not in path
    if local and not Path(path).exists():
        raise InputError(f"{path} does not exist")
    fmt = _format_of(Path(path)) if local else "parquet"
    try:
        if fmt == "json":
            extra = {"domain": "string"} if "node" in columns else {}
            df = spark.read.schema(_schema({**columns, **extra})).json(path)
        else:
            df = spark.read.parquet(path)
    except AnalysisException as err:
        raise InputError(f"{path}: {err.getMessage().splitlines()[0]}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(
            f"{path} lacks column(s) {', '.join(missing)} (expected {', '.join(columns)})"
        )
    return df


def topologies_frame(
    spark: SparkSession,
    manifests: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Sequence[Node]],
    current: Mapping[str, Mapping[str, Any]] | None = None,
) -> DataFrame:
    """One row per topology: its manifest, its nodes and its current plan, as JSON.

    Parameters
    ----------
    manifests:
        StreamTopology dicts.
    nodes:
        ``{topology name: nodes}``; the key ``"*"`` applies to every topology.
    current:
        ``{topology name: plan}`` (``status.plan`` or ``backstop place --json``).
    """
    rows = []
    for m in manifests:
        name = str(m["metadata"]["name"])
        ns = nodes.get(name, nodes.get("*", ()))
        rows.append(
            (
                name,
                dumps(m),
                dumps([{"name": n.name, "cpu": n.cpu, "domain": n.domain} for n in ns]),
                dumps((current or {}).get(name)),
            )
        )
    return spark.createDataFrame(
        rows, "topology string, manifest string, nodes string, current string"
    )


# ------------------------------------------------------------------ estimates
def transform_clean_task_metrics(df: DataFrame) -> DataFrame:
    """Typed task metrics with an ``operator`` column; unusable rows dropped.

    A row is dropped when a key (topology, task, timestamp) or the CPU is
    missing, or when a count or duration is negative.
    """
    typed = df.select(*[F.col(c).cast(_SPARK_TYPES[t]).alias(c) for c, t in TASK_COLUMNS.items()])
    return (
        typed.where(
            F.col("topology").isNotNull()
            & F.col("task").isNotNull()
            & F.col("timestamp").isNotNull()
            & F.col("cpu").isNotNull()
            & (F.col("cpu") >= 0)
            & (F.coalesce(F.col("failures"), F.lit(0)) >= 0)
            & (F.coalesce(F.col("checkpoint_duration"), F.lit(0.0)) >= 0)
        )
        .fillna(
            {
                "failures": 0,
                "checkpoint_duration": 0.0,
                "checkpoint_interval": 0.0,
                "tuples_in": 0,
                "tuples_out": 0,
            }
        )
        .withColumn("operator", F.regexp_replace("task", r"-\d+$", ""))
    )


def transform_task_summary(df: DataFrame, *, params: EstimateParams) -> DataFrame:
    """One row per task: observed seconds, failures, sums, and its CPU quantile.

    A task's observed time is its timestamp span stretched by one interval,
    ``(last − first)·n/(n−1)`` for ``n`` rows, or ``params.default_interval``
    per row when it has one.
    """
    ts = F.col("timestamp").cast("double")
    agg = df.groupBy("topology", "operator", "task").agg(
        F.count(F.lit(1)).alias("rows"),
        F.min(ts).alias("first"),
        F.max(ts).alias("last"),
        F.sum("failures").alias("failures"),
        F.sum("checkpoint_duration").alias("ckpt_duration"),
        F.sum("checkpoint_interval").alias("ckpt_interval"),
        F.sum("tuples_in").alias("tuples_in"),
        F.sum("tuples_out").alias("tuples_out"),
        F.percentile_approx("cpu", params.quantile).alias("cpu_q"),
    )
    n = F.col("rows")
    observed = F.when(n > 1, (F.col("last") - F.col("first")) * n / (n - 1)).otherwise(
        F.lit(params.default_interval) * n
    )
    return agg.withColumn("observed", observed).drop("first", "last")


def transform_operator_estimates(df: DataFrame, *, params: EstimateParams) -> DataFrame:
    """Per-operator weight, failure rate, MTBF and reprocessing latency from task summaries.

    The weight is the largest task quantile (every task of an operator gets one
    request, which must cover the busiest task). The failure rate is
    ``(failures + prior) / observed seconds``; the reprocessing latency is half
    of Young's interval ``sqrt(2·C·MTBF)`` with ``C`` the mean checkpoint
    duration, clamped by ``params``.
    """
    op = df.groupBy("topology", "operator").agg(
        F.count(F.lit(1)).alias("tasks"),
        F.sum("rows").alias("rows"),
        F.sum("observed").alias("observed_seconds"),
        F.sum("failures").alias("failures"),
        F.sum("ckpt_duration").alias("ckpt_duration"),
        F.sum("ckpt_interval").alias("ckpt_interval"),
        F.sum("tuples_in").alias("tuples_in"),
        F.sum("tuples_out").alias("tuples_out"),
        F.max("cpu_q").alias("cpu_quantile"),
    )
    rate = (F.col("failures") + F.lit(params.prior_failures)) / F.col("observed_seconds")
    c = F.col("ckpt_duration") / F.col("rows")
    young = F.least(F.sqrt(2.0 * c / rate), F.lit(params.max_checkpoint_interval))
    return op.select(
        "topology",
        "operator",
        F.col("tasks").cast("long"),
        F.col("rows").cast("long"),
        F.col("observed_seconds").cast("double"),
        F.col("failures").cast("long"),
        rate.alias("failure_rate"),
        (1.0 / rate).alias("mtbf_seconds"),
        F.col("cpu_quantile").cast("double"),
        c.alias("checkpoint_duration"),
        (F.col("ckpt_interval") / F.col("rows")).alias("checkpoint_interval"),
        young.alias("young_interval"),
        F.greatest(young / 2.0, F.lit(params.min_latency)).alias("reprocessing_latency"),
        (F.col("tuples_in") / F.col("observed_seconds")).alias("tuples_in_rate"),
        (F.col("tuples_out") / F.col("observed_seconds")).alias("tuples_out_rate"),
    )


def transform_clean_node_metrics(df: DataFrame) -> DataFrame:
    """Typed node metrics (``domain`` null when absent); rows without keys dropped."""
    domain = F.col("domain").cast("string") if "domain" in df.columns else F.lit(None)
    return df.select(
        F.col("node").cast("string").alias("node"),
        F.col("timestamp").cast("timestamp").alias("timestamp"),
        F.coalesce(F.col("failures").cast("long"), F.lit(0)).alias("failures"),
        domain.cast("string").alias("domain"),
    ).where(F.col("node").isNotNull() & F.col("timestamp").isNotNull() & (F.col("failures") >= 0))


def _failing_per_interval(df: DataFrame) -> DataFrame:
    return df.groupBy("timestamp").agg(
        F.sum(F.when(F.col("failures") > 0, 1).otherwise(0)).alias("failing_nodes")
    )


def transform_node_failure_rates(df: DataFrame, *, params: EstimateParams) -> DataFrame:
    """Per node: its independent failure rate (failures not part of a correlated event).

    An interval in which two or more nodes fail is a correlated event; those
    failures are counted by :func:`transform_correlated_failures` instead.
    """
    events = _failing_per_interval(df)
    joined = df.join(events, "timestamp")
    ts = F.col("timestamp").cast("double")
    agg = joined.groupBy("node").agg(
        F.count(F.lit(1)).alias("rows"),
        F.min(ts).alias("first"),
        F.max(ts).alias("last"),
        F.sum("failures").alias("failures"),
        F.sum(F.when(F.col("failing_nodes") < 2, F.col("failures")).otherwise(0)).alias(
            "independent_failures"
        ),
        F.first("domain", ignorenulls=True).alias("domain"),
    )
    n = F.col("rows")
    observed = F.when(n > 1, (F.col("last") - F.col("first")) * n / (n - 1)).otherwise(
        F.lit(params.default_interval) * n
    )
    return agg.select(
        "node",
        "domain",
        observed.alias("observed_seconds"),
        F.col("failures").cast("long"),
        F.col("independent_failures").cast("long"),
        ((F.col("independent_failures") + F.lit(params.prior_failures)) / observed).alias(
            "failure_rate"
        ),
    )


def transform_correlated_failures(df: DataFrame, *, params: EstimateParams) -> DataFrame:
    """One row: the fleet's rate of correlated events (≥ 2 nodes failing in one interval).

    Columns: ``correlated_events``, ``observed_seconds``, ``correlated_rate``
    (events per second) and ``correlated_size`` (mean nodes per event, at least 2).
    """
    per = _failing_per_interval(df)
    ts = F.col("timestamp").cast("double")
    n = F.count(F.lit(1))
    observed = F.when(n > 1, (F.max(ts) - F.min(ts)) * n / (n - 1)).otherwise(
        F.lit(params.default_interval) * n
    )
    is_event = F.col("failing_nodes") >= 2
    return per.agg(
        F.sum(F.when(is_event, 1).otherwise(0)).cast("long").alias("correlated_events"),
        observed.alias("observed_seconds"),
        F.avg(F.when(is_event, F.col("failing_nodes"))).alias("size"),
    ).select(
        "correlated_events",
        "observed_seconds",
        (F.col("correlated_events") / F.col("observed_seconds")).alias("correlated_rate"),
        F.greatest(F.round(F.coalesce(F.col("size"), F.lit(2.0))), F.lit(2.0))
        .cast("long")
        .alias("correlated_size"),
    )


# ------------------------------------------------------------------ re-planning
def _nodes(text: str) -> list[Node]:
    return [Node(str(d["name"]), float(d["cpu"]), d.get("domain")) for d in json.loads(text)]


def transform_recommend(
    estimates: DataFrame, *, topologies: DataFrame, params: PlanParams
) -> DataFrame:
    """Re-plan every topology with its estimates, one ``applyInPandas`` group each.

    Columns: ``topology``, ``result``, ``improvement`` and ``recommendation``
    (the JSON of :func:`backstop.domain.recommend.recommend_topology`). Topologies
    without metrics get ``result = NoMetrics``.
    """
    joined = topologies.join(estimates, "topology", "left")

    def plan_group(pdf: pd.DataFrame) -> pd.DataFrame:
        first = pdf.iloc[0]
        rows = pdf[pdf["operator"].notna()].to_dict("records")
        rec = recommend_topology(
            json.loads(first["manifest"]),
            rows,
            _nodes(first["nodes"]),
            json.loads(first["current"]),
            params,
        )
        return pd.DataFrame(
            [
                {
                    "topology": first["topology"],
                    "result": rec["result"],
                    "improvement": float(rec.get("improvement", 0.0)),
                    "recommendation": dumps(rec),
                }
            ]
        )

    recs = joined.groupBy("topology").applyInPandas(plan_group, RECOMMEND_SCHEMA)
    return recs.join(topologies.select("topology", "nodes"), "topology")


def transform_monte_carlo(
    recs: DataFrame,
    *,
    node_rates: DataFrame,
    correlated: DataFrame,
    params: SimulationParams,
) -> DataFrame:
    """Add ``simulation``: availability and recovery-latency quantiles, current vs new plan.

    Node failure rates come from :func:`transform_node_failure_rates` (nodes
    without history get the fleet's mean rate) and the correlated events from
    :func:`transform_correlated_failures`; see :func:`backstop.domain.recommend.monte_carlo`.
    """
    fleet = node_rates.agg(
        F.to_json(F.map_from_entries(F.collect_list(F.struct("node", "failure_rate")))).alias(
            "rates"
        ),
        F.coalesce(F.avg("failure_rate"), F.lit(0.0)).alias("default_rate"),
    )
    inputs = recs.crossJoin(fleet).crossJoin(
        correlated.select("correlated_rate", "correlated_size")
    )

    def simulate(pdf: pd.DataFrame) -> pd.DataFrame:
        row = pdf.iloc[0]
        rec = json.loads(row["recommendation"])
        out: dict[str, Any] = {}
        if rec["result"] == "Recommended":
            topo = parse_topology(rec["estimatedManifest"])
            graph = expand(topo.spec)
            nodes = _nodes(row["nodes"])
            domains = {n.name: n.domain for n in nodes if n.domain} or None
            rates = json.loads(row["rates"] or "{}")
            for key in ("current", "plan"):
                out[key] = monte_carlo(
                    graph,
                    topo.spec.recovery_latency_bound,
                    rec[key]["backups"],
                    rec[key]["assignment"],
                    node_rate=rates,
                    default_rate=float(row["default_rate"]),
                    correlated_rate=float(row["correlated_rate"] or 0.0),
                    correlated_size=int(row["correlated_size"] or 2),
                    domains=domains,
                    params=params,
                )
        return pd.DataFrame([{"topology": row["topology"], "simulation": dumps(out)}])

    sims = inputs.groupBy("topology").applyInPandas(simulate, SIMULATION_SCHEMA)
    return recs.join(sims, "topology", "left")


def transform_tradeoff(recs: DataFrame, *, params: PlanParams) -> DataFrame:
    """The trade-off curve: nodes and backups needed at each factor of the bound.

    One ``applyInPandas`` group per (topology, factor), so the planner runs of
    a whole fleet spread over the cores. Columns: ``topology``,
    ``bound_factor`` and ``point`` (JSON of
    :func:`backstop.domain.recommend.tradeoff_point`).
    """
    factors = F.array(*[F.lit(float(f)) for f in params.bound_factors])
    exploded = recs.where(F.col("result") == "Recommended").select(
        "topology",
        F.get_json_object("recommendation", "$.estimatedManifest").alias("manifest"),
        "nodes",
        F.explode(factors).alias("bound_factor"),
    )

    def point(pdf: pd.DataFrame) -> pd.DataFrame:
        row = pdf.iloc[0]
        p = tradeoff_point(
            json.loads(row["manifest"]), _nodes(row["nodes"]), float(row["bound_factor"]), params
        )
        return pd.DataFrame(
            [{"topology": row["topology"], "bound_factor": row["bound_factor"], "point": dumps(p)}]
        )

    return exploded.groupBy("topology", "bound_factor").applyInPandas(point, TRADEOFF_SCHEMA)


def transform_recommendations(recs: DataFrame, *, tradeoff: DataFrame) -> DataFrame:
    """The output: one row per topology with the trade-off curve as a JSON array.

    Columns: ``topology``, ``result``, ``improvement``, ``recommendation``,
    ``simulation`` and ``tradeoff`` (JSON strings, so Parquet and JSON Lines
    carry the same content).
    """
    curve = tradeoff.groupBy("topology").agg(
        F.concat(
            F.lit("["),
            F.concat_ws(
                ",",
                F.transform(
                    F.array_sort(F.collect_list(F.struct("bound_factor", "point"))),
                    lambda s: s["point"],
                ),
            ),
            F.lit("]"),
        ).alias("tradeoff")
    )
    return (
        recs.join(curve, "topology", "left")
        .select(
            "topology",
            "result",
            "improvement",
            "recommendation",
            F.coalesce("simulation", F.lit("{}")).alias("simulation"),
            F.coalesce("tradeoff", F.lit("[]")).alias("tradeoff"),
        )
        .orderBy("topology")
    )


def run_job(
    tasks: DataFrame,
    nodes: DataFrame,
    topologies: DataFrame,
    *,
    estimate: EstimateParams,
    plan: PlanParams,
    simulation: SimulationParams,
) -> tuple[DataFrame, DataFrame]:
    """The whole job as one chain of transforms: ``(estimates, recommendations)``."""
    estimates = (
        tasks.transform(transform_clean_task_metrics)
        .transform(transform_task_summary, params=estimate)
        .transform(transform_operator_estimates, params=estimate)
        .cache()
    )
    clean_nodes = nodes.transform(transform_clean_node_metrics).cache()
    node_rates = clean_nodes.transform(transform_node_failure_rates, params=estimate)
    correlated = clean_nodes.transform(transform_correlated_failures, params=estimate)
    recs = (
        estimates.transform(transform_recommend, topologies=topologies, params=plan)
        .transform(
            transform_monte_carlo, node_rates=node_rates, correlated=correlated, params=simulation
        )
        .cache()
    )
    curve = recs.transform(transform_tradeoff, params=plan)
    return estimates, recs.transform(transform_recommendations, tradeoff=curve)


# ------------------------------------------------------------------ Kubernetes Job
def build_spark_job(
    *,
    name: str,
    namespace: str,
    image: str,
    job_args: Sequence[str],
    spark_master: str = "local[*]",
    spark_image: str | None = None,
    service_account: str = "backstop",
    driver: Mapping[str, str] | None = None,
    executor: Mapping[str, Any] | None = None,
    schedule: str | None = None,
) -> dict[str, Any]:
    """A Kubernetes Job (or CronJob, with ``schedule``) that runs the job with spark-submit.

    The container runs ``python -m backstop.jobs.reoptimize`` (PySpark launches
    ``spark-submit`` itself): with ``spark_master = local[*]`` everything runs
    in the Job's pod; with ``k8s://https://kubernetes.default.svc`` the pod is
    the driver (client mode) and Spark's own Kubernetes scheduler starts
    executor pods from ``spark_image``. The chart's values map one to one:
    ``reoptimization.sparkMaster``, ``reoptimization.sparkImage`` and
    ``reoptimization.resources.{driver,executor}`` (see docs/reoptimization.md).

    Parameters
    ----------
    name, namespace, image:
        Job name, namespace and the backstop image (the driver).
    job_args:
        Arguments of the job (``--task-metrics …``, ``--out …``).
    spark_master:
        ``local[*]`` or ``k8s://…``.
    spark_image:
        Executor image (default: ``image``; it must contain backstop).
    service_account:
        Needs pods create/delete in ``namespace`` for ``k8s://`` masters.
    driver:
        ``{"cpu": "1", "memory": "2Gi"}`` of the driver container.
    executor:
        ``{"instances": 2, "cpu": "1", "memory": "2Gi"}`` (``k8s://`` only).
    schedule:
        A cron schedule: returns a CronJob with ``concurrencyPolicy: Forbid``.

    Returns
    -------
    dict
        The manifest.

    Examples
    --------
    >>> job = build_spark_job(name="reopt", namespace="ops", image="backstop:1",
    ...     job_args=["--task-metrics", "s3a://m/tasks"], spark_master="k8s://https://k")
    >>> c = job["spec"]["template"]["spec"]["containers"][0]
    >>> c["command"][:3], "spark.kubernetes.container.image=backstop:1" in c["command"]
    (['python', '-m', 'backstop.jobs.reoptimize'], True)
    """
    drv = {"cpu": "1", "memory": "2Gi", **(driver or {})}
    exe = {"instances": 2, "cpu": "1", "memory": "2Gi", **(executor or {})}
    cmd = ["python", "-m", "backstop.jobs.reoptimize", "--master", spark_master]
    env: list[dict[str, Any]] = []
    if spark_master.startswith("k8s://"):
        conf = {
            "spark.kubernetes.container.image": spark_image or image,
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.authenticate.driver.serviceAccountName": service_account,
            "spark.kubernetes.driver.pod.name": "$(POD_NAME)",
            "spark.driver.host": "$(POD_IP)",
            "spark.executor.instances": str(exe["instances"]),
            "spark.executor.cores": str(max(1, round(float(exe["cpu"])))),
            "spark.kubernetes.executor.request.cores": str(exe["cpu"]),
            "spark.executor.memory": str(exe["memory"]).replace("Gi", "g").replace("Mi", "m"),
        }
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        env = [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
    container = {
        "name": "reoptimize",
        "image": image,
        "command": [*cmd, *job_args],
        "env": env,
        "resources": {"requests": dict(drv), "limits": {"memory": drv["memory"]}},
    }
    pod_spec = {
        "serviceAccountName": service_account,
        "restartPolicy": "Never",
        "containers": [container],
    }
    labels = {"app.kubernetes.io/name": "backstop", "app.kubernetes.io/component": "reoptimize"}
    job_spec = {
        "backoffLimit": 1,
        "ttlSecondsAfterFinished": 3600,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    meta = {"name": name, "namespace": namespace, "labels": labels}
    if schedule is None:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": job_spec},
        },
    }


# ------------------------------------------------------------------ main (I/O only)
def recommendation_objects(df: DataFrame) -> list[dict[str, Any]]:
    """Collect the output rows as nested dicts (what ``recommendations.jsonl`` holds)."""
    out = []
    for row in df.collect():
        rec = json.loads(row["recommendation"])
        rec["simulation"] = json.loads(row["simulation"])
        rec["tradeoff"] = json.loads(row["tradeoff"])
        out.append(rec)
    return out


def _metrics_paths(args: argparse.Namespace) -> tuple[str, str]:
    tasks, nodes = args.task_metrics, args.node_metrics
    if args.metrics:
        base = Path(args.metrics)
        if not base.is_dir():
            raise InputError(f"--metrics {base} is not a directory")

        def pick(stem: str) -> str:
            found = sorted(p for p in base.iterdir() if p.name.split(".")[0] == stem)
            if not found:
                raise InputError(f"{base} holds no {stem}.parquet, {stem}.jsonl or {stem}/")
            return str(found[0])

        tasks, nodes = tasks or pick("tasks"), nodes or pick("nodes")
    if not tasks or not nodes:
        raise InputError("pass --metrics DIR, or both --task-metrics and --node-metrics")
    return tasks, nodes


def _load_manifests(paths: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        try:
            docs = list(yaml.safe_load_all(Path(p).read_text()))
        except OSError as err:
            raise InputError(f"cannot read {p}: {err.strerror}") from None
        except yaml.YAMLError as err:
            raise InputError(f"{p} is not valid YAML: {err}") from None
        found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "StreamTopology"]
        if not found:
            raise InputError(f"{p} holds no StreamTopology document")
        for d in found:
            try:
                parse_topology(d)
            except InvalidTopology as err:
                raise InputError(f"{p}: invalid topology: {err}") from None
            out.append(d)
    names = [d["metadata"]["name"] for d in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"topology name(s) given twice: {', '.join(dup)}")
    return out


def _load_current(path: str | None, names: Sequence[str]) -> dict[str, Any]:
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON: {err}") from None
    if isinstance(doc, dict) and "assignment" in doc:
        if len(names) != 1:
            raise InputError(f"{path} holds one plan but {len(names)} topologies were given")
        return {names[0]: doc}
    if not isinstance(doc, dict):
        raise InputError(f"{path} must map topology names to plans")
    return doc


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's command line."""
    p = argparse.ArgumentParser(
        prog="python -m backstop.jobs.reoptimize",
        description="Re-estimate operators from task metrics and recommend better plans.",
    )
    p.add_argument("--metrics", help="Directory with tasks.{parquet,jsonl} and nodes.{…}.")
    p.add_argument("--task-metrics", help="Task metrics (Parquet/JSON Lines file or directory).")
    p.add_argument("--node-metrics", help="Node metrics (Parquet/JSON Lines file or directory).")
    p.add_argument("--topologies", nargs="+", required=True, help="StreamTopology manifests.")
    nodes = p.add_mutually_exclusive_group(required=True)
    nodes.add_argument("--nodes", help="Node objects (YAML/JSON, a List or documents).")
    nodes.add_argument("--nodes-json", help="[{name, cpu, domain}] per topology or under '*'.")
    nodes.add_argument("--node-cpu", type=float, help="Identical nodes of this many cores.")
    p.add_argument("--current", help="Current plan(s): JSON {topology: plan} or one plan.")
    p.add_argument("--out", required=True, help="Output directory.")
    p.add_argument("--format", choices=("json", "parquet"), default="json")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*]).")
    p.add_argument("--conf", action="append", default=[], help="Extra Spark setting k=v.")
    p.add_argument("--quantile", type=float, default=EstimateParams.quantile)
    p.add_argument("--time-limit", type=float, default=PlanParams.time_limit)
    p.add_argument("--scenarios", type=int, default=SimulationParams.scenarios)
    p.add_argument("--horizon", type=float, default=SimulationParams.horizon_seconds)
    p.add_argument("--seed", type=int, default=SimulationParams.seed)
    return p.parse_args(argv)


def _node_lists(args: argparse.Namespace, n_tasks: int) -> dict[str, list[Node]]:
    if args.node_cpu is not None:
        if not args.node_cpu > 0:
            raise InputError("--node-cpu must be positive")
        return {"*": [Node(f"node-{i}", args.node_cpu) for i in range(max(n_tasks, 1))]}
    if args.nodes_json:
        try:
            doc = json.loads(Path(args.nodes_json).read_text())
            return {
                k: [Node(str(d["name"]), float(d["cpu"]), d.get("domain")) for d in v]
                for k, v in doc.items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise InputError(f"--nodes-json {args.nodes_json}: {err}") from None
    try:
        return {"*": load_nodes(args.nodes)}
    except InvalidNodes as err:
        raise InputError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Read metrics and topologies, run :func:`run_job`, write the recommendations.

    Writes ``recommendations.jsonl`` (one nested object per topology) or, with
    ``--format parquet``, ``recommendations.parquet`` (JSON string columns);
    the estimates go beside them. Returns the exit code: 0, or 2 with one
    ``error:`` line on stderr for input it cannot use.
    """
    args = parse_args(argv)
    started = time.monotonic()
    try:
        tasks_path, nodes_path = _metrics_paths(args)
        manifests = _load_manifests(args.topologies)
        names = [m["metadata"]["name"] for m in manifests]
        current = _load_current(args.current, names)
        n_tasks = max(len(expand(parse_topology(m).spec)) for m in manifests)
        node_lists = _node_lists(args, n_tasks)
        conf = dict(kv.split("=", 1) for kv in args.conf if "=" in kv)
        if not 0 < args.quantile < 1:
            raise InputError("--quantile must be in (0, 1)")
        spark = spark_session(args.master, conf)
        tasks = read_metrics(spark, tasks_path, TASK_COLUMNS)
        node_metrics = read_metrics(spark, nodes_path, NODE_COLUMNS)
        topo_df = topologies_frame(spark, manifests, node_lists, current)
        estimates, recs = run_job(
            tasks,
            node_metrics,
            topo_df,
            estimate=EstimateParams(quantile=args.quantile),
            plan=PlanParams(time_limit=args.time_limit),
            simulation=SimulationParams(
                scenarios=args.scenarios, horizon_seconds=args.horizon, seed=args.seed
            ),
        )
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if args.format == "parquet":
            recs.write.mode("overwrite").parquet(str(out / "recommendations.parquet"))
            estimates.write.mode("overwrite").parquet(str(out / "estimates.parquet"))
            count = spark.read.parquet(str(out / "recommendations.parquet")).count()
        else:
            objs = recommendation_objects(recs)
            with (out / "recommendations.jsonl").open("w") as f:
                for obj in objs:
                    f.write(json.dumps(obj) + "\n")
            est = pd.DataFrame(estimates.orderBy("topology", "operator").toPandas())
            est.to_json(out / "estimates.jsonl", orient="records", lines=True)
            count = len(objs)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except (InvalidTopology, PlannerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    params = {"args": " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))}
    print(
        f"reoptimize: {count} recommendation(s) in {out} "
        f"({time.monotonic() - started:.1f}s; {params['args']})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
