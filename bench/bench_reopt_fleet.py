#!/usr/bin/env python3
"""Benchmark the re-optimization job over a fleet: 100 topologies × 1M metric rows, one job.

Why: the target is a fleet's metrics (100 topologies × 1M rows = 100M rows) re-optimized
in one Spark job on 2 cores in under 5 minutes, with the time and the peak memory reported.
This script:

1. generates the fleet's metrics once into a cache directory
   (``$BACKSTOP_CACHE/bench/reopt-fleet-<N>x<rows>``): one Parquet file per topology under
   ``tasks/`` (from :mod:`backstop_testkit.sim.metricsgen`, topology *i* with seed *i*), the node
   metrics, the manifests and ``fleet.json``, written last (a cache without it is regenerated);
2. runs the job as users run it, one fresh ``python -m backstop.jobs.reoptimize --master
   local[N]`` process over the whole fleet (read, per-task and per-operator aggregation,
   then per topology re-plan, Monte Carlo and trade-off curve in Python workers with
   ``applyInPandas``, write);
3. samples the job's process tree from ``/proc`` every 0.2 s: the peak resident memory of the
   tree (driver Python + JVM + Python workers, summed at one instant) and each part's own peak
   (``VmHWM``), and the CPU seconds of each part, which is the profile: JVM (read,
   aggregation) versus Python workers (planners);
4. checks the output: one ``Recommended`` per topology, every recommended plan sound under the
   failure-effect evaluator (:func:`backstop.domain.recommend.check_recommendation`), and the
   estimates counting every generated row.

Prints a markdown section (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/reopt-fleet.md`` (``--out FILE``: that file). The 100M-row run takes minutes
and 2.6 GB of disk: run it once, on a machine you may load.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.parquet as pq
import yaml

from backstop.domain.estimates import millicores
from backstop.domain.recommend import check_recommendation
from backstop_testkit.sim.metricsgen import GeneratorParams, generate
from backstop_testkit.support.docsection import emit
from bench.bench_reoptimize import fleet
from planners.placement import Node

HEADING = "## Re-optimization over a fleet (Spark)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "reopt-fleet.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_reopt_fleet.py --out"
NODE_CPU = 4.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = 1  # /proc/<pid>/status reports kB


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the fleet's metrics
def cache_dir(base: Path, topologies: int, rows: int) -> Path:
    """Where the fleet of ``topologies`` × ``rows`` rows is cached."""
    return base / f"reopt-fleet-{topologies}x{rows}"


def generate_fleet(out: Path, topologies: int, rows: int) -> dict[str, Any]:
    """Write the fleet's metrics into ``out`` once; return ``fleet.json``'s content.

    One topology at a time, so memory stays at one topology's rows (about 1M).
    """
    marker = out / "fleet.json"
    if marker.exists():
        info: dict[str, Any] = json.loads(marker.read_text())
        log(f"using the cached fleet in {out} ({info['rows']:,} rows)")
        return info
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    topos = fleet(topologies)
    started = time.perf_counter()
    total = 0
    for i, topo in enumerate(topos):
        batches, nodes, truth = generate([topo], GeneratorParams(rows=rows, seed=i + 1))
        path = out / "tasks" / f"part-{i:04d}.parquet"
        with pq.ParquetWriter(path, batches[0].schema) as w:
            for b in batches:
                w.write_batch(b)
        if i == 0:
            pq.write_table(nodes, out / "nodes.parquet")  # one fleet, one set of nodes
        total += int(truth["rows"])
        if (i + 1) % 10 == 0:
            log(f"  generated {i + 1}/{topologies} topologies, {total:,} rows")
    docs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in topos]
    (out / "topologies.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    size = sum(p.stat().st_size for p in (out / "tasks").iterdir())
    info = {
        "topologies": topologies,
        "rows": total,
        "bytes": size,
        "seconds": round(time.perf_counter() - started, 1),
    }
    marker.write_text(json.dumps(info) + "\n")
    return info


# ------------------------------------------------------------------ /proc sampling
def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, command name, CPU seconds of the process itself) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3); ppid is field 4, utime 14, stime 15
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / CLK_TCK


def _memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB, or zeros once the process is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * PAGE_KIB
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * PAGE_KIB
    except OSError:
        pass
    return rss, hwm


def descendants(root: int) -> Iterator[int]:
    """``root`` and every process below it, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st:
                children.setdefault(st[0], []).append(int(entry))
    todo = [root]
    while todo:
        pid = todo.pop()
        yield pid
        todo += children.get(pid, [])


