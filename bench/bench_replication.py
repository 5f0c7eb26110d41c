#!/usr/bin/env python3
"""Reproduce Figs. 4 and 5 of the selective-replication seed.

Seed: *Adaptive Selective Replication for Complex Event Processing Systems*.

Why: the seed claims that, with independent host crashes of probability ``p``
over a day, selecting operators for replication by QOD or LU keeps about 1.7
points more queries running than a random selection (p = 0.02, load_rem = 50),
QOD·LU another 0.4 (99.2 %), and that full replication (twice the resources)
is only about one point better (Section 3.4). This script rebuilds the
seed's setup and measures every selection in ``planners.replication`` under the
seed's availability model (:func:`planners.replication.crash_availability`).

Setup (Section 3.4): queries from six templates over shared
sources, with multi-query optimisation (an operator with the same type,
predicate and inputs is reused), scaled to a system load of exactly 100; 100
hosts, primaries spread least-loaded first; each host gets capacity
``1 + load_rem / 100``, so the spare capacity is exactly ``load_rem``; operators
replicated at most once. The expectation over crashes is computed (exactly,
see the module), averaged over ``--workloads`` generated workloads (the random
selection over ``--workloads`` seeds too).

A last table compares the seed's replication optimizer (Section 4, a genetic search
maximising the availability within the cost limit), its query-level selection (Section
3.1.3) and its procedure 2 for replication levels (Section 3.2.1) with our selections, on
``--opt-instances`` smaller instances of the same generator (the genetic search evaluates
the availability model thousands of times per plan).

Prints a markdown section to stdout (progress to stderr); ``--out`` writes
its page, ``docs/benchmarks/replication.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.cases.replication import spare_for, spread, workload
from backstop_testkit.support.docsection import write_section
from bench.replication_optimizer import optimizer_lines
from planners.graph import TaskGraph
from planners.replication import (
    ReplicationPlan,
    check_replication,
    crash_availability,
    select_replicas,
)

HEADING = "## Selective replication"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "replication.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_replication.py --out"
PROBS = (0.0025, 0.005, 0.01, 0.02, 0.03)
"""The seed's host failure probabilities (Section 3.4)."""
LOADS = (0, 10, 25, 50, 75, 100)
"""Spare resources for replication, % of the system load (Fig. 5's x-axis)."""
FIG4 = [  # label, selection, strategy
    ("random (seed)", "sort-fill", "random"),
    ("QOD (seed)", "sort-fill", "qod"),
    ("LU (seed)", "sort-fill", "lu"),
    ("QOD·LU (seed)", "sort-fill", "qod-lu"),
    ("QOD·LU knapsack (ours)", "knapsack", "qod-lu"),
    ("best (ours)", "best", "qod-lu"),
]


@dataclass
class _Figures:
    """Per selection (Fig. 4) and per spare load (Fig. 5): availability over the workloads."""

    fig4: dict[str, dict[float, list[float]]] = field(
        default_factory=lambda: {lbl: {p: [] for p in PROBS} for lbl, _, _ in FIG4}
    )
    share4: dict[str, list[float]] = field(default_factory=lambda: {lbl: [] for lbl, _, _ in FIG4})
    fig5: dict[int, dict[float, list[float]]] = field(
        default_factory=lambda: {x: {p: [] for p in PROBS} for x in LOADS}
    )
    base: dict[float, list[float]] = field(default_factory=lambda: {p: [] for p in PROBS})
    replicated: dict[int, list[float]] = field(default_factory=lambda: {x: [] for x in LOADS})
    sizes: list[tuple[int, int]] = field(default_factory=list)


PlanFor = Callable[[float, str, str, float], ReplicationPlan]
"""A checked replication plan of one workload: (load_rem, selection, strategy, p)."""


def _planner(args: argparse.Namespace, w: int, g: TaskGraph, assignment: dict[str, str]) -> PlanFor:
    def plan_for(load_rem: float, selection: str, strategy: str, p: float) -> ReplicationPlan:
        spare = spare_for(g, assignment, args.hosts, load_rem)
        plan = select_replicas(
            g,
            assignment,
            spare,
            budget=load_rem,
            strategy=strategy,
            selection=selection,
            seed=w,
            host_failure_prob=p,
        )
        problems = check_replication(g, assignment, spare, plan, budget=load_rem)
        if problems:
            raise SystemExit(f"{selection}/{strategy} produced an invalid plan: {problems}")
        return plan

    return plan_for


