"""Run the word count on Backstop's local mode and on Apache Flink, side by side.

Why: a number for the data path means little alone; beside an established stream processor
doing the same job on the same machine and input, it says where Backstop stands. In one
invocation, on the same generated input (three JSONL files, one twice the size of the two
others, so that the split of work matters), interleaved run by run:

- **Backstop**: ``backstop run`` on the word count of ``examples/wordcount.yaml``, its
  sources reading the input directory (``bounded: true``, ``splits: ranges``), its sink
  writing to a directory, its state in a directory store; every task a local process.
  Twice: as the example has it (at most 4,000 records per source round, the runtime's
  default), and with ``maxRecordsPerBatch: 1000`` on its sources (each round a smaller
  unit of replay; the rounds' fixed costs spread over fewer records).
- **Flink**: the same count as one SQL job (``bench/flinkjob.py``) in PyFlink's local
  MiniCluster: a filesystem JSON source, ``\\p{L}+`` words of the lowercased text, a
  10-second ``TUMBLE`` on event time, parallelism 2, a checkpoint every 2 s (to files), a
  filesystem sink. PyFlink (``apache-flink``, pinned below) lives in its own virtual environment,
  ``$BACKSTOP_CACHE/flink-venv`` (default ``~/.cache/backstop``), which this bench
  creates on first use; Java 17 on the ``PATH``.

Both outputs are checked against a count made here from the input
(:func:`backstop_testkit.support.runtime_data.expected_counts`); a mismatch ends the bench
with an error. Per system and size: wall time from the command's start to its exit (the
output complete; Flink's includes the JVM's start and the job's submission, and Flink's
own job run time is given beside it), CPU seconds of the whole process tree
(:mod:`bench.proctree`), also less the CPU of a 3-record run (the start-up), and the
peak resident memory of the tree and of its largest process, sampled every 0.2 s.
Generating the input and the reference is not timed.

Prints a markdown section to stdout (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/wordcount-flink.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.spec import expand, load_topology
from backstop_testkit.support.docsection import emit
from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    counts_of,
    expected_counts,
    local_manifest,
    output_lines,
    sink_paths,
    write_segments,
)
from bench.procstat import loadavg
from bench.proctree import Measured, become_subreaper, measure

HEADING = "## Word count: Backstop beside Apache Flink"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "wordcount-flink.md"
COMMAND = "python bench/bench_wordcount_flink.py --out"
FLINK_VERSION = "2.3.0"
"""The ``apache-flink`` release the bench installs into its own environment."""
FLINK_JOB = Path(__file__).resolve().parent / "flinkjob.py"
SIZES = (200_000, 1_000_000, 5_000_000)
SHARES = (2, 1, 1)
"""Records per input file, relative: one file twice the size of the others."""
SMALL_BATCH = 1000
"""The sources' ``maxRecordsPerBatch`` of the second Backstop variant."""
SYSTEMS = ("Backstop", f"Backstop, {SMALL_BATCH:,}/round", "Flink")
STARTUP = 3
"""Records of the start-up run (one a file), whose CPU the other runs are compared to."""
Counts = dict[tuple[int, str], int]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def split_sizes(records: int, shares: tuple[int, ...] = SHARES) -> list[int]:
    """Records per file, in proportion to ``shares``, summing to ``records``.

    >>> split_sizes(1_000_000), split_sizes(3), split_sizes(7)
    ([500000, 250000, 250000], [2, 1, 0], [4, 2, 1])
    """
    sizes = [records * s // sum(shares) for s in shares]
    for i in range(records - sum(sizes)):
        sizes[i % len(sizes)] += 1
    return sizes


def flink_python(venv: Path) -> Path:
    """The interpreter of ``venv`` with ``apache-flink`` at :data:`FLINK_VERSION`,
    creating the environment or installing the package first when it is not there."""
    py = venv / "bin" / "python"
    probe = "import importlib.metadata as m; print(m.version('apache-flink'))"
    if py.exists():
        got = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=False)
        if got.stdout.strip() == FLINK_VERSION:
            return py
    log(f"installing apache-flink=={FLINK_VERSION} into {venv} (once; about 850 MB)…")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"apache-flink=={FLINK_VERSION}"], check=True)
    return py


def mismatch(expected: Counts, got: Counts) -> str | None:
    """What differs between two counts, in one line; None when they are equal.

    >>> mismatch({(0, "a"): 2, (0, "b"): 1}, {(0, "a"): 3, (10, "c"): 1})
    "1 missing (e.g. (0, 'b')), 1 extra (e.g. (10, 'c')), 1 wrong (e.g. (0, 'a'): 3 not 2)"
    """
    if got == expected:
        return None
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(k for k in expected.keys() & got.keys() if expected[k] != got[k])
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} extra (e.g. {extra[0]})")
    if wrong:
        k = wrong[0]
        parts.append(f"{len(wrong)} wrong (e.g. {k}: {got[k]} not {expected[k]})")
    return ", ".join(parts)


