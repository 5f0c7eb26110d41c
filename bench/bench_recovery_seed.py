#!/usr/bin/env python3
"""Fig. 16 of the incremental-recovery seed in its own setting, and Theorem 5.1 on every instance.

Why: the seed evaluates its recovery planners on 100 synthetic topologies of
18 queries per setting (*Incremental Recovery in Distributed Stream Processing
Systems*, Section 7.3): maximal partition share frequency 3 or 6 (Fig. 16a),
Zipf-skewed share frequencies
with s = 0.2 or 0.5 (Fig. 16b), and random or workload-proportional priorities
(Fig. 16c), the x-axis being the recovery resources as a percentage of what
the failed partitions need. ``bench/bench_recovery.py`` measures our cluster
setting; this script reproduces the seed's, where the resources are one pool
(a single node: there the per-node problem is the seed's pooled one), and
checks Theorem 5.1's ratio ``1 − e^(−1/d)`` against the proven optimum on every
instance. It also measures what pruning BestDensity's pairs to the 48 densest
queries loses when more queries fail.

Prints a markdown section (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/recovery-seed.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.support.docsection import write_section
from planners.graph import TaskGraph
from planners.recovery import (
    RecoveryStep,
    approximation_bound,
    check_recovery,
    schedule_recovery,
)

HEADING = "## Recovery scheduling: the seed's Fig. 16"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "recovery-seed.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_recovery_seed.py --out"
LEVELS = (10, 30, 50, 70, 90)
"""Recovery resources, % of the failed partitions' needs (the figure's exact ticks are
not in the seed's text; these span its x-axis)."""
ALGOS = ("operator-centric", "best-density", "best-density-strong", "exact")
SETTINGS = [  # panel, label, max share, zipf s, priority
    ("16a", "max share 3", 3, None, "random"),
    ("16a", "max share 6", 6, None, "random"),
    ("16b", "Zipf s = 0.2", 6, 0.2, "random"),
    ("16b", "Zipf s = 0.5", 6, 0.5, "random"),
    ("16c", "random priority", 3, None, "random"),
    ("16c", "priority ∝ workload", 3, None, "linear"),
]


def seed_topology(
    rng: random.Random, queries: int, max_share: int, skew: float | None, priority: str
) -> TaskGraph:
    """Queries of 2–5 partitions; each upstream partition shared by f queries.

    ``f`` is uniform on ``1..max_share`` or, with ``skew``, Zipf: ``P(f) ∝ f^−s``.
    Priorities are random in 1–10 or rise linearly from 1 to 10 with the
    query's workload (the sum of its partitions' costs).
    """
    slots = {q: rng.randint(1, 4) for q in range(queries)}
    share = list(range(1, max_share + 1))
    zipf = [1.0 / f**skew for f in share] if skew is not None else [1.0] * len(share)
    edges: list[tuple[str, str]] = []
    parts: list[str] = []
    while any(slots.values()):
        f = rng.choices(share, weights=zipf)[0]
        open_q = [q for q, k in slots.items() if k > 0]
        rng.shuffle(open_q)
        chosen = sorted(open_q, key=lambda q: -slots[q])[: min(f, len(open_q))]
        p = f"p-{len(parts)}"
        parts.append(p)
        for q in chosen:
            edges.append((p, f"q-{q}"))
            slots[q] -= 1
    outs = [f"q-{q}" for q in range(queries)]
    tasks = parts + outs
    weight = {t: round(rng.uniform(0.5, 2.0), 2) for t in tasks}
    load = {o: weight[o] for o in outs}
    for p, o in edges:
        load[o] += weight[p]
    if priority == "linear":
        lo, hi = min(load.values()), max(load.values())
        prio = {o: 1 + 9 * (load[o] - lo) / (hi - lo) if hi > lo else 1.0 for o in outs}
    else:
        prio = {o: float(rng.randint(1, 10)) for o in outs}
    return TaskGraph.build(
        tasks,
        edges,
        latency=dict.fromkeys(tasks, 1.0),
        weight=weight,
        outputs=outs,
        priority=prio,
    )


def solve(
    g: TaskGraph, failed: list[str], pool: dict[str, float], algo: str, limit: float = 30.0
) -> RecoveryStep:
    step = schedule_recovery(g, failed, pool, algorithm=algo, time_limit=limit)
    problems = check_recovery(g, failed, pool, step)
    if problems:
        raise SystemExit(f"{algo} produced an invalid plan: {problems}")
    return step


@dataclass
class _Figures:
    """What the settings' runs measured."""

    share: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    theorem: list[tuple[float, float, int]] = field(default_factory=list)
    """(ratio, bound, |optimum queries|) per instance with a non-zero optimum."""
    strong_ratio: list[float] = field(default_factory=list)
    unproven: int = 0
    dp: list[tuple[bool, bool, float]] = field(default_factory=list)
    """(proven, equal to the proven optimum, CPU seconds) of the seed's DP per instance."""


