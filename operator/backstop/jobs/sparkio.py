"""The re-optimization job's input side: the Spark session and the metrics and
topologies read into DataFrames, with the schemas of ``docs/reoptimization.md``.

Metrics come from a directory (Spark reads the files) or an ``s3://`` prefix of an object
store (:mod:`backstop.jobs.s3metrics` reads the objects, Spark parses their lines).

Input the job cannot use raises :class:`InputError` naming the file and why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from backstop.domain.metricspath import is_s3
from backstop.domain.recommend import (
    dumps,
)
from backstop.jobs import s3metrics
from planners.placement import Node

__all__ = [
    "SPARK_TYPES",
    "InputError",
    "metrics_inputs",
    "read_metrics",
    "spark_session",
    "topologies_frame",
]

SPARK_TYPES = {
    "string": StringType(),
    "timestamp": TimestampType(),
    "long": LongType(),
    "double": DoubleType(),
}


class InputError(Exception):
    """Input the job cannot use; the message says which file and why."""


# ------------------------------------------------------------------ session & I/O
def spark_session(
    master: str = "local[*]", conf: Mapping[str, str] | None = None, app: str = "backstop"
) -> SparkSession:
    """A SparkSession for the job: UI off, UTC, few shuffle partitions, Arrow on, ANSI SQL on,
    no Parquet dictionary filtering.

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
        # pyspark 4 has ANSI mode on by default, 3.5 off: say which, so both
        # versions compute the same (an invalid cast or a division by zero fails the job
        # instead of turning into a silent null)
        .config("spark.sql.ansi.enabled", "true")
        # the job's row filters (CPU >= 0, keys not null) are pushed into the Parquet reader,
        # which then builds a set of every dictionary value of every row group to see whether
        # the group can be skipped: on metrics it never can, and the sets are a large share of
        # the JVM's work; the row groups' min/max statistics are still used
        .config("spark.hadoop.parquet.filter.dictionary.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _schema(columns: Mapping[str, str]) -> StructType:
    return StructType([StructField(c, SPARK_TYPES[t], True) for c, t in columns.items()])


def _format_of(path: Path) -> str:
    names = [path.name] if path.is_file() else [p.name for p in path.iterdir()]
    for n in names:
        if n.endswith(".parquet"):
            return "parquet"
        if n.endswith((".jsonl", ".json", ".ndjson")):
            return "json"
    raise InputError(f"{path}: no .parquet or .jsonl files (the metric formats this job reads)")


def _s3_lines(url: str) -> list[str]:
    try:
        return s3metrics.read_lines(url)
    except s3metrics.S3MetricsError as err:
        raise InputError(str(err)) from None


def metrics_inputs(base: str) -> tuple[str, str]:
    """The task and node metrics under ``--metrics base`` (a directory or ``s3://`` prefix):
    ``tasks``/``nodes`` as a folder, ``.parquet`` or ``.jsonl`` (the first by name)."""
    if is_s3(base):
        try:
            s3 = s3metrics.filesystem()
            return s3metrics.pick(s3, base, "tasks"), s3metrics.pick(s3, base, "nodes")
        except s3metrics.S3MetricsError as err:
            raise InputError(str(err)) from None
    folder = Path(base)
    if not folder.is_dir():
        raise InputError(f"--metrics {folder} is not a directory")

    def pick(stem: str) -> str:
        found = sorted(p for p in folder.iterdir() if p.name.split(".")[0] == stem)
        if not found:
            raise InputError(f"{folder} holds no {stem}.parquet, {stem}.jsonl or {stem}/")
        return str(found[0])

    return pick("tasks"), pick("nodes")


def read_metrics(spark: SparkSession, path: str, columns: Mapping[str, str]) -> DataFrame:
    """Read Parquet or JSON Lines metrics and check they have the columns of the schema.

    Parameters
    ----------
    spark:
        The session.
    path:
        A file or a directory of part files; the format follows the file names
        (``.parquet``; ``.jsonl``/``.json``/``.ndjson``). An ``s3://`` object or prefix is
        JSON Lines, read by :mod:`backstop.jobs.s3metrics` and parsed by Spark's JSON
        reader with the same schema as a directory's files; other URLs (``s3a://…``, with
        Spark's own Hadoop filesystems) are read as Parquet.
    columns:
        :data:`~backstop.domain.estimates.TASK_COLUMNS` or
        :data:`~backstop.domain.estimates.NODE_COLUMNS`.

    Raises
    ------
    InputError
        Missing path, unknown format, or missing columns (all named).
    """
    local = "://" not in path
    if local and not Path(path).exists():
        raise InputError(f"{path} does not exist")
    fmt = _format_of(Path(path)) if local else "parquet"
    extra = {"domain": "string"} if "node" in columns else {}
    json_schema = _schema({**columns, **extra})
    try:
        if is_s3(path):
            lines = _s3_lines(path)
            df = spark.read.schema(json_schema).json(spark.sparkContext.parallelize(lines))
        elif fmt == "json":
            df = spark.read.schema(json_schema).json(path)
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
