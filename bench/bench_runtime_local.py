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

Prints a markdown table to stdout (progress to stderr).
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
from backstop_testkit.support.runtime_data import output_lines, wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology
from planners.evaluate import node_failure_latency


def throughput(base: Path, inp: Path, records: int) -> float:
    spec = wordcount_spec(inp, base / "out", rate=0.0, batch=1000)
    topo = LocalTopology("tp", spec, base / "store")
    t0 = time.monotonic()
    topo.start_all()
    try:
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, 600)
    finally:
        topo.stop_all()
    return records / (time.monotonic() - t0)


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=60000, help="input records in all")
    p.add_argument("--rate", type=float, default=3000.0, help="records/s in the recovery runs")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    try:
        inp = work / "in"
        write_input(inp, files=2, per_file=args.records // 2)
        print(f"throughput: {args.records} records…", file=sys.stderr)
        tput = throughput(work / "tp", inp, args.records)
        rows: list[tuple[str, dict[str, Any]]] = []
        for backups in ((), ("tokenize-0",), ("count-0",)):
            print(f"recovery, backups {backups or 'none'}…", file=sys.stderr)
            r = recovery(work / f"rec-{len(rows)}", inp, backups, args.rate)
            rows.append((", ".join(backups) or "none", r))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("## Task runtime (local processes)\n")
    print(f"Word count (2 sources, 7 tasks) end to end: **{tput:,.0f} records/s**.\n")
    print(f"Sink SIGKILLed at {args.rate:,.0f} records/s, restarted at once:\n")
    print("| backups | predicted ℓ(sink) (spec t_v) | measured kill → caught up | replayed by |")
    print("|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['predicted']:.1f} s | {r['measured']:.2f} s | {r['replayed']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