def kind_of(pid: int, root: int, comm: str) -> str:
    """``driver`` (the job's Python), ``workers`` (Python workers and their daemon) or ``jvm``
    (the JVM and the ``spark-submit`` shell scripts that start it)."""
    if pid == root:
        return "driver"
    return "workers" if comm.startswith("python") else "jvm"


@dataclass
class TreeSample:
    """What the sampler saw of the job's process tree."""

    peak_total_kib: int = 0
    started: float = field(default_factory=time.perf_counter)
    #: seconds after the start when the first Python worker was seen
    first_worker: float | None = None
    hwm_kib: dict[int, int] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)
    kind: dict[int, str] = field(default_factory=dict)

    def busy_workers(self, seconds: float = 1.0) -> int:
        """Python processes that used more than ``seconds`` of CPU (how many cores planned)."""
        return sum(1 for p, c in self.cpu.items() if self.kind[p] == "workers" and c > seconds)

    def by_kind(self, table: dict[int, Any]) -> dict[str, float]:
        out: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        for pid, v in table.items():
            out[self.kind[pid]] += v
        return out


def sample_tree(root: int, stop: threading.Event, into: TreeSample, every: float = 0.2) -> None:
    """Sample ``root``'s tree until ``stop`` is set (run in a thread)."""
    while not stop.is_set():
        total = 0
        for pid in descendants(root):
            st = _stat(pid)
            if st is None:
                continue
            rss, hwm = _memory_kib(pid)
            total += rss
            into.kind[pid] = kind_of(pid, root, st[1])
            if into.kind[pid] == "workers" and into.first_worker is None:
                into.first_worker = time.perf_counter() - into.started
            into.hwm_kib[pid] = max(into.hwm_kib.get(pid, 0), hwm)
            into.cpu[pid] = max(into.cpu.get(pid, 0.0), st[2])
        into.peak_total_kib = max(into.peak_total_kib, total)
        stop.wait(every)


# ------------------------------------------------------------------ the job
@dataclass
class JobRun:
    """One run of the job over the fleet."""

    label: str
    seconds: float
    sample: TreeSample
    out: Path
    load_before: str
    load_after: str


def run_job(
    metrics: Path, out: Path, args: argparse.Namespace, label: str, tree: Path | None = None
) -> JobRun:
    """Run the job in a fresh process while sampling its process tree.

    ``tree``: a source tree (``operator/``, ``planners/``, ``runtime/``) whose code runs
    instead of the installed one, driver and Python workers alike (``PYTHONPATH`` comes
    before the editable install).
    """
    cmd = [sys.executable, "-m", "backstop.jobs.reoptimize", "--metrics", str(metrics),
           "--topologies", str(metrics / "topologies.yaml"), "--node-cpu", str(NODE_CPU),
           "--out", str(out), "--master", f"local[{args.cores}]",
           "--time-limit", str(args.time_limit), "--scenarios", str(args.scenarios),
           *[a for kv in args.conf for a in ("--conf", kv)]]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(tree / d) for d in ("operator", ".", "runtime"))
    load_before = loadavg()
    sample = TreeSample()
    stop = threading.Event()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    sampler = threading.Thread(target=sample_tree, args=(proc.pid, stop, sample), daemon=True)
    sampler.start()
    _, err = proc.communicate()
    took = time.perf_counter() - t
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"error: the job failed (exit {proc.returncode}):\n{err[-3000:]}")
    return JobRun(label, took, sample, out, load_before, loadavg())


