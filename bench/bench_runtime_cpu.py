#!/usr/bin/env python3
"""Measure the word count's CPU per input record on local processes, directory store.

Runs ``examples/wordcount.yaml`` (source -> tokenize -> count -> sink, the manifest's
parallelism) over a generated input of ``--records`` lines until the sink sees the end of
the stream, and prints the records per second end to end, the CPU seconds (user and
system) of all task processes together per input record, each task's CPU seconds, and a
digest of the sorted output lines (equal digests: equal output).
``--profile TASK`` starts that task under ``python -m cProfile`` and prints its top
functions (its main thread's: a source reads its input on its writer thread).

Usage: ``python bench/bench_runtime_cpu.py --records 1000000 [--keep DIR] [--check]
[--runtime OTHER/runtime]`` (``--runtime``: the tasks run another checkout's runtime, such
as a ``git worktree`` of an older commit, on the same input and manifest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.support.runtime_data import (
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(
    work: Path, records: int, check: bool, profile: str | None, runtime: Path | None = None
) -> dict[str, object]:
    inp = work / "in"
    if not inp.exists():
        write_input(inp, 2, records // 2)
    spec = wordcount_spec(inp, work / "out", rate=0.0, batch=1000)
    topo = LocalTopology("cpu", spec, work / "store")
    if runtime is not None:  # another checkout's runtime package (a before/after comparison)
        for env in topo.env.values():
            env["PYTHONPATH"] = str(runtime)
    cpu0, t0 = children_cpu(), time.monotonic()
    for task in topo.tasks:
        if task == profile:
            _start_profiled(topo, task, work / f"{task}.prof")
        else:
            topo.start(task)
    try:
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, 3600)
        seconds = time.monotonic() - t0
        per_task = {t: round(_cpu_of(p.pid), 2) for t, p in topo.procs.items()}
    finally:
        topo.stop_all()
    cpu = children_cpu() - cpu0
    lines = output_lines(work / "out")
    if check:
        got = {(d["window"], d["word"]): d["count"] for d in map(json.loads, lines)}
        assert got == dict(expected_counts(inp)), "the counts differ from the input's"
    return {
        "records_per_s": round(records / seconds),
        "cpu_us_per_record": round(cpu / records * 1e6, 2),
        "cpu_seconds_by_task": per_task,
        "output_lines": len(lines),
        "output_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
    }


def _cpu_of(pid: int) -> float:
    """User plus system CPU seconds of a running process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_profiled(topo: LocalTopology, task: str, out: Path) -> None:
    import subprocess

    log = (topo.store / "logs" / f"{task}.log").open("ab")
    cmd = [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "backstop_runtime"]
    topo.procs[task] = subprocess.Popen(cmd, env=topo.env[task], stdout=log, stderr=log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="work folder (kept; its input is reused)")
    parser.add_argument("--check", action="store_true", help="compare with the input's counts")
    parser.add_argument("--profile", help="a task to run under cProfile (e.g. tokenize-0)")
    parser.add_argument(
        "--runtime", type=Path, help="the runtime/ folder of another checkout to run instead"
    )
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    for old in ("out", "store"):
        if (work / old).exists():
            import shutil

            shutil.rmtree(work / old)
    result = run(work, args.records, args.check, args.profile, args.runtime)
    print(json.dumps({"records": args.records, **result}))
    if args.profile:
        import pstats

        pstats.Stats(str(work / f"{args.profile}.prof")).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
