#!/usr/bin/env python3
"""Benchmark the joint plan where the operator waits on it: 500 and 10,000 tasks.

Why: the targets are the joint plan of a 500-task topology in < 0.5 s and
of 10,000 tasks in < 5 s, anytime (a valid plan first, improvement within the budget),
and the plan must not get worse. This times ``backstop.domain.planning.plan_topology``
(what a reconcile calls: the joint plan, the minimum-migration check and the
evaluator's checks) with the operator's budget, on the current tree and, in the same
run, on a baseline tree (``--base DIR``, e.g. a ``git worktree`` of an older commit),
each in its own process. Every plan, old and new, is re-checked here by the
failure-effect evaluator of this tree (``planners.evaluate.check_plan``).

Cases (CPU per task as in the manifests; nodes of ``--node-cpu`` CPU, enough of them):

* **500 tasks**: bench_operator's ``src 50 → map 200 (shuffle) → agg 200 (forward)
  → sink 50 (shuffle)``, 150m CPU, t = 0.5 s, bound 1.5 s, 12 × 8-CPU nodes;
* **20 × 100 operators**: the same shape at 2,000 tasks (11,800 edges), where the old
  code still finishes, bound ``--bound-10k``, 32 nodes;
* **100 × 100 operators**: bench_cli's manifest (10,000 tasks, forward, every tenth
  operator a shuffle: 99,000 edges), 100m CPU, t = 0.5 s, bound ``--bound-10k``;
* **10 × 1,000 forward**: bench_cli's forward chain (10,000 tasks), same CPU and bound.

Then the anytime curve of the current tree: the same plans with other budgets.

Prints a markdown section (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/scale-plan.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Joint plan at scale"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "scale-plan.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_scale_plan.py --out"
OPERATOR_BUDGET = 3.0  # backstop.domain.constants.DEFAULT_TIME_LIMIT (nominal seconds)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load() -> str:
    """The 1-minute load average (the machine is shared; every figure carries it)."""
    return f"{os.getloadavg()[0]:.1f}"


# ------------------------------------------------------------------ the child


def child() -> None:
    """Plan one case read from stdin with whatever ``planners``/``backstop`` is on the path."""
    from backstop.domain.planning import plan_topology
    from backstop.domain.spec import expand, parse_spec
    from planners.placement import Node

    req = json.load(sys.stdin)
    model = parse_spec(req["spec"])
    graph = expand(model)
    nodes = [Node(name=f"n{i:03d}", cpu=float(req["node_cpu"])) for i in range(req["nodes"])]
    runs, cpu = [], []
    for _ in range(req["repeats"]):
        t, c = time.perf_counter(), time.process_time()
        plan = plan_topology(model, graph, nodes, time_limit=req["budget"])
        runs.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    json.dump(
        {
            "secs": runs,
            "cpu": cpu,
            "assignment": plan.placement.assignment,
            "backups": sorted(plan.backups),
        },
        sys.stdout,
    )


def child_sets() -> None:
    """Every joint plan of the placement bench sets, as ``planners`` on the path makes it."""
    from backstop_testkit.cases.placement import cases as placement_cases
    from planners.placement import NodePool, plan_joint

    out = []
    for case in placement_cases(False):
        graph = case.build()
        for bound in (1.0, 1.5):
            for algorithm in ("auto", "rtap-bf"):
                p = plan_joint(
                    graph, NodePool.uniform(1.0), bound=bound, algorithm=algorithm, time_limit=10.0
                )
                plan = [sorted(p.assignment.items()), sorted(p.backups or ())]
                out.append([case.name, bound, algorithm, p.nodes_used, len(p.backups or ()), plan])
    json.dump(out, sys.stdout)


def compare_sets(base: Path) -> str:
    """One line: how the joint plans of the placement bench sets compare with ``base``'s."""
    got = []
    for tree in (ROOT, base):
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'operator'}"}
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child-sets"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        got.append(json.loads(proc.stdout))
    new, old = got
    same = sum(1 for a, b in zip(new, old, strict=True) if a[5] == b[5])
    nodes = sum(a[3] for a in new) / sum(b[3] for b in old)
    backups = sum(a[4] for a in new) / sum(b[4] for b in old)
    return (
        f"On the placement bench sets (`bench/bench_placement.py`'s Joint plan table, "
        f"`plan_joint` auto and rtap-bf at R = 1 and 1.5, budget 10): {same} of {len(new)} "
        f"plans are the same as the old code's (assignment and backups); total nodes new / old "
        f"{nodes:.2f}, total backups new / old {backups:.2f}."
    )


