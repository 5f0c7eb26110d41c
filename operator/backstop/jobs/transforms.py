"""The re-optimization job's steps: pure ``transform_*(df, *, …) -> DataFrame``
functions chained with ``df.transform`` by :func:`run_job`.

Re-planning, Monte Carlo and the trade-off curve run the project's planners in
parallel across topologies with ``applyInPandas``; the arithmetic lives in
:mod:`backstop.domain.recommend` and :mod:`backstop.domain.estimates`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from backstop.domain.estimates import MILLICORE_SLACK, TASK_COLUMNS, EstimateParams
from backstop.domain.recommend import (
    PlanParams,
    SimulationParams,
    dumps,
    monte_carlo,
    recommend_topology,
    tradeoff_point,
)
from backstop.domain.spec import expand, parse_topology
from backstop.jobs.sparkio import SPARK_TYPES
from planners.placement import Node

__all__ = [
    "run_job",
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

RECOMMEND_SCHEMA = (
    "topology string, result string, improvement double, recommendation string, nodes string"
)
SIMULATION_SCHEMA = RECOMMEND_SCHEMA + ", simulation string"
TRADEOFF_SCHEMA = "topology string, bound_factor double, point string"
#: CPU values above this many cores are counted as this many (no node has them; the
#: millicore histogram's bucket must fit a long).
MAX_CORES = 1e12
#: Planner tasks per core (``applyInPandas`` partitions per unit of Spark's default parallelism).
PLANNER_TASKS_PER_CORE = 4


# ------------------------------------------------------------------ estimates
def transform_clean_task_metrics(df: DataFrame) -> DataFrame:
    """Typed task metrics, only the columns the job reads; unusable rows dropped.

    A row is dropped when a key (topology, task, timestamp) or the CPU is
    missing (or not a finite number), or when a count or duration is negative. The operator is not
    derived here, on every row, but from each task's id once per task
    (:func:`transform_task_summary`).
    """
    typed = df.select(*[F.col(c).cast(SPARK_TYPES[t]).alias(c) for c, t in TASK_COLUMNS.items()])
    return typed.where(
        F.col("topology").isNotNull()
        & F.col("task").isNotNull()
        & F.col("timestamp").isNotNull()
        & F.col("cpu").isNotNull()
        & (F.col("cpu") >= 0)
        & (F.col("cpu") < float("inf"))  # NaN too: Spark orders NaN above infinity
        & (F.coalesce(F.col("failures"), F.lit(0)) >= 0)
        & (F.coalesce(F.col("checkpoint_duration"), F.lit(0.0)) >= 0)
    ).fillna(
        {
            "failures": 0,
            "checkpoint_duration": 0.0,
            "checkpoint_interval": 0.0,
            "tuples_in": 0,
            "tuples_out": 0,
        }
    )


def _millicores(cpu: Column) -> Column:
    """:func:`backstop.domain.estimates.millicores` in Spark, finite CPU values clamped at
    :data:`MAX_CORES` (the bucket is a long; ANSI mode fails the job on an overflow)."""
    return F.ceil(F.least(cpu, F.lit(MAX_CORES)) * 1000 - MILLICORE_SLACK)


def transform_task_summary(df: DataFrame, *, params: EstimateParams) -> DataFrame:
    """One row per task: its operator, observed seconds, failures, sums and CPU quantile.

    A task's observed time is its timestamp span stretched by one interval,
    ``(last − first)·n/(n−1)`` for ``n`` rows, or ``params.default_interval``
    per row when it has one.

    The CPU quantile is exact to the millicore: rows are first counted per task
    and per CPU value rounded up to a millicore (the unit of a CPU request,
    which is all the estimate becomes), together with the task's sums; the
    quantile is then read off that histogram, ``params.quantile`` with the
    "lower" rule, as pandas computes it. Rounding up commutes with taking an
    order statistic, so the result is the exact quantile rounded up to a
    millicore, :func:`backstop.domain.estimates.millicores`. The histogram has
    a few hundred rows per task, not one per metric row, and the aggregation
    over the rows needs nothing but sums and a count (Spark's generated code),
    where ``percentile_approx`` would keep a sketch per task. The operator is derived
    from the task id after the aggregation, once per task instead of per row.
    """
    per_value = df.groupBy("topology", "task", _millicores(F.col("cpu")).alias("millicores")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.min("timestamp").alias("first"),
        F.max("timestamp").alias("last"),
        F.sum("failures").alias("failures"),
        F.sum("checkpoint_duration").alias("ckpt_duration"),
        F.sum("checkpoint_interval").alias("ckpt_interval"),
        F.sum("tuples_in").alias("tuples_in"),
        F.sum("tuples_out").alias("tuples_out"),
    )
    task = Window.partitionBy("topology", "task")
    upto = task.orderBy("millicores").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = per_value.withColumn("task_rows", F.sum("rows").over(task)).withColumn(
        "cumulative", F.sum("rows").over(upto)
    )
    # the "lower" quantile is the row at 0-based rank floor(q·(n − 1)) in CPU order: the
    # first value whose cumulative count passes that rank
    rank = F.floor(F.lit(params.quantile) * (F.col("task_rows") - 1))
    agg = ranked.groupBy("topology", "task").agg(
        F.sum("rows").alias("rows"),
        F.min("first").cast("double").alias("first"),
        F.max("last").cast("double").alias("last"),
        F.sum("failures").alias("failures"),
        F.sum("ckpt_duration").alias("ckpt_duration"),
        F.sum("ckpt_interval").alias("ckpt_interval"),
        F.sum("tuples_in").alias("tuples_in"),
        F.sum("tuples_out").alias("tuples_out"),
        (F.min(F.when(F.col("cumulative") > rank, F.col("millicores"))) / 1000.0).alias("cpu_q"),
    )
    n = F.col("rows")
    # rows all stamped within one clock tick (a run shorter than the timestamps' resolution)
    # span no time: count them like single rows, never as 0 s observed (a division by zero)
    spans = (n > 1) & (F.col("last") > F.col("first"))
    observed = F.when(spans, (F.col("last") - F.col("first")) * n / (n - 1)).otherwise(
        F.lit(params.default_interval) * n
    )
    return (
        agg.withColumn("observed", observed)
        .withColumn("operator", F.regexp_replace("task", r"-\d+$", ""))
        .drop("first", "last")
    )


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
    spans = (n > 1) & (F.col("last") > F.col("first"))  # as for tasks
    observed = F.when(spans, (F.col("last") - F.col("first")) * n / (n - 1)).otherwise(
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
    observed = F.when(
        (n > 1) & (F.max(ts) > F.min(ts)), (F.max(ts) - F.min(ts)) * n / (n - 1)
    ).otherwise(F.lit(params.default_interval) * n)
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
def _spread(df: DataFrame, *keys: str) -> DataFrame:
    """``df`` hash-partitioned by ``keys`` into :data:`PLANNER_TASKS_PER_CORE` tasks per core.

    The planners' input is a few kilobytes, and adaptive query execution
    coalesces so small a shuffle into one partition, where one Python worker would
    run every topology's planners one after the other on one core. A repartition
    with an explicit number is never coalesced, and ``groupBy(keys)`` on it
    needs no further shuffle; a few tasks per core even out topologies that
    plan slower than others.
    """
    cores = df.sparkSession.sparkContext.defaultParallelism
    return df.repartition(PLANNER_TASKS_PER_CORE * max(1, cores), *keys)


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
                    "nodes": first["nodes"],
                }
            ]
        )

    return (
        _spread(joined, "topology").groupBy("topology").applyInPandas(plan_group, RECOMMEND_SCHEMA)
    )


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
                    topo.spec.planning_bound,
                    rec[key]["backups"],
                    rec[key]["assignment"],
                    node_rate=rates,
                    default_rate=float(row["default_rate"]),
                    correlated_rate=float(row["correlated_rate"] or 0.0),
                    correlated_size=int(row["correlated_size"] or 2),
                    domains=domains,
                    params=params,
                )
        keep = ("topology", "result", "improvement", "recommendation", "nodes")
        return pd.DataFrame([{**{k: row[k] for k in keep}, "simulation": dumps(out)}])

    # the recommendation's columns go through the group rather than being joined back: a
    # join of ``recs`` with a frame made from ``recs`` would run every re-plan twice
    # (plan_group would appear twice in the physical plan)
    return (
        _spread(inputs, "topology").groupBy("topology").applyInPandas(simulate, SIMULATION_SCHEMA)
    )


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

    keys = ("topology", "bound_factor")
    return _spread(exploded, *keys).groupBy(*keys).applyInPandas(point, TRADEOFF_SCHEMA)


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
