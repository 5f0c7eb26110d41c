#!/usr/bin/env python3
"""Benchmark the re-optimization job: rows per second in local mode, and Spark vs pandas.

Why: the target is one million metric rows processed end to end (read,
estimate, re-plan, Monte Carlo, trade-off curve, write) in under 60 s on two
cores in ``local`` mode, and an honest answer to "when is Spark worth it?".
For each size this script generates a synthetic fleet (copies of
``examples/twitter-sentiment.yaml``) with :mod:`backstop_testkit.sim.metricsgen`, then
times three things:

1. the whole job as users run it: ``python -m backstop.jobs.reoptimize --master
   local[N]`` in a fresh process (JVM start-up included);
2. the estimates alone in Spark, in a warm session (read + two aggregations);
3. the same estimates in one process with pandas
   (:func:`backstop.domain.estimates.estimate_operators_pandas`), read included.

Prints a markdown section to stdout (progress to stderr); ``--out``
writes its page, ``docs/benchmarks/reoptimize.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from backstop.domain.estimates import TASK_COLUMNS, EstimateParams, estimate_operators_pandas
from backstop.domain.spec import StreamTopology, load_topology
from backstop.jobs.sparkio import read_metrics, spark_session
from backstop.jobs.transforms import (
    transform_clean_task_metrics,
    transform_operator_estimates,
    transform_task_summary,
)
from backstop_testkit.sim.metricsgen import GeneratorParams, write_metrics
from backstop_testkit.support.docsection import emit

HEADING = "## Re-optimization (Spark)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "reoptimize.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_reoptimize.py --out"
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fleet(n: int) -> list[StreamTopology]:
    topo = load_topology(EXAMPLE)
    return [
        topo.model_copy(update={"metadata": topo.metadata.model_copy(update={"name": f"st-{i}"})})
        for i in range(n)
    ]


def time_job(metrics: Path, cores: int, time_limit: float, scenarios: int) -> float:
    """Wall-clock seconds of the whole job in a fresh process."""
    with tempfile.TemporaryDirectory() as out:
        args = [sys.executable, "-m", "backstop.jobs.reoptimize", "--metrics", str(metrics),
                "--topologies", str(metrics / "topologies.yaml"), "--node-cpu", "4",
                "--out", out, "--master", f"local[{cores}]", "--time-limit", str(time_limit),
                "--scenarios", str(scenarios)]  # fmt: skip
        env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
        t = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
        took = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"error: the job failed:\n{proc.stderr[-2000:]}")
        return took


def time_spark_estimates(metrics: Path, cores: int) -> float:
    spark = spark_session(f"local[{cores}]")
    params = EstimateParams()

    def run() -> float:
        t = time.perf_counter()
        df = read_metrics(spark, str(metrics / "tasks.parquet"), TASK_COLUMNS)
        (
            df.transform(transform_clean_task_metrics)
            .transform(transform_task_summary, params=params)
            .transform(transform_operator_estimates, params=params)
            .collect()
        )
        return time.perf_counter() - t

    run()  # warm-up: JIT, code generation, Python workers
    return min(run() for _ in range(2))


def time_pandas_estimates(metrics: Path) -> float:
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        estimate_operators_pandas(pd.read_parquet(metrics / "tasks.parquet"), EstimateParams())
        best = min(best, time.perf_counter() - t)
    return best


def fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e3:,.0f} k"


def run(args: argparse.Namespace) -> str:
    results = []
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            metrics = Path(tmp)
            log(f"generating {rows:,} rows ({args.topologies} topologies)…")
            truth = write_metrics(metrics, fleet(args.topologies), GeneratorParams(rows=rows))
            n = int(truth["rows"])
            log("  whole job (fresh process)…")
            job = time_job(metrics, args.cores, args.time_limit, args.scenarios)
            log(f"  {job:.1f}s; Spark estimates (warm)…")
            spark_est = time_spark_estimates(metrics, args.cores)
            log(f"  {spark_est:.1f}s; pandas estimates…")
            pandas_est = time_pandas_estimates(metrics)
            log(f"  {pandas_est:.1f}s")
            results.append((n, job, spark_est, pandas_est))
    lines = [
        HEADING,
        "",
        f"`python bench/bench_reoptimize.py --rows {' '.join(str(r) for r in args.rows)} "
        f"--cores {args.cores} --topologies {args.topologies} --time-limit {args.time_limit:g} "
        f"--scenarios {args.scenarios}` on {os.cpu_count()} cores: {args.topologies} copies of "
        "`examples/twitter-sentiment.yaml` (13 tasks each), one row per task per minute, "
        f"Parquet, Spark `local[{args.cores}]`. *Whole job*: a fresh `python -m "
        "backstop.jobs.reoptimize` process (JVM start-up, read, estimates, re-plan, Monte Carlo "
        f"with {args.scenarios} windows per plan, trade-off curve at 6 bounds, write), planner "
        f"budget {args.time_limit:g} s per plan. *Estimates*: read + per-task + per-operator "
        "aggregation only, best of 2 after a warm-up (Spark) or best of 2 (pandas).",
        "",
        "| rows | whole job (s) | rows/s | Spark estimates (s) | rows/s | pandas estimates (s) "
        "| rows/s | faster |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n, job, se, pe in results:
        faster = "pandas" if pe < se else "Spark"
        lines.append(
            f"| {n:,} | {job:.1f} | {fmt_rate(n, job)} | {se:.1f} | {fmt_rate(n, se)} | "
            f"{pe:.1f} | {fmt_rate(n, pe)} | {faster} ({max(se, pe) / min(se, pe):.1f}×) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000],
                   help="metric rows per run (default: 1M and 10M)")  # fmt: skip
    p.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    p.add_argument("--topologies", type=int, default=8, help="topologies in the fleet")
    p.add_argument("--time-limit", type=float, default=0.5, help="planner seconds per plan")
    p.add_argument("--scenarios", type=int, default=2000, help="Monte Carlo windows per plan")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    if min(args.rows) < 1 or args.cores < 1 or args.topologies < 1:
        p.error("--rows, --cores and --topologies must be positive")
    section = run(args)
    return emit(section, args.out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