# ------------------------------------------------------------------ the parent


def cases(bound_10k: float) -> list[tuple[str, dict[str, Any], int]]:
    """(name, StreamTopology spec, nodes) for each case."""
    from bench.bench_cli import forward_chain, many_operators
    from bench.opharness import chain_topology

    big = chain_topology("big", "bench", (50, 200, 200, 50), cpu="150m", bound=1.5)["spec"]
    mid = many_operators(20)["spec"]
    many = many_operators()["spec"]
    chain = forward_chain()["spec"]
    for spec in (mid, many, chain):
        spec["recoveryLatencyBound"] = bound_10k
    return [
        ("500 tasks", big, 12),
        ("20 × 100 operators", mid, 32),
        ("100 × 100 operators", many, 160),
        ("10 × 1,000 forward", chain, 160),
    ]


def run_tree(
    tree: Path, spec: dict[str, Any], nodes: int, node_cpu: float, budget: float, repeats: int
) -> dict[str, Any]:
    """Plan in a fresh process whose ``planners`` and ``backstop`` come from ``tree``."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'operator'}"}
    req = {"spec": spec, "nodes": nodes, "node_cpu": node_cpu, "budget": budget, "repeats": repeats}
    before = load()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child"],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"planning with {tree} failed: {proc.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    out["load"] = f"{before}–{load()}"
    return out


def judge(spec: dict[str, Any], nodes: int, node_cpu: float, out: dict[str, Any]) -> dict[str, Any]:
    """Check a plan with this tree's failure-effect evaluator; its size and worst ``H``."""
    from backstop.domain.spec import expand, parse_spec
    from planners.evaluate import check_plan, worst_node_failure

    model = parse_spec(spec)
    graph = expand(model)
    bound = model.planning_bound
    capacity = {f"n{i:03d}": node_cpu for i in range(nodes)}
    bad = check_plan(
        graph,
        bound=bound,
        backups=out["backups"],
        assignment=out["assignment"],
        capacity=capacity,
    )
    worst, _ = worst_node_failure(graph, out["backups"], out["assignment"])
    return {
        "tasks": len(graph),
        "edges": len(graph.edges),
        "bound": bound,
        "secs": statistics.median(out["secs"]),
        "cpu": statistics.median(out["cpu"]),
        "nodes": len(set(out["assignment"].values())),
        "backups": len(out["backups"]),
        "worst": worst,
        "valid": "yes" if not bad else f"NO: {bad[0].message}",
        "plan": hashlib.sha256(
            json.dumps([sorted(out["assignment"].items()), out["backups"]]).encode()
        ).hexdigest()[:8],
        "load": out["load"],
    }


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _ratio(new: float, old: float) -> str:
    return f"{new / old:.2f}" if old else "—"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-sets", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--sets-only", action="store_true", help="Only compare the placement bench sets (--base)."
    )
    parser.add_argument("--base", type=Path, help="A baseline tree to compare with.")
    parser.add_argument("--base-label", default="base", help="What the baseline is (a commit).")
    parser.add_argument("--node-cpu", type=float, default=8.0)
    parser.add_argument("--bound-10k", type=float, default=3.0, help="Bound of the 10k cases (s).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs per plan (median).")
    parser.add_argument(
        "--budgets", default="0.1,0.3,10", help="Extra budgets (nominal s) for the anytime table."
    )
    parser.add_argument("--only", help="Run only the cases whose name contains this.")
    parser.add_argument(
        "--base-cases",
        help="Run the baseline only on the cases whose name contains one of these (a,b).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    return parser


def _case_trees(
    args: argparse.Namespace, name: str, spec: dict[str, Any], nodes: int, rows: list[list[str]]
) -> dict[str, dict[str, Any]]:
    """Plan one case with the operator's budget on every tree; its rows into ``rows``."""
    trees = [("new", ROOT)] + ([("old", args.base.resolve())] if args.base else [])
    res: dict[str, dict[str, Any]] = {}
    for label, tree in trees:
        if (
            label == "old"
            and args.base_cases
            and not any(c in name for c in args.base_cases.split(","))
        ):
            continue
        repeats = args.repeats if label == "new" else 1
        log(f"{name}: {label} ({tree}), budget {OPERATOR_BUDGET:g}, load {load()}")
        res[label] = judge(
            spec,
            nodes,
            args.node_cpu,
            run_tree(tree, spec, nodes, args.node_cpu, OPERATOR_BUDGET, repeats),
        )
        r = res[label]
        log(
            f"    {r['secs']:.2f}s (cpu {r['cpu']:.2f}s) nodes {r['nodes']} "
            f"backups {r['backups']} worst {r['worst']:g}/{r['bound']:g} valid {r['valid']}"
        )
        rows.append(
            [
                name,
                f"{r['tasks']} / {r['edges']}",
                label,
                f"{r['secs']:.2f}",
                f"{r['cpu']:.2f}",
                str(r["nodes"]),
                str(r["backups"]),
                f"{r['worst']:g} / {r['bound']:g}",
                r["valid"],
                r["load"],
            ]
        )
    return res


def _ratio_row(name: str, new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    return [
        name,
        "",
        "new / old",
        _ratio(new["secs"], old["secs"]),
        _ratio(new["cpu"], old["cpu"]),
        _ratio(new["nodes"], old["nodes"]),
        _ratio(new["backups"], old["backups"]),
        "",
        "same plan" if new["plan"] == old["plan"] else "other plan",
        "",
    ]


def _anytime_rows(
    args: argparse.Namespace, name: str, spec: dict[str, Any], nodes: int
) -> list[list[str]]:
    """The current tree's plans of one case with the extra budgets."""
    anytime: list[list[str]] = []
    for budget in [float(b) for b in args.budgets.split(",") if b]:
        log(f"{name}: new, budget {budget:g}, load {load()}")
        r = judge(spec, nodes, args.node_cpu, run_tree(ROOT, spec, nodes, args.node_cpu, budget, 1))
        anytime.append(
            [
                name,
                f"{budget:g}",
                f"{r['secs']:.2f}",
                f"{r['cpu']:.2f}",
                str(r["nodes"]),
                str(r["backups"]),
                f"{r['worst']:g} / {r['bound']:g}",
                r["valid"],
                r["load"],
            ]
        )
    return anytime


def _render(
    args: argparse.Namespace, machine: str, rows: list[list[str]], anytime: list[list[str]]
) -> str:
    base = f" against `{args.base_label}`" if args.base else ""
    flags = " --base DIR" if args.base else ""
    flags += f" --base-cases '{args.base_cases}'" if args.base and args.base_cases else ""
    flags += f" --repeats {args.repeats} --budgets {args.budgets}"
    return "\n".join(
        [
            HEADING,
            "",
            f"Generated by `python bench/bench_scale_plan.py{flags} --out`"
            f"{base} on {machine}. `s` is the wall time and `cpu s` "
            "the CPU time (less sensitive to the load; 2 cores shared by several people) of "
            "`plan_topology` (the joint plan, the migration check and the evaluator's checks: what "
            "a reconcile waits on) with the operator's budget of 3 nominal seconds, median of "
            f"{args.repeats} runs for `new` (1 for `old`), each tree in its own process; `load` "
            "is the 1-minute load average before–after (the machine is shared). Every plan is "
            "re-checked here by the failure-effect evaluator (`valid`); `worst` is the worst "
            "single-node failure's H against the bound.",
            "",
            _table(
                [
                    "case",
                    "tasks / edges",
                    "code",
                    "s",
                    "cpu s",
                    "nodes",
                    "backups",
                    "worst / bound",
                    "valid",
                    "load",
                ],
                rows,
            ),
            "",
            "### Anytime: the current code with other budgets (nominal seconds)",
            "",
            _table(
                [
                    "case",
                    "budget",
                    "s",
                    "cpu s",
                    "nodes",
                    "backups",
                    "worst / bound",
                    "valid",
                    "load",
                ],
                anytime,
            ),
            "",
            *([compare_sets(args.base.resolve()), ""] if args.base else []),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.child:
        child()
        return 0
    if args.child_sets:
        sys.path.append(str(ROOT))  # bench.* of the tree on PYTHONPATH first
        child_sets()
        return 0
    sys.path.insert(0, str(ROOT))
    if args.sets_only:
        if args.base is None:
            parser.error("--sets-only needs --base")
        print(compare_sets(args.base.resolve()))
        return 0
    from backstop_testkit.support.docsection import write_section
    from bench.bench_cli import machine

    rows: list[list[str]] = []
    anytime: list[list[str]] = []
    for name, spec, nodes in cases(args.bound_10k):
        if args.only and args.only not in name:
            continue
        res = _case_trees(args, name, spec, nodes, rows)
        if "old" in res:
            rows.append(_ratio_row(name, res["new"], res["old"]))
        anytime += _anytime_rows(args, name, spec, nodes)
    text = _render(args, machine(), rows, anytime)
    print(text)
    if args.out:
        write_section(args.out, HEADING, text, command=COMMAND)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
