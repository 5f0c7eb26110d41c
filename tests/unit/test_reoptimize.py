"""The re-optimization job: each transform on tiny frames, then end to end on generated data."""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from backstop.domain.estimates import (
    EstimateParams,
    estimate_operators_pandas,
    estimated_topology,
    millicores,
    young_interval,
)
from backstop.domain.recommend import (
    PlanParams,
    SimulationParams,
    check_recommendation,
    monte_carlo,
    recommend_topology,
)
from backstop.domain.spec import expand, load_topology, parse_topology
from backstop.jobs import reoptimize
from backstop.jobs.reoptimize import main
from backstop.jobs.sparkio import spark_session, topologies_frame
from backstop.jobs.transforms import (
    transform_clean_node_metrics,
    transform_clean_task_metrics,
    transform_correlated_failures,
    transform_monte_carlo,
    transform_node_failure_rates,
    transform_operator_estimates,
    transform_recommend,
    transform_task_summary,
    transform_tradeoff,
)
from backstop_runtime.blobs import open_blobs
from backstop_testkit.sim.metricsgen import GeneratorParams, write_metrics
from backstop_testkit.support.kubetools import ROOT
from planners.placement import Node

EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
T0 = datetime(2025, 1, 1, tzinfo=UTC)
CHAIN: dict[str, Any] = {
    "apiVersion": "streams.backstop.dev/v1alpha1",
    "kind": "StreamTopology",
    "metadata": {"name": "chain"},
    "spec": {
        "image": "x",
        "recoveryLatencyBound": 2.5,
        "operators": [
            {"name": "a", "reprocessingLatency": 1.0, "resources": {"cpu": "1"}},
            {"name": "b", "reprocessingLatency": 1.0, "resources": {"cpu": "1"},
             "inputs": [{"operator": "a"}]},
            {"name": "c", "reprocessingLatency": 1.0, "resources": {"cpu": "1"},
             "inputs": [{"operator": "b"}]},
        ],
    },
}  # fmt: skip
NODES = [Node(f"n{i}", 4.0) for i in range(3)]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app="tests")
    yield session
    session.stop()


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0.timestamp() + seconds, UTC)