def _fig4(
    args: argparse.Namespace,
    figs: _Figures,
    g: TaskGraph,
    assignment: dict[str, str],
    plan_for: PlanFor,
) -> None:
    fig4, share4 = figs.fig4, figs.share4
    for label, selection, strategy in FIG4:
        if selection == "best":
            # replicate_best's candidates do not depend on p, only its rating does:
            # build them once, keep the best per p (the same plan best would return)
            cands = [
                plan_for(args.load_rem, sel, name, PROBS[0])
                for name in ("qod-lu", "qod", "lu")
                for sel in ("knapsack", "sort-fill")
            ]
            for p in PROBS:
                rated = [crash_availability(g, assignment, c.replicas, p) for c in cands]
                k = max(range(len(cands)), key=lambda i: (rated[i], -i))
                fig4[label][p].append(rated[k])
                if p == 0.02:
                    share4[label].append(len(cands[k].replicas) / len(g))
            continue
        plan = plan_for(args.load_rem, selection, strategy, PROBS[0])
        share4[label].append(len(plan.replicas) / len(g))
        for p in PROBS:
            fig4[label][p].append(crash_availability(g, assignment, plan.replicas, p))


def _workload(args: argparse.Namespace, w: int, figs: _Figures) -> None:
    """One generated workload: no replicas, every Fig. 4 selection, every Fig. 5 load."""
    rng = random.Random(args.seed * 1000 + w)
    g = workload(rng)
    figs.sizes.append((len(g), len(g.outputs)))
    assignment = spread(g, args.hosts)
    for p in PROBS:
        figs.base[p].append(crash_availability(g, assignment, {}, p))
    plan_for = _planner(args, w, g, assignment)
    _fig4(args, figs, g, assignment, plan_for)
    for x in LOADS:
        plan = plan_for(float(x), "sort-fill", "qod-lu", PROBS[0])
        figs.replicated[x].append(len(plan.replicas) / len(g))
        for p in PROBS:
            figs.fig5[x][p].append(crash_availability(g, assignment, plan.replicas, p))


def _pct(xs: list[float]) -> str:
    return f"{100 * statistics.mean(xs):.2f}"


def _table_lines(args: argparse.Namespace, secs: float, figs: _Figures) -> list[str]:
    pct = _pct
    ops = statistics.mean(s[0] for s in figs.sizes)
    qs = statistics.mean(s[1] for s in figs.sizes)
    head = "| selection | operators replicated | " + " | ".join(f"p = {p:g}" for p in PROBS) + " |"
    rule = "|---|---:|" + "---:|" * len(PROBS)
    lines = [
        HEADING,
        "",
        f"`python bench/bench_replication.py --workloads {args.workloads} --seed {args.seed}`"
        f" ({secs:.0f} s) — the seed's Section 3.4 setup: {args.workloads} workloads of "
        f"{qs:.0f} queries on average ({ops:.0f} operators after reuse) from six templates,"
        f" system load 100 on {args.hosts} hosts, spare capacity = load_rem spread over the "
        "hosts, at most one replica per operator. Cells: expected % of queries still running "
        "after a day in which each host crashes independently with probability p (the seed's "
        "model, Section 2.3; computed exactly, not sampled).",
        "",
        f"### Fig. 4: selection heuristics at load_rem = {args.load_rem:g}",
        "",
        head,
        rule,
        "| no replicas | 0 % | " + " | ".join(pct(figs.base[p]) for p in PROBS) + " |",
    ]
    for label, _, _ in FIG4:
        lines.append(
            f"| {label} | {pct(figs.share4[label])} % | "
            + " | ".join(pct(figs.fig4[label][p]) for p in PROBS)
            + " |"
        )
    lines += [
        "",
        "### Fig. 5: QOD·LU (seed's sort-and-fill) against spare resources",
        "",
        "| load_rem (% of load) | operators replicated | "
        + " | ".join(f"p = {p:g}" for p in PROBS)
        + " |",
        "|---:|---:|" + "---:|" * len(PROBS),
    ]
    for x in LOADS:
        lines.append(
            f"| {x} | {pct(figs.replicated[x])} % | "
            + " | ".join(pct(figs.fig5[x][p]) for p in PROBS)
            + " |"
        )
    return lines