def head() -> str:
    """This checkout's commit, short, with ``+`` when its files differ from it."""
    root = str(Path(__file__).resolve().parent.parent)
    sha = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--", "operator",
                            "planners", "runtime"], check=False).returncode  # fmt: skip
    return (sha or "?") + ("+" if dirty else "")


def baseline_tree(commit: str, into: Path) -> Path:
    """The job's code at ``commit`` (``git archive`` of this checkout), extracted into ``into``."""
    root = Path(__file__).resolve().parent.parent
    tar = subprocess.run(
        ["git", "-C", str(root), "archive", commit, "operator", "planners", "runtime"],
        capture_output=True,
        check=False,
    )
    if tar.returncode != 0:
        raise SystemExit(f"error: --baseline {commit}: {tar.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(into, filter="data")
    return into


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return ", ".join(Path("/proc/loadavg").read_text().split()[:3])


def check_output(run: JobRun, info: dict[str, Any], topologies: int) -> tuple[int, int]:
    """(recommendations sound under the evaluator, rows the estimates counted); raise if wrong."""
    recs = [json.loads(line) for line in (run.out / "recommendations.jsonl").open()]
    results = sorted({r["result"] for r in recs})
    if len(recs) != topologies or results != ["Recommended"]:
        raise SystemExit(f"error: {len(recs)} recommendations, results {results}")
    nodes = [Node(f"node-{i}", NODE_CPU) for i in range(13)]
    sound = sum(1 for r in recs if not check_recommendation(r, nodes))
    counted = sum(int(json.loads(line)["rows"]) for line in (run.out / "estimates.jsonl").open())
    if counted != info["rows"]:
        raise SystemExit(f"error: the estimates count {counted:,} rows of {info['rows']:,}")
    return sound, counted


# ------------------------------------------------------------------ report
def mib(kib: float) -> str:
    return f"{kib / 1024:,.0f}"


def compare_estimates(new: Path, old: Path) -> dict[str, Any]:
    """How this tree's estimates and recommendations differ from the baseline's.

    The CPU quantile in millicores (largest difference, and requests that differ), the
    other estimates (largest relative difference), and the recommendations whose plan
    (backups and assignment) differs.
    """

    def rows(path: Path, key: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
        out = {}
        for line in path.open():
            r = json.loads(line)
            out[tuple(r[k] for k in key)] = r
        return out

    a = rows(new / "estimates.jsonl", ("topology", "operator"))
    b = rows(old / "estimates.jsonl", ("topology", "operator"))
    if set(a) != set(b):
        raise SystemExit("error: the two runs estimated different operators")
    cpu_diff = [abs(a[k]["cpu_quantile"] - b[k]["cpu_quantile"]) * 1000 for k in a]
    requests = sum(
        1 for k in a if millicores(a[k]["cpu_quantile"]) != millicores(b[k]["cpu_quantile"])
    )
    rel = 0.0
    for k in a:
        for col, v in a[k].items():
            if col in ("topology", "operator", "cpu_quantile") or not isinstance(v, float):
                continue
            w = b[k][col]
            rel = max(rel, abs(v - w) / max(abs(v), abs(w), 1e-300))
    ra = rows(new / "recommendations.jsonl", ("topology",))
    rb = rows(old / "recommendations.jsonl", ("topology",))

    def plan(r: dict[str, Any]) -> Any:
        return (r["plan"]["backups"], r["plan"]["assignment"])

    same = sum(1 for k in ra if plan(ra[k]) == plan(rb[k]))
    return {
        "operators": len(a),
        "cpu_max_millicores": max(cpu_diff),
        "requests_differ": requests,
        "other_max_rel": rel,
        "plans_same": same,
        "topologies": len(ra),
    }


def table_row(run: JobRun, rows: int) -> str:
    hwm = run.sample.by_kind({k: float(v) for k, v in run.sample.hwm_kib.items()})
    cpu = run.sample.by_kind(run.sample.cpu)
    split = run.sample.first_worker
    return (
        f"| {run.label} | {run.load_before} → {run.load_after} | {run.seconds:.1f} | "
        f"{'—' if split is None else f'{split:.1f}'} | {rows / run.seconds / 1e3:,.0f} k | "
        f"{cpu['jvm']:.0f} / {cpu['workers']:.0f} / {cpu['driver']:.0f} | "
        f"{run.sample.busy_workers()} | {mib(run.sample.peak_total_kib)} | {mib(hwm['jvm'])} | "
        f"{mib(hwm['driver'])} | {mib(hwm['workers'])} |"
    )


def section(args: argparse.Namespace, info: dict[str, Any], runs: list[JobRun],
            sound: int, diff: dict[str, Any] | None) -> str:  # fmt: skip
    rows = int(info["rows"])
    baseline = f" --baseline {args.baseline}" if args.baseline else ""
    lines = [
        HEADING,
        "",
        f"`python bench/bench_reopt_fleet.py --topologies {args.topologies} --rows "
        f"{args.rows} --cores {args.cores} --time-limit {args.time_limit:g} --scenarios "
        f"{args.scenarios}{baseline}` on {os.cpu_count()} cores (shared with other work: the "
        f"load average is in the table): {args.topologies} copies of "
        "`examples/twitter-sentiment.yaml` (13 tasks each), "
        f"{rows // args.topologies:,} task-metric rows per topology ({rows:,} in all; "
        f"{info['bytes'] / 2**30:.1f} GiB of Parquet in {args.topologies} files, generated "
        f"once in {info['seconds']:.0f} s and cached). One fresh `python -m "
        f"backstop.jobs.reoptimize --master local[{args.cores}]` process over the whole fleet: "
        "read, per-task and per-operator aggregation, then per topology the re-plan, Monte "
        f"Carlo ({args.scenarios} windows × 2 plans) and the trade-off curve (6 bounds) in "
        "Python workers (`applyInPandas`), write. Spark's defaults otherwise (driver heap 1 "
        "GiB). *First Python worker*: seconds from the start until a Python worker process "
        "was first seen (not the end of the aggregation: the JVM's CPU keeps growing after "
        "it). Memory: the process "
        "tree's resident memory sampled every 0.2 s from `/proc` (peak of the sum), and each "
        "part's own peak (`VmHWM`). CPU: each part's own seconds from `/proc/<pid>/stat` at its "
        "last sample (a process living under 0.2 s is missed); *workers busy*: Python workers "
        "that used over 1 CPU s. "
        + (
            f"`--baseline {args.baseline}` runs the job's code at that commit on the same data "
            "in the same invocation, for the ratio."
            if args.baseline
            else ""
        ),
        "",
        "| code | load before → after | wall (s) | first Python worker (s) | rows/s | CPU s: JVM / "
        "workers / driver | workers busy | peak RSS, tree (MiB) | JVM peak | driver Python "
        "peak | Python workers peak (sum) |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        *[table_row(r, rows) for r in runs],
    ]
    lines += _verdict_lines(args, runs, sound, diff)
    lines.append("")
    return "\n".join(lines)


def _verdict_lines(
    args: argparse.Namespace, runs: list[JobRun], sound: int, diff: dict[str, Any] | None
) -> list[str]:
    """The target's verdict and, with a baseline, the ratios and the results' agreement."""
    mine = [r for r in runs if not r.label.startswith("baseline")]
    best = min(mine, key=lambda r: r.seconds)
    verdict = "meets" if best.seconds < 300 else "misses"
    cpu_all = sum(best.sample.cpu.values())
    lines = [
        "",
        f"Target: < 5 min for the fleet on 2 cores: **{verdict}** ({best.seconds:.0f} s wall). "
        f"The job's processes used {cpu_all:.0f} CPU seconds, {cpu_all / args.cores:.0f} s of "
        f"{args.cores} cores, so it had {cpu_all / (best.seconds * args.cores):.0%} of them. "
        f"The output was checked: {args.topologies} `Recommended` recommendations, {sound} of "
        "them sound under the failure-effect evaluator, and the estimates count every "
        "generated row.",
    ]
    base = [r for r in runs if r.label.startswith("baseline")]
    if base:
        b = base[0]
        cpu_b = sum(b.sample.cpu.values())
        lines.append("")
        lines.append(
            f"Against the baseline in the same invocation: wall {b.seconds / best.seconds:.1f}× "
            f"shorter, CPU {cpu_b / cpu_all:.1f}× less ({cpu_b:.0f} → {cpu_all:.0f} s)."
        )
    if diff:
        lines.append(
            f"Same results: of {diff['operators']} operator estimates, the CPU quantile differs "
            f"from the baseline's `percentile_approx` by at most "
            f"{diff['cpu_max_millicores']:.3f} millicores and the CPU request it becomes in "
            f"{diff['requests_differ']}; every other estimate within a relative "
            f"{diff['other_max_rel']:.1e} (sums added in another order); the recommended plan "
            f"(backups and assignment) is the same for {diff['plans_same']} of "
            f"{diff['topologies']} topologies."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--topologies", type=int, default=100, help="topologies in the fleet")
    p.add_argument("--rows", type=int, default=1_000_000, help="task-metric rows per topology")
    p.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    p.add_argument("--time-limit", type=float, default=0.5, help="planner seconds per plan")
    p.add_argument("--scenarios", type=int, default=2000, help="Monte Carlo windows per plan")
    p.add_argument("--runs", type=int, default=1, help="job runs over the same data")
    p.add_argument("--conf", action="append", default=[], help="extra Spark setting k=v")
    p.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("BACKSTOP_CACHE", Path.home() / ".cache/backstop")) / "bench",
        help="where the generated fleet is kept ($BACKSTOP_CACHE/bench)",
    )
    p.add_argument("--generate-only", action="store_true", help="generate the fleet and stop")
    p.add_argument(
        "--baseline",
        metavar="COMMIT",
        help="also run the job's code at this commit (git archive) once, for the ratio",
    )
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    if min(args.topologies, args.rows, args.cores, args.runs) < 1:
        p.error("--topologies, --rows, --cores and --runs must be positive")
    metrics = cache_dir(args.cache, args.topologies, args.rows)
    log(f"fleet: {args.topologies} topologies × {args.rows:,} rows in {metrics}")
    info = generate_fleet(metrics, args.topologies, args.rows)
    if args.generate_only:
        return 0
    runs = []
    diff = None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            log(f"run {i + 1}/{args.runs} (load {loadavg()})…")
            run = run_job(metrics, Path(tmp) / f"run-{i}", args, f"this tree ({head()})")
            log(f"  {run.seconds:.1f}s, peak RSS {mib(run.sample.peak_total_kib)} MiB")
            sound, _ = check_output(run, info, args.topologies)
            runs.append(run)
        if args.baseline:
            tree = baseline_tree(args.baseline, Path(tmp) / "baseline-tree")
            log(f"baseline {args.baseline} (load {loadavg()})…")
            run = run_job(metrics, Path(tmp) / "baseline", args, f"baseline {args.baseline}", tree)
            log(f"  {run.seconds:.1f}s, peak RSS {mib(run.sample.peak_total_kib)} MiB")
            check_output(run, info, args.topologies)
            runs.append(run)
            diff = compare_estimates(runs[0].out, run.out)
        text = section(args, info, runs, sound, diff)
    return emit(text, args.out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
