#!/usr/bin/env python3
"""Benchmark restoring the bound after a node loss: moved pods, steps, planning time.

Why: when a replacement node arrives after a recovery that broke the bound, the
operator re-plans with the minimum-migration search of :mod:`planners.restore`, moved
in small batches; the simpler alternative is a fresh placement whose node groups are
renamed onto the nodes where most of their tasks ran (``relabel_nodes``). This
measures, per instance: how many tasks each approach moves, whether CP-SAT proved
the fewest, how many restore steps the batches take (every step checked: the worst
single-node recovery never gets worse), and the planning time.

Setup per instance: a joint plan (backups and placement) on ``k`` equal nodes,
the node with the most tasks lost, its tasks recovered first-fit onto the
survivors (as a recovery does, availability first), then one replacement node
of the same size. Instances whose crowded placement still keeps the bound are
skipped (nothing to restore).

Prints a markdown section to stdout. ``--out`` writes its page,
``docs/benchmarks/restore.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.cases.topologies import lines, twitter_sentiment
from backstop_testkit.support.docsection import write_section
from planners import Infeasible, TaskGraph
from planners.evaluate import check_plan, worst_node_failure
from planners.migration import relabel_nodes
from planners.placement import Node, NodePool, place, plan_joint
from planners.restore import plan_restore

HEADING = "## Restoring the bound"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "restore.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_restore.py --out"
BUDGET = 2.0  # the operator's RESTORE_TIME_LIMIT


def crowd(
    graph: TaskGraph, nodes: list[Node], assignment: dict[str, str], cap: float
) -> tuple[dict[str, str], str] | None:
    """Lose the busiest node; put its tasks first-fit on the survivors (``None``: no room)."""
    count: dict[str, int] = {}
    for n in assignment.values():
        count[n] = count.get(n, 0) + 1
    victim = max(sorted(count), key=lambda n: count[n])
    load = {n.name: 0.0 for n in nodes if n.name != victim}
    for t, n in assignment.items():
        if n != victim:
            load[n] += graph.weight[graph.index(t)]
    out = dict(assignment)
    for t in graph.tasks:
        if assignment[t] != victim:
            continue
        w = graph.weight[graph.index(t)]
        room = [
            n
            for n in sorted(load)
            if load[n] + w <= cap * next(x.cpu for x in nodes if x.name == n) + 1e-9
        ]
        if not room:
            return None
        out[t] = room[0]
        load[room[0]] += w
    return out, victim


def run(name: str, graph: TaskGraph, k: int, cpu: float, bound: float) -> dict[str, object] | None:
    nodes = [Node(f"n{j}", cpu) for j in range(k)]
    try:
        joint = plan_joint(graph, NodePool.of(nodes), bound=bound, time_limit=BUDGET)
    except Infeasible:
        return None
    backups = list(joint.backups or [])
    crowded = crowd(graph, nodes, dict(joint.assignment), cap=1.0)
    if crowded is None:
        return None
    current, victim = crowded
    before = worst_node_failure(graph, backups, current)[0]
    if before <= bound + 1e-9:
        return None
    now = [n for n in nodes if n.name != victim] + [Node("replacement", cpu)]
    capacity = {n.name: n.cpu for n in now}
    t0 = time.perf_counter()
    fresh = place(graph, NodePool.of(now), bound=bound, backups=backups, time_limit=BUDGET)
    old = relabel_nodes(fresh, graph, now, current)
    t_old = time.perf_counter() - t0
    t0 = time.perf_counter()
    rp = plan_restore(graph, now, current, bound=bound, backups=backups, time_limit=BUDGET)
    t_new = time.perf_counter() - t0
    assert not check_plan(
        graph, bound=bound, backups=backups, assignment=rp.assignment, capacity=capacity
    )
    assert not check_plan(graph, bound=bound, backups=backups, assignment=old, capacity=capacity)
    state, prev = dict(current), before
    for step in rp.steps:  # every step checked through the evaluator
        state.update(step.moves)
        worst = worst_node_failure(graph, backups, state)[0]
        assert worst <= prev + 1e-9
        prev = worst
    return {
        "name": name,
        "tasks": len(graph),
        "nodes": f"{k} x {cpu:g}",
        "bound": bound,
        "before": before,
        "old": sum(1 for t in graph.tasks if current[t] != old[t]),
        "new": len(rp.moved),
        "proven": rp.proven,
        "steps": len(rp.steps),
        "t_old": t_old,
        "t_new": t_new,
    }


def instances() -> list[tuple[str, TaskGraph, int, float, float]]:
    def chains(p: int) -> TaskGraph:
        stages = [("src", 0.5), ("parse", 1.0), ("score", 1.5), ("sink", 1.0)]
        tasks = [f"{s}-{i}" for s, _ in stages for i in range(p)]
        edges = [
            (f"{a}-{i}", f"{b}-{i}")
            for (a, _), (b, _) in itertools.pairwise(stages)
            for i in range(p)
        ]
        lat = dict(stages)
        return TaskGraph.build(
            tasks, edges, latency={t: lat[t.rsplit("-", 1)[0]] for t in tasks},
            weight=dict.fromkeys(tasks, 0.25),
        )  # fmt: skip

    def weighted(g: TaskGraph, w: float) -> TaskGraph:
        return TaskGraph.build(
            list(g.tasks),
            [(g.tasks[u], g.tasks[v]) for v in range(len(g)) for u in g.preds[v]],
            latency=dict(zip(g.tasks, g.latency, strict=True)),
            weight=dict.fromkeys(g.tasks, w),
        )

    return [
        ("chains x3 (the cluster test)", chains(3), 2, 4.0, 2.5),
        ("chains x8", chains(8), 2, 8.0, 2.5),
        ("chains x16", chains(16), 2, 16.0, 2.5),
        ("lines 4 x 5", weighted(lines(4, 5), 0.25), 3, 4.0, 3.0),
        ("lines 8 x 6", weighted(lines(8, 6), 0.25), 4, 4.0, 3.0),
        ("twitter sentiment (10, 8, 8)", weighted(twitter_sentiment(10, 8, 8), 0.25), 4, 3.0, 3.0),
        (
            "twitter sentiment (20, 12, 12)",
            weighted(twitter_sentiment(20, 12, 12), 0.25),
            6,
            3.0,
            3.0,
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = parser.parse_args()
    rows = []
    for name, graph, k, cpu, bound in instances():
        print(f"{name} on {k} x {cpu:g}...", file=sys.stderr)
        row = run(name, graph, k, cpu, bound)
        if row is None:
            print("  skipped (infeasible, no room, or the bound still holds)", file=sys.stderr)
            continue
        rows.append(row)
    lines_ = [
        HEADING,
        "",
        f"`python bench/bench_restore.py --out`; planner budget {BUDGET:g} nominal s,",
        "as in the operator. One node of `k` lost, its tasks recovered first-fit onto the",
        "survivors (the bound breaks), one replacement node added. *Renamed",
        "fresh plan* is a fresh placement renamed onto the nodes its groups ran on;",
        "*min-migration* is `planners.restore`",
        "(CP-SAT; *proven* = the fewest moves proven), moved in batches of 2, every step checked",
        "with the evaluator to be no worse than the one before.",
        "",
        "| instance | tasks | nodes | bound (s) | worst before (s) | moved: renamed fresh plan "
        "| moved: min-migration | proven | steps | plan time: fresh (s) "
        "| plan time: min-migration (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines_.append(
            f"| {r['name']} | {r['tasks']} | {r['nodes']} | {r['bound']:g} | {r['before']:g} | "
            f"{r['old']} | {r['new']} | {'yes' if r['proven'] else 'no'} | {r['steps']} | "
            f"{r['t_old']:.2f} | {r['t_new']:.2f} |"
        )
    section = "\n".join(lines_) + "\n"
    print(section)
    if args.out:
        write_section(args.out, HEADING, section, command=COMMAND)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
