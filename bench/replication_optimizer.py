"""The optimizer table of ``bench/bench_replication.py``: the seed's Section 4 against ours.

Seed: *Adaptive Selective Replication for Complex Event Processing Systems*. Its replication
optimizer (Section 4) searches placements by genetic search; its query-level selection
(Section 3.1.3) and procedure 2 (Section 3.2.1) are further selections. This module runs
them and our selections on small instances of the benchmark's generator (the genetic
search evaluates the availability model thousands of times per plan) and formats the table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backstop_testkit.cases.replication import spare_for, spread, workload
from planners.graph import TaskGraph
from planners.replication import (
    ReplicationPlan,
    check_replication,
    crash_availability,
    replicate_genetic,
    replicate_query_fill,
    select_replicas,
)

__all__ = ["OPT_ROWS", "optimizer_lines"]


def _pct(xs: list[float]) -> str:
    return f"{100 * statistics.mean(xs):.2f}"


OPT_P = 0.02
"""The crash probability of the optimizer comparison (the seed's headline p)."""
OPT_ROWS: list[tuple[str, int, Callable[..., ReplicationPlan]]] = [
    # label, level, planner(graph, assignment, spare, budget, seed, candidates)
    ("sort-fill QOD·LU (seed §3.2.1)", 1, lambda *a: _sel(*a, selection="sort-fill")),
    ("query-fill QOD·LU, impQ mean (seed §3.1.3)", 1, lambda *a: _qfill(*a, combine="mean")),
    ("query-fill QOD·LU, impQ min (seed §3.1.3)", 1, lambda *a: _qfill(*a, combine="min")),
    ("knapsack QOD·LU (ours)", 1, lambda *a: _sel(*a, selection="knapsack")),
    ("best (ours)", 1, lambda *a: _sel(*a, selection="best")),
    ("genetic 20×30, random start (seed §4)", 1, lambda *a: _ga(*a, start=False)),
    ("genetic 50×200, random start (seed §4)", 1, lambda *a: _ga(*a, start=False, size=(50, 200))),
    ("genetic 20×30, from best's candidates", 1, lambda *a: _ga(*a, start=True)),
    (
        "genetic 50×200, from best's candidates",
        1,
        lambda *a: _ga(*a, start=True, size=(50, 200)),
    ),
    ("sort-fill, level 2 (seed procedure 1)", 2, lambda *a: _sel(*a, selection="sort-fill")),
    (
        "sort-fill-direct, level 2 (seed procedure 2)",
        2,
        lambda *a: _sel(*a, selection="sort-fill-direct"),
    ),
    ("genetic 20×30, level 2, random start (seed §4)", 2, lambda *a: _ga(*a, start=False)),
]
"""The optimizer comparison's rows; "genetic P×G": population P, G generations."""


def _sel(
    g: TaskGraph,
    at: dict[str, str],
    spare: dict[str, float],
    budget: float,
    seed: int,
    level: int,
    *,
    selection: str,
) -> ReplicationPlan:
    return select_replicas(
        g,
        at,
        spare,
        budget=budget,
        selection=selection,
        seed=seed,
        level=level,
        host_failure_prob=OPT_P,
    )


def _qfill(
    g: TaskGraph,
    at: dict[str, str],
    spare: dict[str, float],
    budget: float,
    seed: int,
    level: int,
    *,
    combine: str,
) -> ReplicationPlan:
    return replicate_query_fill(
        g,
        at,
        spare,
        budget=budget,
        seed=seed,
        level=level,
        combine=combine,
        host_failure_prob=OPT_P,
    )


def _ga(
    g: TaskGraph,
    at: dict[str, str],
    spare: dict[str, float],
    budget: float,
    seed: int,
    level: int,
    *,
    start: bool,
    size: tuple[int, int] = (20, 30),
) -> ReplicationPlan:
    initial = []
    if start:
        initial = [
            select_replicas(
                g,
                at,
                spare,
                budget=budget,
                selection=sel,
                strategy=name,
                level=level,
                host_failure_prob=OPT_P,
            ).replicas
            for name in ("qod-lu", "qod", "lu")
            for sel in ("knapsack", "sort-fill")
        ]
    return replicate_genetic(
        g,
        at,
        spare,
        budget=budget,
        seed=seed,
        level=level,
        host_failure_prob=OPT_P,
        initial=initial,
        population=size[0],
        generations=size[1],
    )


@dataclass
class _OptRuns:
    """Per row of :data:`OPT_ROWS`: availability, share replicated, seconds per instance."""

    avail: dict[str, list[float]] = field(default_factory=lambda: {r[0]: [] for r in OPT_ROWS})
    share: dict[str, list[float]] = field(default_factory=lambda: {r[0]: [] for r in OPT_ROWS})
    secs: dict[str, list[float]] = field(default_factory=lambda: {r[0]: [] for r in OPT_ROWS})
    base: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


def _optimizer_runs(args: argparse.Namespace) -> _OptRuns:
    """Every row of :data:`OPT_ROWS` on ``--opt-instances`` small instances, each plan checked."""
    runs = _OptRuns()
    for i in range(args.opt_instances):
        print(f"optimizer instance {i + 1}/{args.opt_instances}", file=sys.stderr, flush=True)
        g = workload(random.Random(args.seed * 1000 + 500 + i), queries=40, sources=8)
        runs.sizes.append(len(g))
        at = spread(g, args.opt_hosts)
        spare = spare_for(g, at, args.opt_hosts, args.load_rem)
        runs.base.append(crash_availability(g, at, {}, OPT_P))
        for label, level, fn in OPT_ROWS:
            t0 = time.perf_counter()
            plan = fn(g, at, spare, args.load_rem, i, level)
            runs.secs[label].append(time.perf_counter() - t0)
            problems = check_replication(g, at, spare, plan, budget=args.load_rem)
            if problems:
                raise SystemExit(f"{label} produced an invalid plan: {problems}")
            assert plan.crash_availability is not None
            runs.avail[label].append(plan.crash_availability)
            runs.share[label].append(len(plan.replicas) / len(g))
    return runs


def optimizer_lines(args: argparse.Namespace) -> list[str]:
    """The seed's Section 4 optimizer (genetic search) against the heuristics, small instances."""
    runs = _optimizer_runs(args)

    def m(label: str) -> float:
        return 100 * statistics.mean(runs.avail[label])

    best, sf = m("best (ours)"), m("sort-fill QOD·LU (seed §3.2.1)")
    ga_big = m("genetic 50×200, random start (seed §4)")
    ga_from = m("genetic 50×200, from best's candidates")
    p1, p2 = (
        m("sort-fill, level 2 (seed procedure 1)"),
        m("sort-fill-direct, level 2 (seed procedure 2)"),
    )
    qmean = m("query-fill QOD·LU, impQ mean (seed §3.1.3)")
    lines = [
        "### The seed's optimizer (Section 4) against the heuristics",
        "",
        f"{args.opt_instances} smaller instances of the same generator (40 queries, 8 sources, "
        f"{statistics.mean(runs.sizes):.0f} operators on average, system load 100 on "
        f"{args.opt_hosts} hosts, load_rem = {args.load_rem:g} spread over them), p = {OPT_P:g}."
        " Every plan passes `check_replication`. Availability: the seed's objective A(plc), "
        "the expected % of queries still running (exact). The genetic search maximises it "
        "within cost(plc) ≤ load_rem, seeded by the instance; *from best's candidates*: "
        "its first generation holds the six plans `best` chooses among.",
        "",
        "| selection | operators replicated | queries running, p = 0.02 | time per plan |",
        "|---|---:|---:|---:|",
        f"| no replicas | 0 % | {_pct(runs.base)} | – |",
    ]
    for label, _, _ in OPT_ROWS:
        lines.append(
            f"| {label} | {_pct(runs.share[label])} % | {_pct(runs.avail[label])} | "
            f"{1000 * statistics.mean(runs.secs[label]):.0f} ms |"
        )
    lines += [
        "",
        f"From the table: the genetic search from a random start, at 50×200, is "
        f"{ga_big - sf:+.2f} points from the seed's sort-and-fill and {ga_big - best:+.2f} from "
        f"*best*, at far more time (last column); started from *best*'s candidates it is "
        f"{ga_from - best:+.2f} points from *best* (never below it: the elitist model keeps the "
        f"best initial plan). Procedure 2 at level 2 is {p2 - p1:+.2f} points from procedure 1 "
        f"(it replicates fewer operators); the query-level selection with impQ = mean is "
        f"{qmean - sf:+.2f} points from the operator-level sort-and-fill (whole queries take "
        "heavy shared operators early). So the operator's choice stays `best` (or `knapsack`).",
    ]
    return lines
