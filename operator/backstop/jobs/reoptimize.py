"""The re-optimization job (PySpark): task metrics → estimates → re-planned topologies.

Why Spark: a fleet's metrics (one row per task per interval, millions of rows a
day) outgrow one process's memory long before the planning does, and Spark
runs the same code embedded (``local[*]``, no setup) or on Spark's own
Kubernetes scheduler (``--master k8s://…``) for large fleets, so there is no
home-made distribution layer to maintain.

Every step is a pure ``transform_*(df, *, …) -> DataFrame`` in
:mod:`backstop.jobs.transforms`, chained with ``df.transform`` by
:func:`~backstop.jobs.transforms.run_job`; inputs are read by :mod:`backstop.jobs.sparkio`;
:func:`main` here only reads inputs and writes outputs. Re-planning, Monte Carlo and the
trade-off curve run the project's planners in parallel across topologies with
``applyInPandas``; the arithmetic lives in :mod:`backstop.domain.recommend` and
:mod:`backstop.domain.estimates`, shared with the single-process pandas path the
benchmark compares against. The input schema is documented in ``docs/reoptimization.md``.

Run it with ``python -m backstop.jobs.reoptimize --help`` (or ``backstop
reoptimize`` for one topology). The operator runs it in a subprocess per run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pyspark.sql import DataFrame

from backstop.domain.estimates import NODE_COLUMNS, TASK_COLUMNS, EstimateParams
from backstop.domain.recommend import (
    PlanParams,
    SimulationParams,
)
from backstop.domain.spec import expand, parse_topology
from backstop.domain.yamlio import load_all
from backstop.jobs.sparkio import InputError, read_metrics, spark_session, topologies_frame
from backstop.jobs.transforms import run_job
from backstop.k8s.nodes import InvalidNodes, load_nodes
from planners import InvalidTopology, PlannerError
from planners.placement import Node

__all__ = [
    "EXIT_INPUT",
    "build_spark_job",
    "main",
]

EXIT_INPUT = 2


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
