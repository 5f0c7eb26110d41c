"""The re-optimization job reads its metrics from an object store (a real SeaweedFS).

Rows are written by the task runtime's own :class:`~backstop_runtime.metrics.MetricsWriter`
to an :class:`~backstop_runtime.blobs.S3Blobs` store, at the key the runtime's
:class:`~backstop_runtime.config.TaskConfig` gives its metrics; the job finds them at the
operator's default metricsPath for an object store, and reads the same DataFrame from the
bucket as from a directory holding the same objects, with the values the writer was fed.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backstop.domain import metricspath
from backstop.domain.estimates import NODE_COLUMNS, TASK_COLUMNS
from backstop.domain.storespec import StoreSpec
from backstop.jobs import s3metrics
from backstop.jobs.sparkio import InputError, metrics_inputs, read_metrics, spark_session
from backstop_runtime.blobs import DirBlobs, open_blobs
from backstop_runtime.config import from_env
from backstop_runtime.engine import Counters
from backstop_runtime.metrics import Metrics, MetricsWriter

NS, TOPO, UID = "prod", "wc", "u-1"
#: per task: (epoch, [(tuples_in total, tuples_out total, checkpoints, checkpoint seconds)])
WRITES = {
    "count-0": (1, [(10, 4, 1, 0.5), (25, 9, 3, 1.1), (45, 20, 3, 1.1)]),
    "count-1": (2, [(7, 7, 0, 0.0), (8, 8, 2, 0.9)]),
}


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    """The process's session (``getOrCreate``): another module's tests may hold it too, so
    it is left running (the JVM ends with the process)."""
    return spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app="tests")


@pytest.fixture
def s3_env(object_store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The store's settings in this process's environment, where the job reads them."""
    for key, value in object_store_env.items():
        monkeypatch.setenv(key, value)
    return object_store_env


def _runtime_metrics_key(store: str) -> str:
    """The key prefix a task of the topology writes its metrics under."""
    cfg = from_env({"BACKSTOP_TOPOLOGY": TOPO, "BACKSTOP_TASK_ID": "count-0",
                    "BACKSTOP_OPERATOR": "count", "BACKSTOP_TASK_INDEX": "0",
                    "BACKSTOP_STORE": store, "BACKSTOP_NAMESPACE": NS,
                    "BACKSTOP_TOPOLOGY_UID": UID})  # fmt: skip
    return cfg.metrics_key


