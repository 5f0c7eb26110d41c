#!/usr/bin/env python3
"""Measure the task runtime locally: throughput, and recovery against the model's ℓ(v).

Why: the failure-effect model says a lost task is back after ``ℓ(v) = t_v + max a(u)``,
where a producer without an upstream backup adds its own replay. This runs the word count
chain ``source -> tokenize -> count -> sink`` (one task each) as local processes at a
steady input rate, SIGKILLs the sink mid-stream, restarts it at once, and measures the time
from the kill until the sink has caught up with its input (the batches it processes are
less than ``BACKSTOP_CAUGHT_UP_LAG``, 0.5 s, old), for each choice of backups; the model's
prediction uses the spec's ``t_v``.
Processes on one machine, so node-loss detection and pod start are not in these numbers;
the bound on real nodes is measured by the e2e benchmark.

Prints a markdown section to stdout (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/runtime-local.md``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.spec import expand
from backstop_runtime.input import put_files
from backstop_testkit.support.docsection import emit
from backstop_testkit.support.objectstore import running_object_store
from backstop_testkit.support.runtime_data import output_lines, wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology
from planners.evaluate import node_failure_latency

HEADING = "## Task runtime (local processes)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "runtime-local.md"
COMMAND = "python bench/bench_runtime_local.py --out"


def throughput(base: Path, inp: Path, records: int, s3: dict[str, str] | None = None) -> float:
    """Records per second of the word count end to end, its state, input and output in a
    directory, or with ``s3`` (a running store's settings) all in that store's bucket."""
    if s3 is None:
        spec = wordcount_spec(inp, base / "out", rate=0.0, batch=1000)
        topo = LocalTopology("tp", spec, base / "store")
        out: str | Path = base / "out"
    else:
        bucket = f"s3://{s3['BACKSTOP_S3_BUCKET']}/{base.name}"
        put_files(f"{bucket}/in", sorted(inp.glob("*.jsonl")), env=s3)
        out = f"{bucket}/out"
        spec = wordcount_spec(f"{bucket}/in", out, rate=0.0, batch=1000)
        topo = LocalTopology("tp", spec, base / "store", env=s3, location=f"{bucket}/state")
    t0 = time.monotonic()
    topo.start_all()
    try:
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, 600)
    finally:
        topo.stop_all()
    seconds = time.monotonic() - t0
    assert output_lines(out, s3), "no output"
    return records / seconds


def recovery(base: Path, inp: Path, backups: tuple[str, ...], rate: float) -> dict[str, object]:
    spec = wordcount_spec(inp, base / "out", rate=rate, batch=50, parallelism=1)
    topo = LocalTopology("rec", spec, base / "store", backups=backups)
    topo.start_all()
    try:
        topo.wait("progress", lambda: topo.status("sink-0").get("round", 0) >= 60, 120)
        killed = time.time()
        topo.kill("sink-0")
        topo.start("sink-0")
        topo.wait(
            "the new copy to catch up",
            lambda: (
                topo.status("sink-0").get("epoch") == 2
                and topo.status("sink-0").get("recoverySeconds") is not None
            ),
        )
        st = topo.status("sink-0")
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, 600)
    finally:
        topo.stop_all()
    assert output_lines(base / "out"), "no output"
    predicted = node_failure_latency(expand(spec), backups, ["sink-0"])
    replayed = [
        t for t in ("source-0", "tokenize-0", "count-0") if topo.status(t)["replayedBatches"]
    ]
    return {
        "predicted": predicted,
        "measured": st["started"] + st["recoverySeconds"] - killed,
        "replayed": " → ".join(reversed(replayed)) or "none",
    }


def report(args: argparse.Namespace, tput: float, tput_s3: float, rows: list[Any]) -> str:
    """The page's section: throughput per store kind, then recovery per choice of backups."""
    lines = [
        HEADING,
        "",
        "Word count (2 sources, 7 tasks) as local processes, unpaced, "
        f"{args.records:,} records, end to end; one run each, in this order:",
        "",
        "| state, input and output in | records/s |",
        "|---|---|",
        f"| a directory | {tput:,.0f} |",
        f"| an S3 bucket (SeaweedFS on 127.0.0.1) | {tput_s3:,.0f} |",
        "",
        f"Sink SIGKILLed at {args.rate:,.0f} records/s, restarted at once (directory store):",
        "",
        "| backups | predicted ℓ(sink) (spec t_v) | measured kill → caught up | replayed by |",
        "|---|---|---|---|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['predicted']:.1f} s | {r['measured']:.2f} s | {r['replayed']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=60000, help="input records in all")
    p.add_argument("--rate", type=float, default=3000.0, help="records/s in the recovery runs")
    p.add_argument(
        "--out", type=Path, nargs="?", const=PAGE, help="write its page (no path: its own)"
    )
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    try:
        inp = work / "in"
        write_input(inp, files=2, per_file=args.records // 2)
        print(f"throughput: {args.records} records, directory store…", file=sys.stderr)
        tput = throughput(work / "tp", inp, args.records)
        print("throughput: the same on an object store (SeaweedFS, S3 API)…", file=sys.stderr)
        with running_object_store(work / "objectstore") as s3:
            tput_s3 = throughput(work / "tp-s3", inp, args.records, s3)
        rows: list[tuple[str, dict[str, Any]]] = []
        for backups in ((), ("tokenize-0",), ("count-0",)):
            print(f"recovery, backups {backups or 'none'}…", file=sys.stderr)
            r = recovery(work / f"rec-{len(rows)}", inp, backups, args.rate)
            rows.append((", ".join(backups) or "none", r))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return emit(report(args, tput, tput_s3, rows), args.out, HEADING, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