def _claim_lines(figs: _Figures) -> list[str]:
    fig4, fig5 = figs.fig4, figs.fig5

    def m(label: str, p: float) -> float:
        return 100 * statistics.mean(fig4[label][p])

    p2 = 0.02

    def verdict(ok: bool) -> str:
        return "holds" if ok else "does NOT hold"

    rnd, qod, lu, ql = (
        m(x, p2) for x in ("random (seed)", "QOD (seed)", "LU (seed)", "QOD·LU (seed)")
    )
    full = {p: 100 * statistics.mean(fig5[100][p]) for p in PROBS}
    half = {p: 100 * statistics.mean(fig5[50][p]) for p in PROBS}
    return [
        "",
        "### The seed's numbers beside ours (p = 0.02, load_rem = 50 unless noted)",
        "",
        "| claim | seed | ours |",
        "|---|---:|---:|",
        f"| QOD·LU: queries still running | 99.2 % | {ql:.2f} % |",
        f"| QOD over random | ≈ +1.7 points | {qod - rnd:+.2f} |",
        f"| LU over random | ≈ +1.7 points | {lu - rnd:+.2f} |",
        f"| QOD·LU over the better of QOD, LU | +0.4 points | {ql - max(qod, lu):+.2f} |",
        f"| full replication (load_rem = 100) over load_rem = 50, p = 0.03 | ≈ +1 point | "
        f"{full[0.03] - half[0.03]:+.2f} |",
        f"| operators replicated at load_rem = 50 | 80 % | {_pct(figs.replicated[50])} % |",
        "",
        f"The shape of Figs. 4/5 (computed from the tables): QOD·LU ≥ QOD at every p "
        f"{verdict(all(m('QOD·LU (seed)', p) >= m('QOD (seed)', p) for p in PROBS))}; "
        f"LU > random at every p "
        f"{verdict(all(m('LU (seed)', p) > m('random (seed)', p) for p in PROBS))}; "
        f"QOD·LU at load_rem = 50 within one point of full replication at every p "
        f"{verdict(all(full[p] - half[p] <= 1.0 for p in PROBS))}. The "
        "differences in size: (1) the seed does not publish its templates, operator costs or "
        "primary placement, so absolute levels depend on our generator (log-normal source "
        "rates, six templates, reuse by type, predicate and inputs); (2) the seed's "
        "1000-run average is replaced by the exact expectation; (3) in our workloads the "
        "most reused operators (sources, joins of hot streams) are also among the heaviest, "
        "so QOD alone replicates fewer operators than LU and gains less over random than the "
        "seed's +1.7, and QOD·LU orders almost as LU does (hence +0.0x rather than +0.4); "
        "(4) *full replication* (load_rem = 100) replicates slightly under 100 % of the "
        "operators: a few operators are larger than any host's spare capacity once the spare "
        "is spread evenly, so its lead over load_rem = 50 is a little smaller than the seed's. "
        "Our exact knapsack gains little over the seed's sort-and-fill (the QOD·LU product is "
        "already a good profit-per-weight order, as the seed argues, Section 3.2.2); *best* "
        "(every selection rated by the crash model, kept as the operator's choice) gains most "
        "at high p.",
        "",
    ]


def run(args: argparse.Namespace) -> str:
    t0 = time.perf_counter()
    figs = _Figures()
    for w in range(args.workloads):
        print(f"workload {w + 1}/{args.workloads}", file=sys.stderr, flush=True)
        _workload(args, w, figs)
    secs = time.perf_counter() - t0
    lines = _table_lines(args, secs, figs) + _claim_lines(figs)
    return "\n".join(lines + optimizer_lines(args) + [""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=int, default=20, help="generated workloads (default 20)")
    p.add_argument("--hosts", type=int, default=100, help="hosts (seed: 100)")
    p.add_argument("--load-rem", type=float, default=50.0, help="spare for Fig. 4 (seed: 50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--opt-instances", type=int, default=5, help="instances of the optimizer table (5)"
    )
    p.add_argument("--opt-hosts", type=int, default=10, help="hosts of those instances (10)")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    section = run(args)
    sys.stdout.write(section)
    if args.out:
        write_section(args.out, HEADING, section, command=COMMAND)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
