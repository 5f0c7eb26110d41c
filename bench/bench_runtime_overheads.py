#!/usr/bin/env python3
"""What checkpointing, order-preserving batches and output buffers cost in normal processing.

Why: *Incremental Recovery in Distributed Stream Processing Systems*, Appendix C, measures
the price of its fault tolerance on the topology of its Fig. 17 (a tweet source, a hashtag
parser and two sliding-window counters): Fig. 18 throughput and latency with and without
order-preserving processing and adaptive buffering, Figs. 19 and 20 the maximal throughput
and the latency against the checkpoint interval. This reruns both on the task runtime, as
local processes with a directory store (``runtime/backstop_runtime/examples/hashtags.py``):

* **maximal throughput**: an unpaced bounded input of ``--records`` tweets, records/s from
  start to the end of stream at the sink;
* **latency**: the same topology paced at ``--rate`` tweets/s for ``--seconds``; each
  window task's lag (now minus when the source made the round it processes), sampled
  every 0.25 s after a warm-up, as p50 and p99 over both window operators.

Fig. 18's *tuple-based* side cannot be switched on here: the runtime always processes in
order-preserving mini-batches (they make a replay identical to the original, which
exactly-once rests on). What can be varied is the batch interval (100 ms, the seed's
setting, against 20 ms) and the output buffers (every task keeping an upstream backup
against none): the two costs the seed's figure adds together.

Prints a markdown section to stdout (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/runtime-overheads.md``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.spec import StreamTopologySpec, expand
from backstop_runtime.examples.tweets import write_files
from backstop_testkit.support.docsection import emit
from backstop_testkit.support.runtime_harness import LocalTopology

HEADING = "## Runtime overheads (Appendix C)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "runtime-overheads.md"
COMMAND = "python bench/bench_runtime_overheads.py --out"
WINDOWS = ("win1", "win2")
WARM_UP = 5.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_tweets(folder: Path, records: int) -> None:
    """``records`` tweets, 1,000 per second of event time, in one file (one source task)."""
    args = argparse.Namespace(
        out=str(folder), partitions=1, rate=1000.0, seconds=records / 1000.0, start=0.0,
        follow=False,
    )  # fmt: skip
    write_files(args, random.Random(17))


def fig17_spec(inp: Path, parallelism: int, rate: float) -> StreamTopologySpec:
    """Fig. 17: one source task, then a parser and two sliding windows of ``parallelism``
    (and the sink the runtime needs at the end, writing into ``inp``'s sibling ``out``)."""

    def op(name: str, fn: str, inputs: list[dict[str, str]], **config: Any) -> dict[str, Any]:
        return {
            "name": name,
            "parallelism": parallelism,
            "reprocessingLatency": 1.0,
            "resources": {"cpu": "100m", "memory": "128Mi"},
            "inputs": inputs,
            "config": {"function": f"backstop_runtime.examples.hashtags:{fn}", **config},
        }

    source = {
        "name": "source",
        "parallelism": 1,
        "reprocessingLatency": 1.0,
        "resources": {"cpu": "100m", "memory": "128Mi"},
        "config": {
            "function": "backstop_runtime.sources:JsonlSource",
            "path": str(inp),
            "bounded": True,
            "maxRecordsPerSecond": rate,
            "maxRecordsPerBatch": 1000,
        },
    }
    parser = op("parser", "Parser", [{"operator": "source", "grouping": "rebalance"}])
    keyed = [{"operator": "parser", "grouping": "key"}]
    win1 = op("win1", "SlidingCount", keyed, windowSeconds=10, slideSeconds=2)
    win2 = op("win2", "SlidingCount", keyed, windowSeconds=30, slideSeconds=5)
    sink = {
        **op("sink", "", [{"operator": w, "grouping": "global"} for w in WINDOWS]),
        "parallelism": 1,
        "config": {"function": "backstop_runtime.api:Sink", "path": str(inp.parent / "out")},
    }
    return StreamTopologySpec.model_validate(
        {
            "image": "backstop/runtime:0.2.0",
            "recoveryLatencyBound": 60.0,
            "operators": [source, parser, win1, win2, sink],
        }
    )


def run(
    base: Path, spec: StreamTopologySpec, env: dict[str, str], backups: bool, until: float
) -> tuple[float, LocalTopology]:
    """Start the topology, wait for the sink's end of stream; seconds taken."""
    store = Path(tempfile.mkdtemp(dir=base))
    keep = [t for t in expand(spec).tasks if not t.startswith(WINDOWS)] if backups else []
    topo = LocalTopology("ov", spec, store, backups=keep)
    t0 = time.monotonic()
    for task in topo.tasks:
        topo.start(task, **env)
    try:
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, until)
        return time.monotonic() - t0, topo
    finally:
        topo.stop_all()