def _task_rows(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(
        rows,
        "topology string, task string, timestamp timestamp, tuples_in long, tuples_out long, "
        "cpu double, checkpoint_interval double, checkpoint_duration double, failures long",
    )


# ------------------------------------------------------------------ transforms
@pytest.mark.spark
def test_clean_drops_unusable_rows(spark: SparkSession) -> None:
    df = _task_rows(
        spark,
        [
            ("t", "hot-topics-2", _ts(0), 10, 5, 0.5, 2.0, 0.1, 0),
            ("t", "src-0", _ts(0), 1, 1, None, 2.0, 0.1, 0),  # no CPU
            ("t", "src-0", _ts(60), 1, 1, -0.1, 2.0, 0.1, 0),  # negative CPU
            ("t", "src-0", _ts(120), 1, 1, 0.2, 2.0, 0.1, -1),  # negative failures
            ("t", "src-0", _ts(180), None, None, 0.2, None, None, None),  # nulls filled
            ("t", "src-0", _ts(240), 1, 1, math.nan, 2.0, 0.1, 0),  # not a number
            ("t", "src-0", _ts(300), 1, 1, math.inf, 2.0, 0.1, 0),  # not finite
        ],
    )
    out = df.transform(transform_clean_task_metrics).orderBy("task").collect()
    assert [(r.task, r.cpu) for r in out] == [("hot-topics-2", 0.5), ("src-0", 0.2)]
    assert (out[1].failures, out[1].tuples_in, out[1].checkpoint_duration) == (0, 0, 0.0)


def _lower_quantile_millicores(values: list[float], q: float) -> int:
    """The truth, independently of the job: the "lower" quantile by sorting (the 0-based
    rank floor(q·(n − 1)); the test's sizes keep q·(n − 1) off whole numbers, where float
    and exact arithmetic could disagree) rounded up to a millicore in decimal arithmetic."""
    ordered = sorted(values)
    value = ordered[math.floor(Fraction(str(q)) * (len(ordered) - 1))]
    return int((Decimal(repr(value)) * 1000).to_integral_value(rounding=ROUND_CEILING))


@pytest.mark.spark
def test_cpu_quantile_is_exact_to_the_millicore_per_task_and_operator(
    spark: SparkSession,
) -> None:
    """Per task the job's CPU quantile is the exact "lower" quantile rounded up to a
    millicore, and an operator's is the largest of its tasks'; two topologies with the same
    task ids stay apart, and an absurd CPU value above the quantile changes nothing."""
    rng = random.Random(7)
    cpu: dict[tuple[str, str], list[float]] = {}
    for topology, scale in (("t1", 1.0), ("t2", 3.0)):
        for task, n in (("hot-topics-0", 13), ("hot-topics-1", 10), ("src-0", 7)):
            cpu[topology, task] = [round(rng.uniform(0.05, 0.9) * scale, 6) for _ in range(n)]
    cpu["t1", "src-0"][:2] = [2.007, 2.007]  # on the millicore grid: stays 2007m
    cpu["t1", "src-0"][2:] = [2.0, 1.5, 1.0, 0.5, 1e300]  # the largest is never the quantile
    rows = [
        (topology, task, _ts(60 * k), 1, 1, value, 2.0, 0.1, 0)
        for (topology, task), values in cpu.items()
        for k, value in enumerate(values)
    ]
    params = EstimateParams(quantile=0.95)
    summary = (
        _task_rows(spark, rows)
        .transform(transform_clean_task_metrics)
        .transform(transform_task_summary, params=params)
    )
    per_task = {(r.topology, r.task): r for r in summary.collect()}
    assert set(per_task) == set(cpu)
    for key, values in cpu.items():
        row = per_task[key]
        assert row.operator == key[1].rsplit("-", 1)[0]
        assert row.rows == len(values)
        assert round(row.cpu_q * 1000, 9) == _lower_quantile_millicores(values, 0.95), key
    assert round(per_task["t1", "src-0"].cpu_q, 9) == 2.007
    estimates = summary.transform(transform_operator_estimates, params=params).collect()
    for e in estimates:
        tasks = [
            v for (t, task), v in cpu.items() if t == e.topology and task.startswith(e.operator)
        ]
        expected = max(_lower_quantile_millicores(v, 0.95) for v in tasks)
        assert (e.tasks, round(e.cpu_quantile * 1000, 9)) == (len(tasks), expected), e
    assert len(estimates) == 4


def test_estimated_request_keeps_a_quantile_on_the_millicore_grid() -> None:
    """2.007 cores is 2007m (2.007 · 1000 is 2007.0000000000002 in floating point); a value
    above the grid still rounds up."""
    topo = parse_topology(CHAIN)
    est = [{"operator": "a", "reprocessing_latency": 0.1, "cpu_quantile": 2.007,
            "failure_rate": 1e-4, "mtbf_seconds": 1e4, "checkpoint_duration": 0.01,
            "checkpoint_interval": 1.0, "young_interval": 0.2, "tuples_in_rate": 1.0,
            "tuples_out_rate": 1.0, "observed_seconds": 60.0},
           {"operator": "b", "reprocessing_latency": 0.1, "cpu_quantile": 1.0001,
            "failure_rate": 1e-4, "mtbf_seconds": 1e4, "checkpoint_duration": 0.01,
            "checkpoint_interval": 1.0, "young_interval": 0.2, "tuples_in_rate": 1.0,
            "tuples_out_rate": 1.0, "observed_seconds": 60.0}]  # fmt: skip
    copy, _ = estimated_topology(topo, est)
    cpus = {op.name: op.resources.cpu for op in copy.spec.operators}
    assert cpus == {"a": "2007m", "b": "1001m", "c": "1"}


@pytest.mark.spark
def test_estimates_follow_youngs_formula(spark: SparkSession) -> None:
    # two tasks of "op", 4 rows each a minute apart: 4 minutes observed per task
    rows = []
    for task, fails in (("op-0", [1, 0, 0, 0]), ("op-1", [0, 0, 1, 0])):
        for k, f in enumerate(fails):
            rows.append(("t", task, _ts(60 * k), 100, 50, 0.1 * (k + 1), 10.0, 0.5, f))
    params = EstimateParams(quantile=0.75, prior_failures=0.0)
    est = (
        _task_rows(spark, rows)
        .transform(transform_clean_task_metrics)
        .transform(transform_task_summary, params=params)
        .transform(transform_operator_estimates, params=params)
        .collect()
    )
    assert len(est) == 1
    e = est[0]
    assert (e.operator, e.tasks, e.rows, e.failures) == ("op", 2, 8, 2)
    assert e.observed_seconds == pytest.approx(480.0)
    assert e.failure_rate == pytest.approx(2 / 480)
    assert e.mtbf_seconds == pytest.approx(240.0)
    assert e.young_interval == pytest.approx(young_interval(0.5, 240.0))
    assert e.reprocessing_latency == pytest.approx(math.sqrt(2 * 0.5 * 240) / 2)
    assert e.cpu_quantile == pytest.approx(0.3)  # 75th percentile of 0.1..0.4
    assert e.tuples_in_rate == pytest.approx(800 / 480)


@pytest.mark.spark
def test_rows_within_one_clock_tick_are_observed_time_not_zero(spark: SparkSession) -> None:
    """A short run writes all its rows within one second (whole-second timestamps): that
    is no observed time to divide by, so they count as one default interval each."""
    rows = [("t", "op-0", _ts(0), 10, 10, 0.1, 2.0, 0.01, 0) for _ in range(3)]
    params = EstimateParams(default_interval=5.0)
    e = (
        _task_rows(spark, rows)
        .transform(transform_clean_task_metrics)
        .transform(transform_task_summary, params=params)
        .transform(transform_operator_estimates, params=params)
        .collect()[0]
    )
    assert e.observed_seconds == pytest.approx(15.0)
    assert e.tuples_in_rate == pytest.approx(30 / 15.0)


@pytest.mark.spark
def test_estimates_clamp_the_checkpoint_interval(spark: SparkSession) -> None:
    rows = [("t", "op-0", _ts(60 * k), 1, 1, 0.1, 10.0, 100.0, 0) for k in range(3)]
    params = EstimateParams(max_checkpoint_interval=30.0)
    e = (
        _task_rows(spark, rows)
        .transform(transform_clean_task_metrics)
        .transform(transform_task_summary, params=params)
        .transform(transform_operator_estimates, params=params)
        .collect()[0]
    )
    assert e.young_interval == pytest.approx(30.0)
    assert e.reprocessing_latency == pytest.approx(15.0)


@pytest.mark.spark
def test_node_rates_separate_independent_from_correlated_failures(spark: SparkSession) -> None:
    rows = []
    for k in range(10):
        for n in ("n0", "n1", "n2"):
            failed = (k == 3 and n in ("n0", "n1")) or (k == 7 and n == "n2")
            rows.append((n, _ts(60 * k), int(failed), "z0"))
    df = spark.createDataFrame(
        rows, "node string, timestamp timestamp, failures long, domain string"
    )
    clean = df.transform(transform_clean_node_metrics)
    params = EstimateParams(prior_failures=0.0)
    rates = {
        r.node: r for r in clean.transform(transform_node_failure_rates, params=params).collect()
    }
    assert rates["n0"].failures == 1 and rates["n0"].independent_failures == 0
    assert rates["n2"].independent_failures == 1
    assert rates["n2"].failure_rate == pytest.approx(1 / 600)
    corr = clean.transform(transform_correlated_failures, params=params).collect()[0]
    assert corr.correlated_events == 1 and corr.correlated_size == 2
    assert corr.correlated_rate == pytest.approx(1 / 600)


def _estimates(spark: SparkSession, latency: float, cpu: float) -> DataFrame:
    rows = [
        {
            "topology": "chain", "operator": op, "tasks": 1, "rows": 100,
            "observed_seconds": 6000.0, "failures": 3, "failure_rate": 5e-4,
            "mtbf_seconds": 2000.0, "cpu_quantile": cpu, "checkpoint_duration": 0.01,
            "checkpoint_interval": 2.0, "young_interval": 2 * latency,
            "reprocessing_latency": latency, "tuples_in_rate": 1.0, "tuples_out_rate": 1.0,
        }
        for op in ("a", "b", "c")
    ]  # fmt: skip
    return spark.createDataFrame(pd.DataFrame(rows))


@pytest.mark.spark
def test_recommend_replans_with_estimates_and_reports_topologies_without_metrics(
    spark: SparkSession,
) -> None:
    other = json.loads(json.dumps(CHAIN))
    other["metadata"]["name"] = "unmeasured"
    topo = topologies_frame(spark, [CHAIN, other], {"*": NODES})
    recs = {
        r.topology: r
        for r in _estimates(spark, 0.4, 0.5)
        .transform(transform_recommend, topologies=topo, params=PlanParams(time_limit=0.5))
        .collect()
    }
    assert recs["unmeasured"].result == "NoMetrics"
    rec = json.loads(recs["chain"].recommendation)
    assert rec["result"] == "Recommended"
    assert rec["currentSource"] == "spec"
    # spec: t = 1 s, bound 2.5 s: the chain cannot share a node (H = 3 s); at 0.4 s it can
    assert recs["chain"].improvement == 0.5  # nodes 2 -> 1
    assert rec["plan"]["backupCount"] + rec["plan"]["nodesUsed"] < (
        rec["current"]["backupCount"] + rec["current"]["nodesUsed"]
    )
    assert check_recommendation(rec, NODES) == []
    assert [op["latency"] for op in rec["operators"]] == [0.4, 0.4, 0.4]


@pytest.mark.spark
def test_recommend_flags_a_current_plan_that_breaks_the_bound(spark: SparkSession) -> None:
    # all on one node, no backups: H = 4.5 s under the estimates (t = 1.5 s)
    current = {"assignment": {"a-0": "n0", "b-0": "n0", "c-0": "n0"}, "backups": []}
    big = [Node(f"n{i}", 4.0) for i in range(3)]
    topo = topologies_frame(spark, [CHAIN], {"*": big}, {"chain": current})
    rec = json.loads(
        _estimates(spark, 1.5, 0.5)
        .transform(transform_recommend, topologies=topo, params=PlanParams(time_limit=0.5))
        .collect()[0]
        .recommendation
    )
    assert rec["currentSource"] == "status"
    assert rec["current"]["boundSatisfied"] is False
    assert rec["plan"]["boundSatisfied"] is True
    assert rec["improvement"] == 1.0


@pytest.mark.spark
def test_monte_carlo_and_tradeoff_per_topology(spark: SparkSession) -> None:
    topo = topologies_frame(spark, [CHAIN], {"*": NODES})
    recs = _estimates(spark, 0.4, 0.5).transform(
        transform_recommend, topologies=topo, params=PlanParams(time_limit=0.5)
    )
    rates = spark.createDataFrame([("n0", 1e-3), ("n1", 1e-3)], "node string, failure_rate double")
    corr = spark.createDataFrame([(0.0, 2)], "correlated_rate double, correlated_size long")
    simulated = recs.transform(
        transform_monte_carlo,
        node_rates=rates,
        correlated=corr,
        params=SimulationParams(scenarios=300, horizon_seconds=3600.0),
    )
    (row,) = simulated.collect()
    assert (row.topology, row.result) == ("chain", "Recommended")
    sim = json.loads(row.simulation)
    # each topology is re-planned once: the Monte Carlo does not run the re-plans again
    executed = simulated._jdf.queryExecution().executedPlan().toString()
    final = executed.split("== Initial Plan ==")[0]  # adaptive execution prints both
    assert final.count("plan_group(") == 1, final
    for key in ("current", "plan"):
        s = sim[key]
        assert 0.9 < s["failureProbability"] <= 1.0  # 1 - exp(-3.6) per node, >= 1 node
        assert 0 < s["availability"] < 1
        assert s["p50"] <= s["p95"] <= s["p99"] <= s["max"] <= 3 * 0.4 + 1e-9
    curve = sorted(
        (json.loads(r.point) for r in recs.transform(
            transform_tradeoff, params=PlanParams(time_limit=0.5, bound_factors=(0.1, 0.5, 1.0))
        ).collect()),
        key=lambda p: p["boundFactor"],
    )  # fmt: skip
    assert [p["boundFactor"] for p in curve] == [0.1, 0.5, 1.0]
    assert curve[0]["feasible"] is False  # 0.25 s < a single task's 0.4 s
    feasible = [p for p in curve if p["feasible"]]
    assert all(p["worstRecoveryLatency"] <= p["bound"] + 1e-9 for p in feasible)
    costs = [(p["nodesUsed"], p["backupCount"]) for p in feasible]
    assert costs == sorted(costs, reverse=True)  # a looser bound never costs more


def test_monte_carlo_without_failures_is_always_available() -> None:
    topo = parse_topology(CHAIN)
    graph = expand(topo.spec)
    assignment = {t: "n0" for t in graph.tasks}
    s = monte_carlo(graph, 3.0, None, assignment, node_rate={}, default_rate=0.0,
                    correlated_rate=0.0, correlated_size=2, domains=None,
                    params=SimulationParams(scenarios=100))  # fmt: skip
    assert (s["availability"], s["boundProbability"], s["failureProbability"]) == (1.0, 1.0, 0.0)


def test_recommend_topology_reports_problems_without_raising() -> None:
    assert recommend_topology(CHAIN, [], NODES, None, PlanParams())["result"] == "NoMetrics"
    bad = json.loads(json.dumps(CHAIN))
    bad["spec"]["operators"][1]["inputs"] = [{"operator": "nope"}]
    est = [{"operator": "a", "reprocessing_latency": 0.1, "cpu_quantile": 0.1}]
    assert recommend_topology(bad, est, NODES, None, PlanParams())["result"] == "Invalid"


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("metrics")
    truth = write_metrics(out, [load_topology(EXAMPLE)], GeneratorParams(rows=30_000, seed=3))
    return out, truth


def _check_recovers_truth(out: Path, truth: dict[str, Any], tasks: pd.DataFrame) -> None:
    """The job's output in ``out`` matches the generator's truth, and its estimates those
    of the single-process pandas path on the same task rows ``tasks``."""
    (rec,) = [json.loads(ln) for ln in (out / "recommendations.jsonl").open()]
    assert rec["result"] == "Recommended"
    true_ops = truth["topologies"]["twitter-sentiment"]
    for op in rec["operators"]:
        t = true_ops[op["operator"]]
        assert op["latency"] == pytest.approx(t["reprocessingLatency"], rel=0.15), op
        assert op["mtbfSeconds"] == pytest.approx(t["mtbfSeconds"], rel=0.3), op
    # the generator's truth is half the spec's latency: the plan needs no more than now
    assert rec["improvement"] >= 0 and rec["plan"]["boundSatisfied"]
    assert set(rec["simulation"]) == {"current", "plan"}
    assert len(rec["tradeoff"]) == len(PlanParams().bound_factors)
    # the Spark estimates agree with the single-process pandas path
    spark_est = pd.read_json(out / "estimates.jsonl", lines=True).set_index("operator")
    pandas_est = estimate_operators_pandas(tasks, EstimateParams()).set_index("operator")
    for col in ("failure_rate", "reprocessing_latency", "observed_seconds", "failures"):
        assert spark_est[col].to_dict() == pytest.approx(pandas_est[col].to_dict(), rel=1e-6)
    # the CPU quantile: pandas' exact one rounded up to a millicore, exactly
    spark_milli = {op: round(v * 1000, 9) for op, v in spark_est["cpu_quantile"].items()}
    pandas_milli = {op: millicores(v) for op, v in pandas_est["cpu_quantile"].items()}
    assert spark_milli == pandas_milli


@pytest.mark.spark
def test_job_end_to_end_recovers_the_ground_truth(
    spark: SparkSession, generated: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    metrics, truth = generated
    code = main(["--metrics", str(metrics), "--topologies", str(EXAMPLE), "--node-cpu", "4",
                 "--out", str(tmp_path), "--master", "local[2]", "--time-limit", "0.5",
                 "--scenarios", "300"])  # fmt: skip
    assert code == 0
    _check_recovers_truth(tmp_path, truth, pd.read_parquet(metrics / "tasks.parquet"))


@pytest.mark.spark
def test_job_end_to_end_reads_an_object_store(
    spark: SparkSession,
    object_store_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The same generated metrics, as JSON Lines objects in a bucket (a real SeaweedFS),
    read through ``--metrics s3://…`` with the store's settings in the environment."""
    local = tmp_path / "metrics"
    truth = write_metrics(local, [load_topology(EXAMPLE)], GeneratorParams(rows=30_000, seed=3),
                          "jsonl")  # fmt: skip
    url = f"s3://{object_store_env['BACKSTOP_S3_BUCKET']}/e2e-{uuid.uuid4().hex[:12]}/metrics"
    blobs = open_blobs(url, object_store_env)
    for name in ("tasks.jsonl", "nodes.jsonl"):  # a folder of objects, as the runtime writes
        lines = (local / name).read_bytes().splitlines(keepends=True)
        for i in range(0, len(lines), 10_000):
            blobs.put(f"{name.split('.')[0]}/part-{i:06d}.jsonl", b"".join(lines[i : i + 10_000]))
    for key, value in object_store_env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    code = main(["--metrics", url, "--topologies", str(EXAMPLE), "--node-cpu", "4",
                 "--out", str(out), "--master", "local[2]", "--time-limit", "0.5",
                 "--scenarios", "300"])  # fmt: skip
    assert code == 0
    _check_recovers_truth(out, truth, pd.read_json(local / "tasks.jsonl", lines=True))


@pytest.mark.spark
def test_job_reads_json_lines(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "m"
    write_metrics(metrics, [load_topology(EXAMPLE)], GeneratorParams(rows=3000), "jsonl")
    out = tmp_path / "out"
    code = main(["--metrics", str(metrics), "--topologies", str(EXAMPLE), "--node-cpu", "4",
                 "--out", str(out), "--format", "parquet", "--time-limit", "0.3",
                 "--scenarios", "100"])  # fmt: skip
    assert code == 0
    rows = spark.read.parquet(str(out / "recommendations.parquet")).collect()
    assert [r.result for r in rows] == ["Recommended"]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda m: (m / "tasks.parquet").unlink(), "holds no tasks"),
        (
            lambda m: (
                pd.read_parquet(m / "tasks.parquet")
                .drop(columns=["cpu"])
                .to_parquet(m / "tasks.parquet")
            ),
            "lacks column(s) cpu",
        ),
        (lambda m: (m / "tasks.parquet").rename(m / "tasks.csv"), "no .parquet or .jsonl"),
    ],
    ids=["missing", "no-cpu-column", "unknown-format"],
)
def test_bad_input_is_one_clear_error(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any,
    needle: str,
) -> None:  # fmt: skip
    metrics = tmp_path / "m"
    write_metrics(metrics, [load_topology(EXAMPLE)], GeneratorParams(rows=500))
    mutate(metrics)
    code = main(["--metrics", str(metrics), "--topologies", str(EXAMPLE), "--node-cpu", "4",
                 "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err


class _JavaError(Py4JJavaError):  # type: ignore[misc]
    """A JVM failure as py4j reports it (its text is the Java stack trace)."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def test_a_jvm_failure_ends_with_its_cause_on_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = "\n".join([
        "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.",
        ": org.apache.spark.SparkException: External scheduler cannot be instantiated",
        "\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:1)",
        "Caused by: java.net.UnknownHostException: kubernetes.default.svc.cluster.local",
        "\tat io.netty.util.concurrent.FastThreadLocalRunnable.run(F.java:30)",
        "\t... 1 more",
    ])  # fmt: skip

    def fail(*_: Any) -> Any:
        raise _JavaError(trace)

    monkeypatch.setattr(reoptimize, "spark_session", fail)
    metrics = tmp_path / "m"
    write_metrics(metrics, [load_topology(EXAMPLE)], GeneratorParams(rows=50))
    code = main(["--metrics", str(metrics), "--topologies", str(EXAMPLE), "--node-cpu", "4",
                 "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1] == (
        "error: Spark failed: java.net.UnknownHostException: kubernetes.default.svc.cluster.local"
    )
