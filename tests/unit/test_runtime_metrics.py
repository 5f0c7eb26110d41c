"""Metrics written by real tasks feed ``backstop reoptimize`` (the Spark job).

The wordcount example runs as processes with a task SIGKILLed once; the rows its tasks
wrote are checked against what is known independently (records in the input, lines in
the output, the one restart), then the re-optimization job runs on them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(300)


@pytest.mark.spark
def test_reoptimize_runs_on_metrics_of_real_tasks(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_input(inp, files=2, per_file=1500, seed=5)
    # 3 s at 500 records/s per source: rows over several metrics intervals (0.5 s)
    spec = wordcount_spec(inp, tmp_path / "out", rate=500.0, batch=25)
    topo = LocalTopology(
        "wordcount", spec, tmp_path / "store", env={"BACKSTOP_METRICS_INTERVAL": "0.5"}
    )
    topo.start_all()
    try:
        topo.wait("progress", lambda: topo.status("sink-0").get("round", 0) >= 30)
        topo.kill("count-0")
        topo.start("count-0")
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
    finally:
        topo.stop_all()
    rows = {t: topo.metrics(t) for t in topo.tasks}
    sources = rows["source-0"] + rows["source-1"]
    assert sum(r["tuples_out"] for r in sources) == 3000  # every input record, once
    assert sum(r["tuples_in"] for r in rows["sink-0"]) == len(output_lines(tmp_path / "out"))
    assert [r["failures"] for r in rows["count-0"]].count(1) == 1  # the one restart
    assert all(r["cpu"] >= 0 and r["checkpoint_interval"] > 0 for rs in rows.values() for r in rs)
    metrics = topo.root / "metrics"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "backstop",
            "reoptimize",
            str(WORDCOUNT),
            "--metrics",
            str(metrics),
            "--node-cpu",
            "2",
            "--time-limit",  # the plans' quality is not what this test checks
            "0.3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    ops = {o["operator"]: o for o in doc["operators"]}
    assert set(ops) == {"source", "tokenize", "count", "sink"}
    assert all(o["measured"] for o in ops.values())
    # the estimate has a prior for every operator; only count's includes a real restart
    assert ops["count"]["failureRate"] > max(ops[o]["failureRate"] for o in ("tokenize", "sink"))