def _settings(args: argparse.Namespace) -> _Figures:
    """Every setting, topology and resource level: each algorithm's recovered share."""
    fig = _Figures()
    share, theorem, strong_ratio = fig.share, fig.theorem, fig.strong_ratio
    for panel, label, max_share, skew, prio in SETTINGS:
        print(f"{panel} {label}", file=sys.stderr, flush=True)
        rng = random.Random(f"{args.seed}:{label}")
        for _ in range(args.topologies):
            g = seed_topology(rng, args.queries, max_share, skew, prio)
            failed = list(g.tasks)
            need = sum(g.weight)
            bound = approximation_bound(g, failed)
            for level in LEVELS:
                pool = {"pool": need * level / 100}
                steps = {a: solve(g, failed, pool, a) for a in ALGOS}
                opt = steps["exact"]
                fig.unproven += not opt.optimal
                fig.dp.append(_dp(g, failed, pool, opt))
                for a, s in steps.items():
                    share.setdefault((label, a, level), []).append(
                        s.recovered_priority / s.failed_priority
                    )
                if opt.recovered_priority > 0:
                    bd = steps["best-density"].recovered_priority / opt.recovered_priority
                    st = steps["best-density-strong"].recovered_priority / opt.recovered_priority
                    theorem.append((bd, bound, len(opt.recovered_queries)))
                    strong_ratio.append(st)
    return fig


def _dp(
    g: TaskGraph, failed: list[str], pool: dict[str, float], opt: RecoveryStep
) -> tuple[bool, bool, float]:
    """The seed's DP at its default budget: proven?, the proven optimum?, CPU seconds."""
    t = time.process_time()
    dp = schedule_recovery(g, failed, pool, algorithm="dp")
    secs = time.process_time() - t
    if check_recovery(g, failed, pool, dp):
        raise SystemExit("dp produced an invalid plan")
    same = bool(opt.optimal) and abs(dp.recovered_priority - opt.recovered_priority) < 1e-9
    return bool(dp.optimal), same, secs


def _prune(args: argparse.Namespace) -> list[tuple[float, float, float]]:
    """Pairs among the 48 densest only, against all pairs, with more queries."""
    prune: list[tuple[float, float, float]] = []
    rng = random.Random(f"{args.seed}:prune")
    for _ in range(args.prune_topologies):
        g = seed_topology(rng, args.prune_queries, 3, None, "random")
        failed = list(g.tasks)
        pool = {"pool": sum(g.weight) * 0.3}
        t1 = time.perf_counter()
        # a budget large enough that neither stops early: every candidate is extended
        full = solve(g, failed, pool, "best-density", 3600.0)
        t2 = time.perf_counter()
        pruned = solve(g, failed, pool, "best-density-pruned", 3600.0)
        t3 = time.perf_counter()
        prune.append((pruned.recovered_priority / full.recovered_priority, t2 - t1, t3 - t2))
    return prune


def _table_lines(args: argparse.Namespace, secs: float, fig: _Figures) -> list[str]:
    lines = [
        HEADING,
        "",
        f"`python bench/bench_recovery_seed.py --topologies {args.topologies} "
        f"--queries {args.queries} --prune-topologies {args.prune_topologies} "
        f"--prune-queries {args.prune_queries} --seed {args.seed}` ({secs:.0f} s) — the "
        f"seed's setting (Section 7.3): per row {args.topologies} generated topologies "
        f"of {args.queries} queries (2–5 partitions each, costs U(0.5, 2)), every "
        "partition failed, the recovery resources one pool of the given % of the "
        "failed partitions' cost. Cells: recovered priority / failed priority (the "
        "figure's y-axis), mean over the topologies. *optimum* is CP-SAT, proven on "
        f"{len(SETTINGS) * args.topologies * len(LEVELS) - fig.unproven} of "
        f"{len(SETTINGS) * args.topologies * len(LEVELS)} instances (the seed's DP, "
        "below, solves the same pooled problem).",
        "",
        "| panel | setting | algorithm | " + " | ".join(f"{x} %" for x in LEVELS) + " |",
        "|---|---|---|" + "---:|" * len(LEVELS),
    ]
    names = {
        "operator-centric": "OC",
        "best-density": "BestDensity (seed)",
        "best-density-strong": "BestDensity, every single seeded",
        "exact": "optimum",
    }
    for panel, label, *_ in SETTINGS:
        for a in ALGOS:
            cells = [f"{statistics.mean(fig.share[label, a, x]):.3f}" for x in LEVELS]
            lines.append(f"| {panel} | {label} | {names[a]} | " + " | ".join(cells) + " |")
    return lines