def lags(topo: LocalTopology) -> list[float]:
    """Every window task's lag samples after the warm-up."""
    out: list[float] = []
    for task in topo.tasks:
        if task.startswith(WINDOWS):
            out += [r["lag_seconds"] for r in topo.metrics(task)[int(WARM_UP / 0.25) :]]
    return out


def settings(checkpoint: float, batch: float) -> dict[str, str]:
    return {
        "BACKSTOP_CHECKPOINT_INTERVAL": str(checkpoint),
        "BACKSTOP_BATCH_INTERVAL": str(batch),
        "BACKSTOP_METRICS_INTERVAL": "0.25",
    }


def measure(args: argparse.Namespace, base: Path, ckpt: float, batch: float, backups: bool) -> Any:
    """(records/s unpaced, the median of ``--runs``; p50 and p99 lag paced, one run) for
    one configuration."""
    env = settings(ckpt, batch)
    unpaced = fig17_spec(base / "in", args.parallelism, 0.0)
    tput = statistics.median(
        args.records / run(base, unpaced, env, backups, 900)[0] for _ in range(args.runs)
    )
    paced = fig17_spec(base / "paced", args.parallelism, args.rate)
    _, topo = run(base, paced, env, backups, args.seconds * 4 + 60)
    samples = sorted(lags(topo))
    p50 = statistics.median(samples) if samples else float("nan")
    p99 = samples[min(len(samples) - 1, int(0.99 * len(samples)))] if samples else float("nan")
    what = f"checkpoint {ckpt:g}s batch {batch * 1000:g}ms backups {backups}"
    log(f"{what}: {tput:,.0f} rec/s, lag p50 {p50:.3f}s p99 {p99:.3f}s ({len(samples)} samples)")
    return tput, p50, p99


def report(args: argparse.Namespace, ckpt_rows: list[Any], buf_rows: list[Any]) -> str:
    lines = [
        HEADING,
        "",
        f"Fig. 17's topology (1 source task, parser, win1 10 s/2 s and win2 30 s/5 s sliding "
        f"windows, {args.parallelism} tasks each) as local processes, directory store. "
        f"Throughput: {args.records:,} tweets unpaced; latency: {args.rate:g} tweets/s for "
        f"{args.seconds:g} s, the window tasks' lag sampled every 0.25 s after {WARM_UP:g} s. "
        f"Throughput: the median of {args.runs} runs per cell; latency: one run per cell; "
        "the cells in the order of the rows.",
        "",
        "### Figs. 19 and 20: against the checkpoint interval (batch 100 ms, no backups)",
        "",
        "| checkpoint interval | max throughput (tweets/s) | lag p50 | lag p99 |",
        "|---|---|---|---|",
    ]
    for ckpt, (tput, p50, p99) in ckpt_rows:
        lines.append(f"| {ckpt:g} s | {tput:,.0f} | {p50:.3f} s | {p99:.3f} s |")
    lines += [
        "",
        "### Fig. 18: order-preserving batches and output buffers (checkpoint 20 s)",
        "",
        "The seed's *tuple-based* side cannot be switched on here: the runtime always "
        "processes in order-preserving mini-batches, which make a replay identical to the "
        "original (exactly-once rests on it). What varies is what the seed's figure adds "
        "together: the batch interval (100 ms, the seed's, against 20 ms) and the output "
        "buffers (every task but the windows keeping an upstream backup, against none).",
        "",
        "| batch interval | output buffers | max throughput (tweets/s) | lag p50 | lag p99 |",
        "|---|---|---|---|---|",
    ]
    for (batch, backups), (tput, p50, p99) in buf_rows:
        kept = "every task keeps its output" if backups else "none"
        lines.append(f"| {batch * 1000:g} ms | {kept} | {tput:,.0f} | {p50:.3f} s | {p99:.3f} s |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rate", type=float, default=10_000.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="unpaced runs per cell (median)")
    ap.add_argument("--intervals", default="1,2,5,10,20", help="checkpoint intervals (s)")
    ap.add_argument("--out", action="store_true", help=f"write {PAGE.name}")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the tasks on the way out
    base = Path(tempfile.mkdtemp(prefix="bench-overheads-"))
    try:
        write_tweets(base / "in", args.records)
        write_tweets(base / "paced", int(args.rate * args.seconds))
        ckpt_rows = [
            (c, measure(args, base, c, 0.1, False))
            for c in (float(x) for x in args.intervals.split(","))
        ]
        buf_rows = [
            ((b, k), measure(args, base, 20.0, b, k)) for b in (0.1, 0.02) for k in (False, True)
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out = PAGE if args.out else None
    return emit(report(args, ckpt_rows, buf_rows), out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    sys.exit(main())
