"""Synthetic task and node metrics, with a known ground truth, for demos, tests and benchmarks.

Why: the re-optimization job needs weeks of per-task metrics before it says
anything, and tests need data whose right answer is known. This generator
draws that data from a simple model of each operator: a failure rate, a
checkpoint cost chosen so that Young's interval gives a known reprocessing
latency, CPU use around a share of the request with a daily cycle, and node
failures with occasional correlated events. It writes the ground truth beside
the data (``truth.json``), so tests can check the job recovers it. In
production the task runtime or a Prometheus export writes the same schema
(docs/reoptimization.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from backstop.domain.spec import StreamTopology, expand

__all__ = ["GeneratorParams", "generate", "write_metrics"]

_TASK_SCHEMA = pa.schema(
    [
        ("topology", pa.string()),
        ("task", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("tuples_in", pa.int64()),
        ("tuples_out", pa.int64()),
        ("cpu", pa.float64()),
        ("checkpoint_interval", pa.float64()),
        ("checkpoint_duration", pa.float64()),
        ("failures", pa.int64()),
    ]
)
_NODE_SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("failures", pa.int64()),
        ("domain", pa.string()),
    ]
)


@dataclass(frozen=True)
class GeneratorParams:
    """The synthetic fleet.

    Attributes
    ----------
    rows:
        Task rows to write in total (rounded up to whole intervals).
    interval_seconds:
        Seconds per row.
    task_mtbf:
        Mean time between failures of a task, seconds (each operator draws its
        own within a factor of 2 of it).
    latency_scale:
        True reprocessing latency as a share of the spec's ``reprocessingLatency``
        (below 1: the spec is conservative and re-planning can gain).
    nodes, zones:
        Simulated nodes ``node-<i>`` and the zones they spread over.
    node_mtbf:
        Mean time between independent failures of a node, seconds.
    correlated_per_day:
        Correlated events (two nodes of one zone failing together) per day.
    seed:
        Random seed.
    """

    rows: int = 100_000
    interval_seconds: float = 60.0
    task_mtbf: float = 1800.0
    latency_scale: float = 0.5
    nodes: int = 6
    zones: int = 2
    node_mtbf: float = 7 * 86400.0
    correlated_per_day: float = 0.5
    seed: int = 1


def _truth(topo: StreamTopology, rng: np.random.Generator, p: GeneratorParams) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    for op in topo.spec.operators:
        mtbf = p.task_mtbf * float(rng.uniform(0.5, 2.0))
        latency = op.reprocessing_latency * p.latency_scale
        tau = 2.0 * latency
        ops[op.name] = {
            "mtbfSeconds": mtbf,
            "failureRate": 1.0 / mtbf,
            "reprocessingLatency": latency,
            "youngInterval": tau,
            "checkpointDuration": tau * tau / (2.0 * mtbf),
            "cpuShare": float(rng.uniform(0.2, 0.6)),
            "request": op.resources.cpu_cores,
            "tuplesPerSecond": float(rng.uniform(100, 5000)),
            "selectivity": float(rng.uniform(0.2, 1.0)),
        }
    return ops


def _task_batches(
    topo: StreamTopology,
    truth: dict[str, Any],
    intervals: int,
    start: float,
    rng: np.random.Generator,
    p: GeneratorParams,
    chunk: int = 2000,
) -> list[pa.RecordBatch]:
    graph = expand(topo.spec)
    name = topo.metadata.name
    batches = []
    for lo in range(0, intervals, chunk):
        n = min(chunk, intervals - lo)
        ts = start + (lo + np.arange(n)) * p.interval_seconds
        daily = 1.0 + 0.3 * np.sin(2 * math.pi * ts / 86400.0)
        cols: dict[str, list[np.ndarray[Any, Any]]] = {k: [] for k in _TASK_SCHEMA.names}
        for i, task in enumerate(graph.tasks):
            t = truth[graph.operator[i]]
            cpu = t["request"] * t["cpuShare"] * daily * rng.lognormal(0.0, 0.15, n)
            tin = rng.poisson(t["tuplesPerSecond"] * p.interval_seconds * daily)
            cols["topology"].append(np.full(n, name, dtype=object))
            cols["task"].append(np.full(n, task, dtype=object))
            cols["timestamp"].append((ts * 1e6).astype("int64"))
            cols["tuples_in"].append(tin.astype("int64"))
            cols["tuples_out"].append(rng.binomial(tin, t["selectivity"]).astype("int64"))
            cols["cpu"].append(cpu)
            cols["checkpoint_interval"].append(
                np.full(n, 2.0 * t["reprocessingLatency"] / p.latency_scale)
            )
            cols["checkpoint_duration"].append(t["checkpointDuration"] * rng.gamma(4.0, 0.25, n))
            cols["failures"].append(
                rng.poisson(p.interval_seconds / t["mtbfSeconds"], n).astype("int64")
            )
        arrays = [pa.array(np.concatenate(cols[f.name]), type=f.type) for f in _TASK_SCHEMA]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=_TASK_SCHEMA))
    return batches


def _node_table(
    intervals: int, start: float, rng: np.random.Generator, p: GeneratorParams
) -> tuple[pa.Table, dict[str, Any]]:
    names = [f"node-{i}" for i in range(p.nodes)]
    zones = [f"zone-{i % max(p.zones, 1)}" for i in range(p.nodes)]
    ts = start + np.arange(intervals) * p.interval_seconds
    fails = rng.random((p.nodes, intervals)) < p.interval_seconds / p.node_mtbf
    rate = p.correlated_per_day / 86400.0
    events = np.flatnonzero(rng.random(intervals) < rate * p.interval_seconds)
    by_zone: dict[str, list[int]] = {}
    for i, z in enumerate(zones):
        by_zone.setdefault(z, []).append(i)
    zone_keys = sorted(by_zone)
    for e in events:
        members = by_zone[zone_keys[int(rng.integers(len(zone_keys)))]]
        for i in rng.choice(members, size=min(2, len(members)), replace=False):
            fails[i, e] = True
    table = pa.table(
        {
            "node": pa.array(np.repeat(names, intervals)),
            "timestamp": pa.array(
                np.tile((ts * 1e6).astype("int64"), p.nodes), type=pa.timestamp("us", tz="UTC")
            ),
            "failures": pa.array(fails.reshape(-1).astype("int64")),
            "domain": pa.array(np.repeat(zones, intervals)),
        },
        schema=_NODE_SCHEMA,
    )
    truth = {
        "nodeFailureRate": 1.0 / p.node_mtbf,
        "correlatedRate": rate,
        "correlatedEvents": len(events),
    }
    return table, truth


def generate(
    topologies: Sequence[StreamTopology], params: GeneratorParams, start: float = 1.7e9
) -> tuple[list[pa.RecordBatch], pa.Table, dict[str, Any]]:
    """Task batches, the node table and the ground truth for ``topologies``.

    Parameters
    ----------
    topologies:
        The topologies whose tasks report metrics.
    params:
        See :class:`GeneratorParams`.
    start:
        Epoch seconds of the first interval.

    Returns
    -------
    (task batches, node table, truth)
        ``truth`` maps ``topologies → {name → {operator → model}}`` plus the
        node model and ``rows`` written.
    """
    rng = np.random.default_rng(params.seed)
    total_tasks = sum(len(expand(t.spec)) for t in topologies)
    if total_tasks == 0:
        raise ValueError("no tasks to generate metrics for")
    intervals = max(1, math.ceil(params.rows / total_tasks))
    truth: dict[str, Any] = {"topologies": {}, "intervals": intervals}
    batches: list[pa.RecordBatch] = []
    for topo in topologies:
        ops = _truth(topo, rng, params)
        truth["topologies"][topo.metadata.name] = ops
        batches += _task_batches(topo, ops, intervals, start, rng, params)
    nodes, node_truth = _node_table(intervals, start, rng, params)
    truth.update(node_truth, rows=sum(b.num_rows for b in batches))
    return batches, nodes, truth


def write_metrics(
    out: Path, topologies: Sequence[StreamTopology], params: GeneratorParams, fmt: str = "parquet"
) -> dict[str, Any]:
    """Write ``tasks.<ext>``, ``nodes.<ext>``, ``truth.json`` and ``topologies.yaml`` to ``out``.

    ``fmt`` is ``parquet`` or ``jsonl``. Returns the truth.
    """
    if fmt not in ("parquet", "jsonl"):
        raise ValueError(f"format must be parquet or jsonl, not {fmt!r}")
    out.mkdir(parents=True, exist_ok=True)
    batches, nodes, truth = generate(topologies, params)
    if fmt == "parquet":
        with pq.ParquetWriter(out / "tasks.parquet", _TASK_SCHEMA) as w:
            for b in batches:
                w.write_batch(b)
        pq.write_table(nodes, out / "nodes.parquet")
    else:
        with (out / "tasks.jsonl").open("w") as f:
            for b in batches:
                _jsonl(b.to_pandas(), f)
        with (out / "nodes.jsonl").open("w") as f:
            _jsonl(nodes.to_pandas(), f)
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    docs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in topologies]
    (out / "topologies.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return truth


def _jsonl(df: pd.DataFrame, f: Any) -> None:
    df = df.assign(timestamp=df["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    text = df.to_json(orient="records", lines=True)
    f.write(text if text.endswith("\n") or not text else text + "\n")
