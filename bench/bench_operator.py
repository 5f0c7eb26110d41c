#!/usr/bin/env python3
"""Benchmark the operator from ``kubectl apply`` to running pods.

Why: the target is that a 500-task topology goes from apply (the StreamTopology is
created) to all its pods created in under 10 s on the local control plane, and
that 20 topologies of 50 tasks reconcile concurrently without errors or duplicate
pods. This measures both against the real API server and scheduler, with the
node simulator standing in for kubelets, and shows where the time goes.

Setup (each scenario in its own namespace, node pool and operator process):

* **big**: ``src 50 → map 200 (shuffle) → agg 200 (forward) → sink 50 (shuffle)``,
  500 tasks, 20 200 task edges, 150m CPU each (75 CPU), bound 1.5 s on 12 × 8-CPU
  nodes. Timeline from API watches: the plan in the status, the first/last pod
  ADDED, all bound (the scheduler), all Running (the simulator), Ready=True. The
  planner's share is timed separately: ``plan_topology`` on the same 12 empty
  nodes, in this process, after the run.
* **fleet**: 20 topologies ``5 → 20 → 20 → 5`` (50 tasks, 50m CPU each), created
  back to back on one pool of 16 × 8-CPU nodes (100 of 128 CPU). Checks: exactly one pod per task
  and one pod object per name (no uid created twice), no warning/error lines in the
  operator log, every topology Ready.

Prints a markdown section to stdout (progress to stderr); ``--out`` writes its
page, ``docs/benchmarks/operator.md`` (``--scenario fleet-loss``: ``operator-fleet-loss.md``;
``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.planning import plan_topology
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_testkit.support.docsection import emit
from bench.opharness import (
    DEFAULT_KUBECONFIG,
    bench,
    chain_topology,
    fmt_s,
    log,
    log_time,
    operator_log,
    problems,
)
from bench.opmeasure import (
    SMALL,
    dup_text,
    duplicates,
    median,
    problem_lines,
    sub,
    timeline,
    wait_until,
)
from planners.placement import Node

HEADING = "## Operator: apply to pods"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "operator.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_operator.py --out"
FLEET_LOSS_PAGE = PAGE.with_name("operator-fleet-loss.md")
"""The page of ``--scenario fleet-loss`` (``--out`` with no path writes it)."""
BIG = (50, 200, 200, 50)


def run_big(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    name = "big"
    tasks = sum(BIG)
    out: dict[str, Any] = {"tasks": tasks}
    with bench(args.kubeconfig, workdir) as b:
        doc = chain_topology(name, b.pool, BIG, cpu=args.cpu, bound=args.bound)
        nodes = [b.add_node(str(args.node_cpu)) for _ in range(args.nodes)]
        b.wait_nodes_ready(nodes)
        pods = b.watch_pods()
        topos = b.watch_topologies()
        b.start_operator()
        log(f"big: applying a {tasks}-task topology on {args.nodes} x {args.node_cpu} CPU")
        t0 = time.time()
        b.create_topology(doc)
        out["t_create_call"] = time.time() - t0
        wait_until(lambda: topos.get(name).ready is not None, args.timeout, "big: Ready=True")
        out.update(timeline(t0, name, tasks, pods, topos))
        records = operator_log(b.log_path)
        out["problems"] = problems(records)
        for r in records:
            msg = str(r.get("message"))
            if "pods:" in msg and "created" in msg and (r.get("object") or {}).get("name") == name:
                t = log_time(r)
                out.setdefault("log_pods_done", None if t is None else t - t0)
        obj = b.get_topology(name)
        plan = (obj.get("status") or {}).get("plan") or {}
        out["nodes_used"] = plan.get("nodesUsed")
        out["backups"] = plan.get("backupCount")
        out["worst"] = plan.get("worstRecoveryLatency")
        out["duplicates"] = duplicates(pods, name, tasks)
    # the planner's share, on the same nodes, with the operator's budget
    model = parse_spec(doc["spec"])
    graph = expand(model)
    empty = [Node(name=f"n{i}", cpu=float(args.node_cpu)) for i in range(args.nodes)]
    runs = []
    for _ in range(args.plan_repeats):
        t = time.perf_counter()
        plan_topology(model, graph, empty)
        runs.append(time.perf_counter() - t)
    out["plan_offline"] = statistics.median(runs)
    out["edges"] = sum(len(p) for p in graph.preds)
    return out


def run_fleet(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tasks = sum(SMALL)
    names = [f"fleet-{i:02d}" for i in range(args.fleet)]
    out: dict[str, Any] = {"topologies": args.fleet, "tasks": tasks}
    with bench(args.kubeconfig, workdir) as b:
        nodes = [b.add_node(str(args.node_cpu)) for _ in range(args.fleet_nodes)]
        b.wait_nodes_ready(nodes)
        pods = b.watch_pods()
        topos = b.watch_topologies()
        b.start_operator()
        log(f"fleet: applying {args.fleet} topologies of {tasks} tasks at once")
        t0 = time.time()
        for n in names:
            b.create_topology(
                chain_topology(n, b.pool, SMALL, cpu=args.fleet_cpu, bound=args.bound)
            )
        out["t_create_calls"] = time.time() - t0
        wait_until(
            lambda: all(topos.get(n).ready is not None for n in names),
            args.timeout,
            "fleet: every topology Ready",
        )
        lines = {n: timeline(t0, n, tasks, pods, topos) for n in names}
        out["per_topology"] = lines
        out["ready_count"] = sum(1 for v in lines.values() if v["ready"] is not None)
        dups = [duplicates(pods, n, tasks) for n in names]
        out["duplicates"] = {k: sum(d[k] for d in dups) for k in dups[0]}
        out["problems"] = problems(operator_log(b.log_path))
        pods_now = b.core.list_namespaced_pod(b.namespace).items
        out["not_running"] = sum(1 for p in pods_now if p.status.phase != "Running")
        out["unbound"] = sum(1 for p in pods_now if not p.spec.node_name)
        # what the plans put on each node, summed over the topologies, vs allocatable
        planned: dict[str, float] = {}
        weight = cpu_cores(args.fleet_cpu)
        for n in names:
            plan = (b.get_topology(n).get("status") or {}).get("plan") or {}
            for node in (plan.get("assignment") or {}).values():
                planned[node] = planned.get(node, 0.0) + weight
        out["planned_max"] = max(planned.values(), default=0.0)
        out["overcommitted"] = {
            node: round(cpu, 2) for node, cpu in planned.items() if cpu > args.node_cpu + 1e-9
        }
        out["nodes_planned"] = len(planned)
        reasons: Counter[str] = Counter()
        for n in names:
            for c in (b.get_topology(n).get("status") or {}).get("conditions") or []:
                if c.get("type") == "Ready" and c.get("status") != "True":
                    reasons[f"{c.get('reason')}: {c.get('message', '')[:60]}"] += 1
        out["not_ready"] = dict(reasons)
    return out


def render(
    args: argparse.Namespace, big: dict[str, Any] | None, fleet: dict[str, Any] | None
) -> str:
    lines = [
        HEADING,
        "",
        "Generated by `python bench/bench_operator.py --out` against the "
        "local control plane (kube-apiserver, scheduler and controller-manager v1.20, "
        "2 cores, simulated nodes). Times are seconds after the `StreamTopology` is "
        "created, seen through API watches.",
        "",
    ]
    if big is not None:
        lines += _big_lines(args, big)
    if fleet is not None:
        lines += _fleet_lines(args, fleet)
    return "\n".join(lines)


def _big_lines(args: argparse.Namespace, big: dict[str, Any]) -> list[str]:
    """The big topology: its milestones and where the time goes."""
    ok = big["all_pods"] is not None and big["all_pods"] < 10
    lines = [
        f"### {big['tasks']} tasks ({big['edges']} task edges, {args.cpu} CPU each, "
        f"bound {args.bound:g} s) on {args.nodes} × {args.node_cpu}-CPU nodes",
        "",
        "| milestone | s after apply |",
        "|---|---|",
        f"| plan recorded in the status (Kopf pick-up + node/pod view + planning + "
        f"status write) | {fmt_s(big['planned'])} |",
        f"| first pod created | {fmt_s(big['first_pod'])} |",
        f"| **all {big['tasks']} pods created** (target < 10 s) | "
        f"**{fmt_s(big['all_pods'])}** ({'meets' if ok else 'misses'}) |",
        f"| all pods bound by the scheduler | {fmt_s(big['all_bound'])} |",
        f"| all pods Running (node simulator) | {fmt_s(big['all_running'])} |",
        f"| `Ready` condition True | {fmt_s(big['ready'])} |",
        "",
        "Where the time goes:",
        "",
        "| part | s |",
        "|---|---|",
        f"| planning: `plan_topology` on the same {args.nodes} empty nodes, in-process "
        f"(median of {args.plan_repeats}) | {fmt_s(big['plan_offline'])} |",
        f"| apply → plan recorded, other than planning | "
        f"{fmt_s(None if big['planned'] is None else big['planned'] - big['plan_offline'])} |",
        f"| plan recorded → all pods created (API writes) | "
        f"{fmt_s(sub(big['all_pods'], big['planned']))} |",
        f"| all created → all bound (scheduler) | "
        f"{fmt_s(sub(big['all_bound'], big['all_pods']))} |",
        f"| all bound → Ready (kubelet stand-in + status) | "
        f"{fmt_s(sub(big['ready'], big['all_bound']))} |",
        "",
        f"Plan: {big['nodes_used']} nodes, {big['backups']} backups, worst single-node "
        f"recovery {big['worst']} s. Duplicates: {dup_text(big['duplicates'])}. "
        f"Operator log warnings/errors: {len(big['problems'])}.",
        "",
    ]
    lines += problem_lines(big["problems"])
    return lines


def _fleet_lines(args: argparse.Namespace, fleet: dict[str, Any]) -> list[str]:
    """The fleet of topologies created back to back."""
    per = fleet["per_topology"]
    ready = [v["ready"] for v in per.values() if v["ready"] is not None]
    created = [v["all_pods"] for v in per.values() if v["all_pods"] is not None]
    n = fleet["topologies"]
    lines = [
        f"### {n} topologies × {fleet['tasks']} tasks ({args.fleet_cpu} CPU each), "
        f"created back to back on {args.fleet_nodes} × {args.node_cpu}-CPU nodes",
        "",
        "| measure | value |",
        "|---|---|",
        f"| topologies Ready | {fleet['ready_count']}/{n} |",
        f"| all pods of every topology created | "
        f"{fmt_s(max(created) if len(created) == n else None)} s |",
        f"| every topology Ready | {fmt_s(max(ready) if len(ready) == n else None)} s |",
        f"| Ready, median / first | {fmt_s(median(ready))} / {fmt_s(min(ready, default=None))} s |",
        f"| duplicate pods | {dup_text(fleet['duplicates'])} |",
        f"| pods not Running at the end (of which never bound) | {fleet['not_running']} "
        f"({fleet['unbound']}) |",
        f"| nodes the plans use / over-committed by the plans together | "
        f"{fleet['nodes_planned']} / {len(fleet['overcommitted'])} (most planned on one "
        f"node: {fleet['planned_max']:.2f} of {args.node_cpu} CPU) |",
        f"| operator log warnings/errors | {len(fleet['problems'])} |",
        "",
    ]
    if fleet["not_ready"]:
        lines += ["Topologies not Ready at the end:", ""]
        lines += [f"- {c}× `{r}`" for r, c in fleet["not_ready"].items()]
        lines.append("")
    lines += problem_lines(fleet["problems"])
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", default=str(DEFAULT_KUBECONFIG))
    p.add_argument("--scenario", choices=["big", "fleet", "both", "fleet-loss"], default="both")
    p.add_argument("--nodes", type=int, default=12, help="nodes of the big scenario")
    p.add_argument("--node-cpu", type=int, default=8, help="CPU of every node")
    p.add_argument("--cpu", default="150m", help="CPU request of a task (big)")
    p.add_argument("--bound", type=float, default=1.5, help="recovery latency bound, s")
    p.add_argument("--fleet", type=int, default=20, help="topologies of the fleet scenario")
    p.add_argument("--fleet-nodes", type=int, default=16)
    p.add_argument("--fleet-cpu", default="100m", help="CPU request of a task (fleet)")
    p.add_argument("--plan-repeats", type=int, default=3)
    p.add_argument("--fleet-loss", type=int, default=100, help="topologies (fleet-loss)")
    p.add_argument("--loss-nodes", type=int, default=100, help="nodes (fleet-loss)")
    p.add_argument("--touch", type=int, default=20, help="topologies the loss touches")
    p.add_argument("--grace", type=float, default=1.0, help="gracePeriodSeconds (fleet-loss)")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for Ready")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    p.add_argument("--profile", type=Path, help="fleet-loss: sample the operator's stacks here")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-"))  # kept: the operator logs
    if args.scenario == "fleet-loss":
        from bench import fleetloss

        section = fleetloss.render(args, fleetloss.run(args, workdir))
        out = FLEET_LOSS_PAGE if args.out == PAGE else args.out
        command = COMMAND.replace(" --out", " --scenario fleet-loss --out")
        return emit(section, out, fleetloss.HEADING, command=command)
    big = run_big(args, workdir) if args.scenario in ("big", "both") else None
    fleet = run_fleet(args, workdir) if args.scenario in ("fleet", "both") else None
    section = render(args, big, fleet)
    return emit(section, args.out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