def _theorem_lines(
    args: argparse.Namespace, fig: _Figures, prune: list[tuple[float, float, float]]
) -> list[str]:
    theorem, strong_ratio = fig.theorem, fig.strong_ratio
    below = [(r, b, k) for r, b, k in theorem if r < b - 1e-9]
    below_multi = [x for x in below if x[2] >= 2]
    worst = min(theorem, key=lambda x: x[0] - x[1])
    return [
        "",
        f"**The seed's DP** (Appendix B, Algorithm 4's candidate plans, searched with a "
        f"bound; `dp` at its default budget of 5 nominal seconds): proven optimal on "
        f"{sum(p for p, _, _ in fig.dp)} of {len(fig.dp)} instances, with CP-SAT's proven "
        f"optimum on {sum(e for _, e, _ in fig.dp)}; slowest {max(t for _, _, t in fig.dp):.2f} "
        "s of CPU.",
        "",
        f"**Theorem 5.1** (BestDensity ≥ (1 − e^(−1/d)) × optimum, Section 5), checked on all "
        f"{len(theorem)} instances with a non-zero optimum: the seed's BestDensity reaches "
        f"{statistics.mean(r for r, _, _ in theorem):.3f} of the optimum on average, "
        f"{min(r for r, _, _ in theorem):.3f} at worst; the bound "
        f"({min(b for _, b, _ in theorem):.3f}–{max(b for _, b, _ in theorem):.3f} here, by d) "
        f"is met on {len(theorem) - len(below)} of {len(theorem)} instances "
        f"(closest: ratio {worst[0]:.3f} against the bound {worst[1]:.3f}). Instances below "
        f"the bound: {len(below)}, of which {len(below_multi)} have an optimum of two or "
        "more queries (the proof's assumption, Appendix D.2 starts from 'the first 2 "
        "queries in RP*'). With every single query seeded, the ratio is "
        f"{statistics.mean(strong_ratio):.3f} on average, {min(strong_ratio):.3f} at worst.",
        "",
        f"**Pruned pairs** (`best-density-pruned`: pairs among the 48 densest queries), "
        f"{args.prune_topologies} topologies of {args.prune_queries} queries, 30 % resources: "
        f"recovered priority {statistics.mean(p for p, _, _ in prune):.4f} × the seed's "
        f"all-pairs BestDensity on average ({min(p for p, _, _ in prune):.4f} at worst), "
        f"in {statistics.mean(t for _, _, t in prune):.2f} s against "
        f"{statistics.mean(t for _, t, _ in prune):.2f} s.",
        "",
        "Against the seed's Fig. 16 (curves only; no numbers in the text), computed from "
        "the rows above:",
        "",
    ]


def _claim_lines(share: dict[tuple[str, str, int], list[float]]) -> list[str]:
    """The shape of the seed's Fig. 16, checked on the measured shares."""

    def mean_of(label: str, algo: str) -> float:
        return statistics.mean(statistics.mean(share[label, algo, x]) for x in LEVELS)

    oc_worst = all(
        statistics.mean(share[label, "operator-centric", x])
        <= statistics.mean(share[label, "best-density", x]) + 1e-12
        for _, label, *_ in SETTINGS
        for x in LEVELS
    )
    claims = [
        ("OC is the worst of the three in every setting and level (16a–c)", oc_worst),
        (
            "every algorithm recovers less with share frequency 6 than 3 (16a)",
            all(mean_of("max share 6", a) < mean_of("max share 3", a) for a in ALGOS),
        ),
        (
            "BestDensity recovers more with skew 0.5 than 0.2 (16b)",
            mean_of("Zipf s = 0.5", "best-density") > mean_of("Zipf s = 0.2", "best-density"),
        ),
        (
            "OC recovers less with skew 0.5 than 0.2 (16b)",
            mean_of("Zipf s = 0.5", "operator-centric")
            < mean_of("Zipf s = 0.2", "operator-centric"),
        ),
        (
            "BestDensity and the optimum recover slightly less with priorities ∝ workload (16c)",
            all(
                mean_of("priority ∝ workload", a) < mean_of("random priority", a)
                for a in ("best-density", "exact")
            ),
        ),
    ]
    return [f"- {text}: {'holds' if ok else 'does not hold'}" for text, ok in claims]


def run(args: argparse.Namespace) -> str:
    t0 = time.perf_counter()
    fig = _settings(args)
    prune = _prune(args)
    secs = time.perf_counter() - t0
    lines = _table_lines(args, secs, fig) + _theorem_lines(args, fig, prune)
    lines += _claim_lines(fig.share)
    lines += [
        "",
        "Our generator is one reading of the seed's (which is not published): queries of 2–5 "
        "partitions, each upstream partition shared by f queries with f uniform on 1..max "
        "share, or, for 16b, f drawn from a Zipf law with exponent s on 1..6.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topologies", type=int, default=100, help="per setting (seed: 100)")
    p.add_argument("--queries", type=int, default=18, help="queries per topology (seed: 18)")
    p.add_argument("--prune-topologies", type=int, default=3)
    p.add_argument("--prune-queries", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
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
