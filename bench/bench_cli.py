"""Benchmark the CLI's start-up and the parsing of large manifests.

Why: eager imports (ortools, pandas, kubernetes) cost seconds at start-up, and a large
manifest spends most of its time in YAML parsing when PyYAML's pure-Python loader is
used. This script times, in fresh processes,

* ``backstop --help`` and ``backstop backups examples/twitter-sentiment.yaml``;
* ``backstop backups`` with its default budget on 10,000 tasks: 100 operators of 100
  tasks of 0.5 s, forward chains joined by four shuffles, under a 10 s bound (a
  backup among every 20 tasks of each chain), with the plan each tree answers;
* the three stages of reading a large generated manifest, each on its own: the YAML
  parse (the loader the tree under test uses), the pydantic validation
  (``StreamTopology.model_validate``) and the expansion into the task DAG (``expand``).

The manifests are generated here, each within the CRD's limits (at most 100 operators
of at most 1,000 tasks): 100 operators of 100 tasks (forward, every tenth a shuffle),
10 operators of 1,000 tasks in a forward chain, and the legal worst case, a
2 × 1,000 shuffle (a million edges). A 3,000-operator manifest, over the limit, is timed
for its parse only: validation refuses it (``spec.operators``: at most 100).

With ``--baseline PYTHON`` (the interpreter of another checkout's venv, e.g. main's),
every figure is taken for both trees, alternately, in the same run, so a loaded
machine slows both alike. Wall times are medians of ``--reps`` runs; the CPU time
(user + system) of the same runs is given too, since it depends far less on the other
processes of a shared machine. Progress goes to stderr, the markdown to stdout and
(with ``--out``) into its page, ``docs/benchmarks/cli.md``.

    .venv/bin/python bench/bench_cli.py --baseline /work/main/.venv/bin/python --out
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.support.docsection import write_section

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
HEADING = "## CLI start-up and manifest parsing"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "cli.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_cli.py --out"

# Runs inside the interpreter under test (its own checkout), so it uses only what both
# trees have; it prints one JSON object of stage -> [seconds per repetition].
WORKER = r"""
import json, sys, time
import yaml
try:
    from backstop.domain.yamlio import load_all  # the tree's own loader (C when available)
except ImportError:
    def load_all(text):
        return list(yaml.safe_load_all(text))
from backstop.domain.spec import StreamTopology, expand
path, reps = sys.argv[1], int(sys.argv[2])
text = open(path).read()
out = {"parse": [], "validate": [], "expand": []}
for _ in range(reps):
    t0 = time.perf_counter()
    doc = [d for d in load_all(text) if d][0]
    t1 = time.perf_counter()
    out["parse"].append(t1 - t0)
    if doc.get("parseOnly"):
        continue
    topo = StreamTopology.model_validate(doc)
    t2 = time.perf_counter()
    graph = expand(topo.spec)
    t3 = time.perf_counter()
    out["validate"].append(t2 - t1)
    out["expand"].append(t3 - t2)
    out["tasks"], out["edges"] = len(graph), sum(len(p) for p in graph.preds)
