"""The re-optimization job (PySpark): task metrics → estimates → re-planned topologies.

Why Spark: a fleet's metrics (one row per task per interval, millions of rows a
day) outgrow one process's memory long before the planning does, and Spark
runs the same code embedded (``local[*]``, no setup) or on Spark's own
Kubernetes scheduler (``--master k8s://…``) for large fleets, so there is no
home-made distribution layer to maintain.

Every step is a pure ``transform_*(df, *, …) -> DataFrame`` in
:mod:`backstop.jobs.transforms`, chained with ``df.transform`` by
:func:`~backstop.jobs.transforms.run_job`; inputs are read by :mod:`backstop.jobs.sparkio`
(an ``s3://`` object store's metrics through :mod:`backstop.jobs.s3metrics`, with pyarrow);
:func:`main` here only reads inputs and writes outputs. Re-planning, Monte Carlo and the
trade-off curve run the project's planners in parallel across topologies with
``applyInPandas``; the arithmetic lives in :mod:`backstop.domain.recommend` and
:mod:`backstop.domain.estimates`, shared with the single-process pandas path. The input
schema is documented in ``docs/reoptimization.md``.

Run it with ``python -m backstop.jobs.reoptimize --help`` (or ``backstop
reoptimize`` for one topology). The operator runs it in a subprocess per run
(``reoptimization.mode: local``) or in a Kubernetes Job from the Spark image (``mode:
job``, :mod:`backstop.k8s.reoptjob`), which hands its recommendation back with
``--result-configmap``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from kubernetes.client.exceptions import ApiException
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from backstop.domain.estimates import NODE_COLUMNS, TASK_COLUMNS, EstimateParams
from backstop.domain.recommend import (
    PlanParams,
    SimulationParams,
)
from backstop.domain.spec import expand, parse_topology
from backstop.domain.yamlio import load_all
from backstop.jobs.sparkio import (
    InputError,
    metrics_inputs,
    read_metrics,
    spark_session,
    topologies_frame,
)
from backstop.jobs.transforms import run_job
from backstop.k8s import reoptjob
from backstop.k8s.cluster import ClusterUnavailable, api_client
from backstop.k8s.nodes import InvalidNodes, load_nodes
from planners import InvalidTopology, PlannerError
from planners.placement import Node

__all__ = [
    "EXIT_INPUT",
    "main",
]

EXIT_INPUT = 2
EXIT_SPARK = 1


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
    if args.metrics and not (tasks and nodes):
        found_tasks, found_nodes = metrics_inputs(args.metrics)
        tasks, nodes = tasks or found_tasks, nodes or found_nodes
    if not tasks or not nodes:
        raise InputError("pass --metrics DIR, or both --task-metrics and --node-metrics")
    return tasks, nodes


def _load_manifests(paths: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        try:
            docs = load_all(Path(p).read_text())
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
    p.add_argument(
        "--metrics",
        help="Directory or s3://bucket/prefix with tasks and nodes (.parquet, .jsonl or a "
        "folder of them; an object store's are JSON Lines, read with BACKSTOP_S3_ENDPOINT "
        "and AWS_* credentials).",
    )
    p.add_argument("--task-metrics", help="Task metrics (file, directory or s3:// prefix).")
    p.add_argument("--node-metrics", help="Node metrics (file, directory or s3:// prefix).")
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
    p.add_argument(
        "--result-configmap",
        help="Also create this ConfigMap (in $POD_NAMESPACE) holding the one recommendation: "
        "how a Kubernetes Job hands it back to the operator.",
    )
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


def _publish(name: str, recs: Sequence[Mapping[str, Any]]) -> None:
    """Hand the recommendation to the operator: a ConfigMap owned by this Job."""
    if len(recs) != 1:
        raise InputError(f"--result-configmap needs exactly one topology, got {len(recs)}")
    namespace = os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise InputError("--result-configmap needs POD_NAMESPACE (the Job sets it)")
    try:
        reoptjob.publish_result(
            api_client(), name, namespace, recs[0], os.environ.get("BACKSTOP_JOB_UID") or None
        )
    except (ApiException, ClusterUnavailable) as err:
        reason = getattr(err, "reason", None) or str(err)
        raise InputError(f"cannot create ConfigMap {namespace}/{name}: {reason}") from None


def _compute(args: argparse.Namespace) -> tuple[SparkSession, DataFrame, DataFrame]:
    """Check and read the inputs, then run :func:`run_job`: (session, estimates, recs)."""
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
    return spark, estimates, recs


def _write(
    args: argparse.Namespace, spark: SparkSession, estimates: DataFrame, recs: DataFrame
) -> tuple[Path, int]:
    """Write the recommendations and estimates to ``--out`` (and the result ConfigMap).

    Returns the output directory and the number of recommendations written.
    """
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.format == "parquet":
        recs.write.mode("overwrite").parquet(str(out / "recommendations.parquet"))
        estimates.write.mode("overwrite").parquet(str(out / "estimates.parquet"))
        return out, spark.read.parquet(str(out / "recommendations.parquet")).count()
    objs = recommendation_objects(recs)
    with (out / "recommendations.jsonl").open("w") as f:
        for obj in objs:
            f.write(json.dumps(obj) + "\n")
    est = pd.DataFrame(estimates.orderBy("topology", "operator").toPandas())
    est.to_json(out / "estimates.jsonl", orient="records", lines=True)
    if args.result_configmap:
        _publish(args.result_configmap, objs)
    return out, len(objs)


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
        spark, estimates, recs = _compute(args)
        out, count = _write(args, spark, estimates, recs)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except (InvalidTopology, PlannerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except Py4JJavaError as err:  # the JVM failed: the trace, then its cause on the last line
        # (a Job's termination message is its log's last 2 KiB: a JVM trace's last frames,
        # which name no cause, e.g. in a k8s:// run that cannot reach the API server)
        traceback.print_exc()
        cause = reoptjob.deepest_exception(str(err).splitlines()) or type(err).__name__
        print(f"error: Spark failed: {cause}", file=sys.stderr)
        return EXIT_SPARK
    params = {"args": " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))}
    print(
        f"reoptimize: {count} recommendation(s) in {out} "
        f"({time.monotonic() - started:.1f}s; {params['args']})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