def _write_rows(store: str, env: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Feed each task's writer the totals of :data:`WRITES`; the rows it wrote and the
    node rows' timestamps."""
    blobs = open_blobs(store, env)
    key = _runtime_metrics_key(store)
    rows: list[dict[str, Any]] = []
    for task, (epoch, totals) in WRITES.items():
        counters, metrics = Counters(), Metrics()
        w = MetricsWriter(blobs, key, TOPO, task, "node-a", epoch, 4.0, counters, metrics)
        for tin, tout, ckpts, ckpt_s in totals:
            counters.tuples_in, counters.tuples_out = tin, tout
            metrics.checkpoints, metrics.checkpoint_seconds = ckpts, ckpt_s
            rows.append(w.write())
    return rows, [r["timestamp"] for r in rows]


def _expected_tasks(written: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What the job must read: the differences of the totals fed in, per task; the
    checkpoint duration is seconds over checkpoints of the interval; the first row of
    the copy at epoch 2 counts one failure. Time and CPU are what the writer measured."""
    out = []
    i = 0
    for task, (epoch, totals) in WRITES.items():
        prev = (0, 0, 0, 0.0)
        for n, cur in enumerate(totals):
            d_in, d_out, d_ck = cur[0] - prev[0], cur[1] - prev[1], cur[2] - prev[2]
            d_s = cur[3] - prev[3]
            ts = datetime.fromisoformat(written[i]["timestamp"].replace("Z", "+00:00"))
            local = ts.astimezone().replace(tzinfo=None)  # how PySpark collects a timestamp
            duration = d_s / d_ck if d_ck else 0.0
            failures = 1 if n == 0 and epoch > 1 else 0
            out.append((TOPO, task, local, d_in, d_out, written[i]["cpu"], 4.0, duration, failures))
            prev, i = cur, i + 1
    return out


def _collect(spark: SparkSession, path: str, columns: dict[str, str]) -> list[tuple[Any, ...]]:
    df = read_metrics(spark, path, columns).select(*columns)
    return sorted(tuple(r) for r in df.collect())


def _copy_to_dir(store: str, env: dict[str, str], folder: Path) -> None:
    src, dst = open_blobs(store, env), DirBlobs(folder)
    for key in src.list(""):
        data = src.get(key)
        assert data is not None
        dst.put(key, data)


@pytest.mark.spark
def test_rows_of_the_runtime_read_from_the_bucket_equal_those_read_from_a_directory(
    spark: SparkSession, s3_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    bucket = s3_env["BACKSTOP_S3_BUCKET"]
    store = StoreSpec.model_validate({"objectStore": {"bucket": bucket, "prefix": prefix}})
    written, _ = _write_rows(store.object_store.location, s3_env)  # type: ignore[union-attr]
    default = metricspath.default_for(store)
    assert default is not None
    url = metricspath.fill(default, NS, TOPO, UID)
    tasks_url, nodes_url = metrics_inputs(url)
    assert (tasks_url, nodes_url) == (f"{url}/tasks", f"{url}/nodes")
    _copy_to_dir(f"s3://{bucket}/{prefix}", s3_env, tmp_path)
    folder = tmp_path / NS / TOPO / UID / "metrics"
    dir_tasks, dir_nodes = metrics_inputs(str(folder))

    from_s3 = _collect(spark, tasks_url, TASK_COLUMNS)
    assert from_s3 == sorted(_expected_tasks(written))
    assert from_s3 == _collect(spark, dir_tasks, TASK_COLUMNS)
    nodes_s3 = _collect(spark, nodes_url, NODE_COLUMNS)
    assert [(n, f) for n, _, f in nodes_s3] == [("node-a", 0)] * len(written)
    assert nodes_s3 == _collect(spark, dir_nodes, NODE_COLUMNS)


def test_a_prefix_without_metrics_is_one_clear_error(s3_env: dict[str, str]) -> None:
    url = f"s3://{s3_env['BACKSTOP_S3_BUCKET']}/none-{uuid.uuid4().hex[:8]}/metrics"
    with pytest.raises(InputError, match=r"holds no tasks/ or tasks\.jsonl"):
        metrics_inputs(url)
    with pytest.raises(s3metrics.S3MetricsError, match="holds no objects"):
        s3metrics.read_lines(f"{url}/tasks")


def test_objects_of_another_format_are_refused(s3_env: dict[str, str]) -> None:
    store = f"s3://{s3_env['BACKSTOP_S3_BUCKET']}/p-{uuid.uuid4().hex[:8]}"
    open_blobs(store, s3_env).put("m/tasks/part-0.parquet", b"PAR1")
    with pytest.raises(s3metrics.S3MetricsError, match=r"no \.jsonl objects"):
        s3metrics.read_lines(f"{store}/m/tasks")


def test_wrong_credentials_are_reported_with_the_url(s3_env: dict[str, str]) -> None:
    env = {**s3_env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    url = f"s3://{s3_env['BACKSTOP_S3_BUCKET']}/x/metrics"
    with pytest.raises(s3metrics.S3MetricsError, match=f"cannot (list|read) {url}"):
        s3metrics.read_lines(f"{url}/tasks", env)


def test_filesystem_takes_the_runtimes_settings() -> None:
    fs = s3metrics.filesystem(
        {"BACKSTOP_S3_ENDPOINT": "http://10.0.0.5:18333", "AWS_REGION": "eu-west-1"}
    )
    options = fs.__reduce__()[1][0]  # the settings it was made with (what pickling keeps)
    assert (options["region"], options["scheme"], options["endpoint_override"]) == (
        "eu-west-1", "http", "10.0.0.5:18333")  # fmt: skip
    assert options["access_key"] is None  # none given: pyarrow's own search
    assert s3metrics.filesystem({}).region == "us-east-1"


def test_the_cli_hands_an_s3_url_to_the_job_whole(s3_env: dict[str, str]) -> None:
    """``backstop reoptimize FILE --metrics s3://…``: the job gets the URL as given (a path
    type would fold ``//``) and reads the bucket; an empty prefix is its one error line."""
    url = f"s3://{s3_env['BACKSTOP_S3_BUCKET']}/cli-{uuid.uuid4().hex[:8]}/metrics"
    example = Path(__file__).resolve().parents[2] / "examples" / "twitter-sentiment.yaml"
    res = subprocess.run(
        [sys.executable, "-m", "backstop", "reoptimize", str(example), "--metrics", url,
         "--node-cpu", "2"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode != 0
    assert f"{url} holds no tasks/ or tasks.jsonl" in res.stdout + res.stderr