print(json.dumps(out))
"""


# --------------------------------------------------------------------------- manifests


def _operator(name: str, parallelism: int, inputs: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "name": name,
        "parallelism": parallelism,
        "resources": {"cpu": "100m", "memory": "128Mi"},
        "reprocessingLatency": 0.5,
        "inputs": [{"operator": op, "grouping": g} for op, g in inputs],
        "config": {"function": "backstop_runtime.api:Map", "windowSeconds": 10},
    }


def manifest(name: str, operators: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {"image": "backstop/runtime:0.2.0", "recoveryLatencyBound": 3600,
                 "operators": operators},
    }  # fmt: skip


def many_operators(n: int = 100, parallelism: int = 100) -> dict[str, Any]:
    """``n`` operators (the CRD's limit, 100) of ``parallelism`` tasks (10,000 in all),
    each reading the previous one by forward, every tenth by shuffle instead."""
    ops = []
    for i in range(n):
        inputs = [(f"op{i - 1}", "shuffle" if i % 10 == 0 else "forward")] if i else []
        ops.append(_operator(f"op{i}", parallelism, inputs))
    return manifest("many-operators", ops)


def four_shuffles(n: int = 100, parallelism: int = 100) -> dict[str, Any]:
    """``n`` operators of ``parallelism`` tasks of 0.5 s, forward chains joined by four
    shuffles, under a 10 s bound: the planners must back up tasks in every chain."""
    ops = []
    for i in range(n):
        grouping = "shuffle" if i in (20, 45, 61, 87) else "forward"
        op = _operator(f"op{i}", parallelism, [(f"op{i - 1}", grouping)] if i else [])
        ops.append(op)
    doc = manifest("four-shuffles", ops)
    doc["spec"]["recoveryLatencyBound"] = 10
    return doc


def oversized_manifest(n: int = 3000) -> dict[str, Any]:
    """3,000 operators of parallelism 3, 3, 4, ... (10,000 tasks), each reading
    the previous one by shuffle: over the CRD's 100 operators, so only parsed."""
    ops = [
        _operator(f"op{i}", 4 if i % 3 == 2 else 3, [(f"op{i - 1}", "shuffle")] if i else [])
        for i in range(n)
    ]
    return {**manifest("ops-3000", ops), "parseOnly": True}


def forward_chain(n: int = 10, parallelism: int = 1000) -> dict[str, Any]:
    """``n`` operators of ``parallelism`` tasks, each reading the previous one by forward."""
    ops = [
        _operator(f"stage{i}", parallelism, [(f"stage{i - 1}", "forward")] if i else [])
        for i in range(n)
    ]
    return manifest("forward-chain", ops)


def wide_shuffle(parallelism: int = 1000) -> dict[str, Any]:
    """Two operators of ``parallelism`` tasks joined by a shuffle (``parallelism²`` edges):
    at 1000, over the 100,000 edges a topology may have (docs/scale.md), so only parsed."""
    ops = [
        _operator("source", parallelism, []),
        _operator("sink", parallelism, [("source", "shuffle")]),
    ]
    return {**manifest("wide-shuffle", ops), "parseOnly": parallelism**2 > 100_000}


# --------------------------------------------------------------------------- measuring


@dataclass
class Figure:
    label: str
    target: str
    wall: dict[str, float]  # tree -> median seconds
    cpu: dict[str, float]


def tree_root(python: str) -> Path:
    """The checkout whose venv ``python`` is (``<root>/.venv/bin/python``): commands run
    there, since ``python -m`` puts the working directory first on the import path."""
    root = Path(python).parent.parent.parent
    return root if (root / "planners").is_dir() else ROOT


def run_timed(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree_root(argv[0]))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def command(
    trees: dict[str, str], label: str, target: str, args: Sequence[str], reps: int
) -> Figure:
    """Median wall and CPU of ``python -m backstop ARGS`` for every tree, alternately."""
    walls: dict[str, list[float]] = {t: [] for t in trees}
    cpus: dict[str, list[float]] = {t: [] for t in trees}
    for _ in range(reps):
        for tree, python in trees.items():
            w, c = run_timed([python, "-m", "backstop", *args])
            walls[tree].append(w)
            cpus[tree].append(c)
    print(f"{label}: " + ", ".join(f"{t} {statistics.median(walls[t]):.3f}s" for t in trees),
          file=sys.stderr)  # fmt: skip
    return Figure(
        label,
        target,
        {t: statistics.median(v) for t, v in walls.items()},
        {t: statistics.median(v) for t, v in cpus.items()},
    )


def answers(trees: dict[str, str], path: Path) -> dict[str, str]:
    """What ``backstop backups --json`` answers on ``path`` in every tree (run once)."""
    out = {}
    for tree, python in trees.items():
        proc = subprocess.run([python, "-m", "backstop", "backups", str(path), "--json"],
                              capture_output=True, text=True, cwd=tree_root(python))  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: backstop backups {path} failed:\n{proc.stderr}")
        doc = json.loads(proc.stdout)
        out[tree] = (f"{len(doc['backups'])} backups of {doc['tasks']:,} tasks, "
                     f"`{doc['algorithm']}`, optimal {str(doc['optimal']).lower()}")  # fmt: skip
    return out


def stages(
    trees: dict[str, str], name: str, path: Path, reps: int
) -> tuple[list[Figure], tuple[int, int]]:
    """Median seconds of parse, validate and expand of one manifest, for every tree."""
    results: dict[str, dict[str, Any]] = {}
    for tree, python in trees.items():
        proc = subprocess.run(
            [python, "-c", WORKER, str(path), str(reps)],
            capture_output=True,
            text=True,
            cwd=tree_root(python),
        )
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: stages of {path} failed:\n{proc.stderr}")
        results[tree] = json.loads(proc.stdout)
        print(f"{name} [{tree}]: " + ", ".join(
            f"{s} {statistics.median(results[tree][s]):.3f}s"
            for s in ("parse", "validate", "expand") if results[tree][s]),
            file=sys.stderr)  # fmt: skip
    any_result = next(iter(results.values()))
    size = (int(any_result.get("tasks", 10_000)), int(any_result.get("edges", 0)))
    targets = {"parse": "< 1 s" if size[0] >= 10_000 else ""}
    figures = [
        Figure(
            f"{name}: {stage}",
            targets.get(stage, ""),
            {t: statistics.median(r[stage]) for t, r in results.items()},
            {},
        )
        for stage in ("parse", "validate", "expand")
        if all(r[stage] for r in results.values())
    ]
    return figures, size


# --------------------------------------------------------------------------- report


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {platform.system()}"


def render(
    figures: list[Figure], trees: dict[str, str], sizes: dict[str, tuple[int, int]],
    load: tuple[tuple[float, ...], tuple[float, ...]], reps: int,
    answered: dict[str, str] | None = None, backups_reps: int = 0,
) -> str:  # fmt: skip
    names = list(trees)
    head = ["figure", *(f"{t} wall s" for t in names)]
    if len(names) == 2:
        head.append(f"{names[0]}/{names[1]}")
    head += [*(f"{t} CPU s" for t in names), "target"]
    lines = [
        HEADING,
        "",
        "Generated by `python bench/bench_cli.py"
        + (" --baseline <python of the baseline tree>" if len(names) == 2 else "")
        + " --out`"
        f" ({reps} repetitions; medians). Machine: {machine()}; load average "
        f"{' '.join(f'{x:.1f}' for x in load[0])} at the start, "
        f"{' '.join(f'{x:.1f}' for x in load[1])} at the end (a machine shared by other "
        "work: each command ran for both trees alternately, in the same conditions, the "
        "stages of one manifest for one tree right after the other's; CPU time is user + "
        "system of the command's process). "
        + (f"The baseline is `{names[0]}`, run with the same interpreter and libraries. "
           if len(names) == 2 else "")
        + "Commands run as `python -m backstop ...`; the stages run in one process each "
        "(parse: YAML to plain objects; validate: `StreamTopology.model_validate`; expand: "
        "`expand`, the task DAG). What `backstop backups` still spends is mostly importing "
        "pydantic and building the manifest's model classes (spec, pod template, lifecycle), "
        "not planning; libyaml's parser leaves PyYAML's constructor (Python) as the cost of "
        "a 3,000-operator manifest, which validation refuses (at most 100 "
        "operators), while a legal 10,000-task manifest parses in milliseconds.",
        "",
        "Manifests: "
        + "; ".join(
            f"{n} ({t:,} tasks" + (f", {e:,} edges)" if e else ")") for n, (t, e) in sizes.items()
        )
        + ".",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]  # fmt: skip
    for f in figures:
        row = [f.label, *(f"{f.wall[t]:.3f}" for t in names)]
        if len(names) == 2:
            row.append(f"{f.wall[names[0]] / f.wall[names[1]]:.1f}×")
        row += [*(f"{f.cpu[t]:.3f}" if t in f.cpu else "—" for t in names), f.target]
        lines.append("| " + " | ".join(row) + " |")
    if answered:
        lines += ["", f"`backstop backups` on 100 × 100, four shuffles ({backups_reps} "
                  "repetitions; its default budget, 10 s) answers: "
                  + "; ".join(f"{t}: {a}" for t, a in answered.items()) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", help="python of another checkout's venv (e.g. main's)")
    parser.add_argument(
        "--baseline-name", default="baseline", help="what the baseline is, for the docs"
    )
    parser.add_argument("--reps", type=int, default=7, help="repetitions of each command")
    parser.add_argument("--stage-reps", type=int, default=3, help="repetitions of each stage")
    parser.add_argument(
        "--backups-reps", type=int, default=3, help="repetitions of backups on 10,000 tasks"
    )
    parser.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = parser.parse_args()
    trees = {"this tree": sys.executable}
    if args.baseline:
        trees = {args.baseline_name: args.baseline, "this tree": sys.executable}
    load0 = os.getloadavg()
    sizes: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        import yaml  # only to write the generated manifests

        large = Path(tmp) / "four-shuffles.yaml"
        large.write_text(yaml.safe_dump(four_shuffles(), sort_keys=False))
        figures = [
            command(trees, "`backstop --help`", "< 0.3 s", ["--help"], args.reps),
            command(trees, "`backstop backups` on the example", "< 0.5 s",
                    ["backups", str(EXAMPLE)], args.reps),
            command(trees, "`backstop backups` on 100 × 100, four shuffles", "< 5 s",
                    ["backups", str(large), "--json"], args.backups_reps),
        ]  # fmt: skip
        answered = answers(trees, large)
        for name, doc in (
            ("3,000 operators (over the limit)", oversized_manifest()),
            ("100 × 100 operators", many_operators()),
            ("10 × 1,000 forward", forward_chain()),
            ("2 × 1,000 shuffle", wide_shuffle()),
        ):
            path = Path(tmp) / f"{doc['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            found, sizes[name] = stages(trees, name, path, args.stage_reps)
            figures += found
    load1 = os.getloadavg()
    text = render(figures, trees, sizes, (load0, load1), args.reps, answered, args.backups_reps)
    print(text)
    if args.out:
        write_section(args.out, HEADING, text, command=COMMAND)


if __name__ == "__main__":
    main()