def exact(lines: list[tuple[int, str, int]], system: str) -> Counts:
    """``{(window, word): count}`` of output lines, refusing a (window, word) twice."""
    counts = {(w, word): n for w, word, n in lines}
    if len(counts) != len(lines):
        raise SystemExit(f"{system}: {len(lines) - len(counts)} duplicate output lines")
    return counts


def flink_counts(out: Path) -> Counts:
    """The Flink job's committed output (files not starting with a dot) as counts."""
    rows = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            for line in path.read_text().splitlines():
                d = json.loads(line)
                start = datetime.fromisoformat(d["window_start"].replace("Z", "+00:00"))
                rows.append((int(start.timestamp()), d["word"], int(d["cnt"])))
    return exact(rows, "Flink")


@dataclass
class Run:
    """One system's run on one input: the measurement and Flink's own job time (s)."""

    system: str
    records: int
    m: Measured
    job: float | None = None


def failed(system: str, m: Measured, err: Path) -> SystemExit:
    tail = err.read_text(errors="replace")[-3000:]
    return SystemExit(f"{system} exited with {m.code}; its stderr ends:\n{tail}")


def run_backstop(
    work: Path, inp: Path, batch: int | None = None
) -> tuple[Measured, Counts, float | None]:
    """``backstop run`` on the word count manifest over ``inp``, its output counted; with
    ``batch``, its sources' ``maxRecordsPerBatch`` set to it."""
    doc = local_manifest(WORDCOUNT, inp, work / "out")
    if batch is not None:
        for op in doc["spec"]["operators"]:
            if not op.get("inputs"):
                op["config"]["maxRecordsPerBatch"] = batch
    path = work / "wordcount.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    cmd = [sys.executable, "-m", "backstop", "run", str(path), "--quiet"]
    m = measure([*cmd, "--store", str(work / "store")], os.environ, work / "stderr.log")
    if m.code:
        raise failed("Backstop", m, work / "stderr.log")
    lines = [line for sink in sink_paths(doc) for line in output_lines(sink)]
    counts = counts_of(lines)
    if len(counts) != len(lines):
        raise SystemExit(f"Backstop: {len(lines) - len(counts)} duplicate output lines")
    return m, counts, None


def run_flink(work: Path, inp: Path, py: Path, span: float) -> tuple[Measured, Counts, float]:
    """The Flink SQL job over ``inp``, its output counted and its own run time (s)."""
    out = work / "out"
    ckpt = work / "checkpoints"
    cmd = [str(py), str(FLINK_JOB), str(inp), str(out), f"{span:.0f}", str(ckpt)]
    m = measure(cmd, os.environ, work / "stderr.log")
    if m.code:
        raise failed("Flink", m, work / "stderr.log")
    job = json.loads(m.stdout.strip().splitlines()[-1])["netRuntimeMs"] / 1000
    return m, flink_counts(out), job


@dataclass
class Input:
    """One generated input: its directory, records, event-time span and reference."""

    path: Path
    records: int
    span: float
    expected: Counts


def make_input(work: Path, records: int, sizes: list[int] | None = None) -> Input:
    """``records`` written under ``work`` in files of ``sizes`` (default: 2:1:1)."""
    sizes = split_sizes(records) if sizes is None else sizes
    path = work / f"in-{records}"
    log(f"input: {records:,} records in files of {sizes}; reference count…")
    span = write_segments(path, sizes)
    return Input(path, records, span, dict(expected_counts(path)))


