"""Benchmark ``backstop backups`` with its default budget on 10,000-task topologies.

Why: a user waits at a terminal for this command, and its default budget (10 s) is a
budget, not a target; at the CRD's scale (100 operators of 100 tasks) the answer should
come in under 5 s. The greedy plan meets the lower bound on uniform layers (bench_cli's
four shuffles), so this bench also times held-out topologies where it does not: 100
operators of 100 tasks with latencies drawn per operator from 0.3, 0.5, 0.8 and 1.1 s,
most reading the previous operator, some an earlier one, some a second input, four of
them by shuffle (seeded; ``tests/unit/test_backups_branching.py`` builds the same graph).

Each manifest is planned in a fresh process (``python -m backstop backups M --json``),
so import and expansion are counted as a user sees them. With ``--baseline PYTHON``
(another checkout's venv, e.g. main's), both trees run alternately in the same
invocation. Markdown goes to stdout and, with ``--out``, to
``docs/benchmarks/backups-10k.md``.

    .venv/bin/python bench/bench_backups_10k.py --baseline /work/main/.venv/bin/python --out
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from backstop_testkit.support.docsection import emit
from bench.bench_cli import _operator, four_shuffles, manifest

OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "backups-10k.md"
HEADING = "## `backstop backups` on 10,000 tasks"
COMMAND = "python bench/bench_backups_10k.py --out"
HELD_OUT = ((6, 4.1), (7, 3.3), (8, 5.0))
"""(seed, recovery-latency bound in seconds) of the held-out branching topologies."""


def held_out(seed: int, bound: float, n_ops: int = 100, width: int = 100) -> dict[str, Any]:
    """The seeded branching topology as a StreamTopology manifest."""
    rng = random.Random(seed)
    shuffles = set(rng.sample(range(2, n_ops), 4))
    ops = []
    for i in range(n_ops):
        inputs: list[tuple[str, str]] = []
        if i:
            src = i - 1 if rng.random() < 0.7 else rng.randrange(max(0, i - 6), i)
            inputs.append((f"op{src}", "shuffle" if i in shuffles else "forward"))
            if rng.random() < 0.3 and i > 2:
                inputs.append((f"op{rng.randrange(max(0, i - 8), i - 1)}", "forward"))
        op = _operator(f"op{i}", width, inputs)
        op["reprocessingLatency"] = rng.choice([0.3, 0.5, 0.8, 1.1])
        ops.append(op)
    doc = manifest(f"held-out-{seed}", ops)
    doc["spec"]["recoveryLatencyBound"] = bound
    return doc


def run(python: str, path: Path) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one ``backstop backups --json`` and its answer.

    Run from the manifest's directory: from a checkout, ``python -m`` would import that
    checkout's ``planners`` instead of the interpreter's own tree's.
    """
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-m", "backstop", "backups", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=path.parent,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{python}: backstop backups {path} failed:\n{proc.stderr}")
    return elapsed, json.loads(proc.stdout)


def _cell(times: list[float], out: dict[str, Any]) -> str:
    return (
        f"{statistics.median(times):.2f} s: {len(out['backups'])} backups, "
        f"`{out['algorithm']}`, optimal {str(out['optimal']).lower()}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="python of another checkout to time alongside")
    ap.add_argument("--reps", type=int, default=1, help="runs per tree and topology")
    ap.add_argument("--out", action="store_true", help=f"write {OUT.name}")
    args = ap.parse_args(argv)
    trees = {"this tree": sys.executable}
    if args.baseline:
        trees = {"baseline": args.baseline, **trees}
    cases = [("100 × 100, four shuffles (bench_cli), R 10 s", four_shuffles())]
    cases += [(f"held-out {s}, R {b:g} s", held_out(s, b)) for s, b in HELD_OUT]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, doc in cases:
            path = Path(tmp) / "m.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            cells = []
            for tree, python in trees.items():
                runs = [run(python, path) for _ in range(args.reps)]
                cells.append(_cell([t for t, _ in runs], runs[-1][1]))
                print(f"{name} / {tree}: {cells[-1]}", file=sys.stderr)
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
    lines = [
        HEADING,
        "",
        f"Wall time of one fresh process, median of {args.reps} run(s), default budget (10 s).",
        "Target: under 5 s. With `--baseline PYTHON`, that tree is timed alongside this one.",
        "",
        "| topology | " + " | ".join(trees) + " |",
        "|---|" + "---|" * len(trees),
        *rows,
    ]
    section = "\n".join(lines) + "\n"
    return emit(section, OUT if args.out else None, HEADING, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