def one_run(system: str, inp: Input, work: Path, py: Path) -> Run:
    """One run of ``system`` on ``inp`` in a fresh directory, checked against the
    reference; a mismatch ends the bench."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if system == SYSTEMS[0]:
        m, counts, job = run_backstop(work, inp.path)
    elif system == SYSTEMS[1]:
        m, counts, job = run_backstop(work, inp.path, SMALL_BATCH)
    else:
        m, counts, job = run_flink(work, inp.path, py, inp.span)
    if (diff := mismatch(inp.expected, counts)) is not None:
        raise SystemExit(f"{system} on {inp.records:,} records: output is wrong: {diff}")
    run = Run(system, inp.records, m, job)
    shutil.rmtree(work, ignore_errors=True)
    log(
        f"  {system:20} {inp.records:>9,}: {m.wall:6.1f} s wall"
        + (f" (job {job:.1f} s)" if job is not None else "")
        + f", CPU {m.cpu:6.1f} s, peak RSS {m.peak_sum / 2**20:,.0f} MiB"
        + f" (largest {m.peak_one / 2**20:,.0f}), {len(counts):,} counts exact"
    )
    return run


def java_version() -> str:
    got = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return (got.stderr.splitlines() or ["java: unknown"])[0]


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def row(runs: list[Run], base: Run) -> str:
    """One table row: the median of each figure over ``runs`` (one system, one size)."""
    med = statistics.median
    n = runs[0].records
    wall, cpu = med(r.m.wall for r in runs), med(r.m.cpu for r in runs)
    jobs = [r.job for r in runs if r.job is not None]
    job = f"{med(jobs):.1f} ({n / med(jobs):,.0f}/s)" if jobs else "–"
    after = (cpu - base.m.cpu) / n * 1e6
    return (
        f"| {n:,} | {runs[0].system} | {len(runs)} | {wall:.1f} | {n / wall:,.0f} | {job} "
        f"| {cpu:.1f} | {cpu / n * 1e6:.1f} | {after:.1f} "
        f"| {mib(med(r.m.peak_sum for r in runs))} | {mib(med(r.m.peak_one for r in runs))} |"
    )


def report(results: dict[tuple[str, int], list[Run]], base: dict[str, Run], load: str) -> str:
    """The page's section: the set-up, then one row per size and system."""
    tasks = len(expand(load_topology(WORDCOUNT).spec).tasks)
    lines = [
        HEADING,
        "",
        f"The same input for both, per size: three JSONL files of 2:1:1 records, "
        f"`{{id, ts, text}}`. Backstop: `backstop run` on "
        f"[`examples/wordcount.yaml`](../../examples/wordcount.yaml) ({tasks} tasks, each a "
        "local process; sources `bounded: true`, `splits: ranges`; state and output in "
        f"directories). Flink: apache-flink {FLINK_VERSION} (PyFlink's local MiniCluster, "
        f"one JVM, {java_version()}), one SQL job "
        "([`bench/flinkjob.py`](../../bench/flinkjob.py)), parallelism 2, a checkpoint "
        "every 2 s to files, output to files. Every output equals the reference count of "
        "every run.",
        "",
        "Event time: Backstop's source holds its watermark at the least of its files' newest "
        "event times; Flink's file source reads one file after another per reader and a "
        "reader's watermark never goes back, so Flink's watermark is held back by the "
        "input's whole event-time span (else a file read after a later one is late and "
        "dropped): its windows all close at the end of the input, Backstop's as it goes. "
        "`backstop run` looks for the end of the stream every 0.25 s, so its wall time "
        "holds up to 0.25 s of that wait.",
        "",
        "Wall: the command's start to its exit, output complete (Flink's includes the JVM's "
        "start and the job's submission; *job*: Flink's own run time of the job). CPU: user + "
        "system seconds of the whole process tree; *after start-up*: less the CPU of the "
        f"{STARTUP}-record run. RSS: peak over samples every 0.2 s, summed over the tree "
        f"and of its largest process. Medians over the runs; load average before the runs: {load}.",
        "",
        "| records | system | runs | wall s | records/s | job s (records/s) | CPU s "
        "| CPU µs/record | after start-up µs/record | peak RSS MiB (tree) | largest process MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in SYSTEMS:
        b = base[system]
        job = f"{b.job:.1f}" if b.job is not None else "–"
        lines.append(
            f"| {STARTUP} (start-up) | {system} | 1 | {b.m.wall:.1f} | – | {job} | {b.m.cpu:.1f} "
            f"| – | – | {mib(b.m.peak_sum)} | {mib(b.m.peak_one)} |"
        )
    for (system, _), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(row(runs, base[system]))
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="records, comma-separated")
    p.add_argument("--runs", type=int, default=1, help="runs per system and size")
    p.add_argument("--work", type=Path, help="where inputs and outputs go (default: a temp dir)")
    p.add_argument(
        "--out", type=Path, nargs="?", const=PAGE, help="write its page (no path: its own)"
    )
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    py = flink_python(
        Path(os.environ.get("BACKSTOP_CACHE") or Path.home() / ".cache" / "backstop") / "flink-venv"
    )
    become_subreaper()
    load = loadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-wcflink-", dir=args.work))
    results: dict[tuple[str, int], list[Run]] = {}
    try:
        log(f"start-up: {STARTUP} records, one a file…")
        one = make_input(work, STARTUP, [1] * STARTUP)
        base = {s: one_run(s, one, work / "run", py) for s in SYSTEMS}
        for size in sizes:
            inp = make_input(work, size)
            for i in range(args.runs):
                # alternate which system goes first, so neither always follows the other
                for system in SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]:
                    run = one_run(system, inp, work / "run", py)
                    results.setdefault((system, size), []).append(run)
            shutil.rmtree(inp.path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return emit(report(results, base, load), args.out, HEADING, command=COMMAND)


if __name__ == "__main__":
    sys.exit(main())
