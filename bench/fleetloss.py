"""The ``fleet-loss`` scenario of ``bench/bench_operator.py``.

``--fleet-loss`` topologies ``5 → 20 → 20 → 5`` (50 tasks each) are created back to back
on ``--loss-nodes`` simulated nodes and timed until every one is Ready (plan recorded,
all pods created, bound by the scheduler, Running, Ready); then the fewest nodes whose
tasks belong to ``--touch`` topologies are killed at once and each touched topology is
timed from its first lost node's NotReady to its first RecoveryPlan. ``--profile FILE``
samples the operator's threads (``bench/stacksample.py``) for the whole run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from bench.bench_scale import start_operator
from bench.opharness import bench, chain_topology, fmt_s, log, operator_log, problems
from bench.opmeasure import (
    SMALL,
    dup_text,
    duplicates,
    median,
    problem_lines,
    sub,
    sum_dups,
    timeline,
    wait_until,
)

HEADING = "## Operator: a fleet of topologies and a node loss"
CONFLICT = "planning again in the booking"
"""The operator's log line when an optimistic plan's room was taken (ledger.plan_and_book)."""
PHASES = [
    ("planned", "plan recorded in the status"),
    ("all_pods", "all its pods created"),
    ("all_bound", "all bound (scheduler)"),
    ("all_running", "all Running (node simulator)"),
    ("ready", "**Ready** (target: every topology < 60 s)"),
]


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _create_fleet(
    args: argparse.Namespace, b: Any, names: list[str], pods: Any, topos: Any, out: dict[str, Any]
) -> None:
    """Create every topology at once, wait until all are Ready; their timelines."""
    tasks = sum(SMALL)
    recovery = {"gracePeriodSeconds": args.grace, "mode": "incremental"}
    out["load_start"] = _load()
    t0 = time.time()
    for n in names:
        doc = chain_topology(
            n, b.pool, SMALL, cpu=args.fleet_cpu, bound=args.bound, recovery=recovery
        )
        b.create_topology(doc)
    out["t_create_calls"] = time.time() - t0
    wait_until(lambda: all(topos.get(n).ready is not None for n in names), args.timeout, "Ready")
    out["load_ready"] = _load()
    lines = [timeline(t0, n, tasks, pods, topos) for n in names]
    out["phases"] = {key: [ln[key] for ln in lines] for key, _ in PHASES}
    out["duplicates"] = sum_dups([duplicates(pods, n, tasks) for n in names])


def _kill_cover(
    args: argparse.Namespace, b: Any, names: list[str], node_rec: Any, out: dict[str, Any]
) -> tuple[list[str], set[str], dict[str, set[str]], float]:
    """Kill the nodes that cover ``--touch`` topologies.

    Returns the victims, the topologies they touch, the topologies per node and the
    time of the kill.
    """
    on_node: dict[str, set[str]] = {}
    for n in names:
        plan = (b.get_topology(n).get("status") or {}).get("plan") or {}
        for node in (plan.get("assignment") or {}).values():
            on_node.setdefault(node, set()).add(n)
    out["nodes_used"] = len(on_node)
    hosted = {node: set(topos) for node, topos in on_node.items()}
    victims, touched = _cover(on_node, args.touch)
    out["victims"], out["touched"] = victims, sorted(touched)
    for v in victims:
        node_rec.get(v).armed = True
    time.sleep(2)  # let the fleet settle (conditions, first supervise rounds)
    out["load_kill"] = _load()
    t_kill = time.time()
    for v in victims:
        b.sim.kill(v)
    log(f"fleet-loss: killed {victims}, touching {len(touched)} topologies")
    return victims, touched, hosted, t_kill


def _first_plans(
    args: argparse.Namespace,
    node_rec: Any,
    plan_rec: Any,
    kill: tuple[list[str], set[str], dict[str, set[str]], float],
    out: dict[str, Any],
) -> None:
    """Wait for every touched topology's first plan; each one's latency from its loss."""
    victims, touched, hosted, t_kill = kill

    def firsts() -> dict[str, float]:
        got: dict[str, float] = {}
        for p in plan_rec.ordered():
            topo = str(p.spec.get("topology"))
            if topo in touched and p.seen > t_kill:
                got.setdefault(topo, p.seen)
        return got

    # the node controller marks the victims NotReady in passes some seconds apart
    wait_until(lambda: all(node_rec.get(v).not_ready_seen for v in victims), 180, "NotReady")
    wait_until(lambda: len(firsts()) == len(touched), 60 + args.grace, "every first plan")
    out["load_end"] = _load()
    seen = {v: node_rec.get(v).not_ready_seen for v in victims}
    out["kill_to_notready"] = sub(max((t for t in seen.values() if t), default=None), t_kill)
    first = firsts()
    out["plans"] = len(first)
    lost_at = {  # each topology from the moment its first lost node was seen NotReady
        topo: min((t for v, t in seen.items() if t and topo in hosted[v]), default=None)
        for topo in touched
    }
    out["first_plans"] = sorted(
        t - at for topo, t in first.items() if (at := lost_at[topo]) is not None
    )


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Create the fleet, wait for Ready, kill the covering nodes, time the first plans."""
    from backstop.domain.constants import GROUP, VERSION
    from bench.bench_operator_recovery import NodeRecorder, PlanRecorder
    from bench.opharness import POOL_LABEL

    tasks = sum(SMALL)
    names = [f"fl-{i:03d}" for i in range(args.fleet_loss)]
    out: dict[str, Any] = {"topologies": len(names), "tasks": tasks, "nodes": args.loss_nodes}
    with bench(args.kubeconfig, workdir) as b:
        nodes = [b.add_node(str(args.node_cpu)) for _ in range(args.loss_nodes)]
        b.wait_nodes_ready(nodes, timeout=300)
        pods = b.watch_pods()
        topos = b.watch_topologies()
        node_rec, plan_rec = NodeRecorder(), PlanRecorder()
        b.watch(b.core.list_node, (), node_rec, label_selector=f"{POOL_LABEL}={b.pool}")
        b.watch(
            b.custom.list_namespaced_custom_object,
            (GROUP, VERSION, b.namespace, "recoveryplans"),
            plan_rec,
        )
        start_operator(b, args)
        log(f"fleet-loss: {len(names)} topologies of {tasks} tasks on {len(nodes)} nodes")
        _create_fleet(args, b, names, pods, topos, out)
        kill = _kill_cover(args, b, names, node_rec, out)
        _first_plans(args, node_rec, plan_rec, kill, out)
        records = operator_log(b.log_path)
        out["problems"] = problems(records)
        out["conflicts"] = sum(1 for r in records if CONFLICT in str(r.get("message", "")))
        out["rss_peak_mib"] = _peak_rss(b)
    return out


def _cover(on_node: dict[str, set[str]], want: int) -> tuple[list[str], set[str]]:
    """The fewest nodes (greedily) whose topologies together number ``want`` or more."""
    victims: list[str] = []
    touched: set[str] = set()
    while len(touched) < want and on_node:
        node = max(sorted(on_node), key=lambda n: len(on_node[n] - touched))
        if not on_node[node] - touched:
            break
        victims.append(node)
        touched |= on_node.pop(node)
    return victims, touched


def _peak_rss(b: Any) -> float | None:
    """The operator process's peak resident memory (``VmHWM``), MiB."""
    try:
        for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, AttributeError):
        return None
    return None


def render(args: argparse.Namespace, r: dict[str, Any], notes: list[str] | None = None) -> str:
    """The section: the fleet's phases (last / median / first topology), then the loss."""
    n = r["topologies"]
    firsts = r["first_plans"]
    rows = []
    for key, label in PHASES:
        got = [t for t in r["phases"][key] if t is not None]
        last = max(got) if len(got) == n else None
        cell = f"{fmt_s(last)} / {fmt_s(median(got))} / {fmt_s(min(got, default=None))}"
        rows.append(f"| {label} | {len(got)}/{n} | {cell} |")
    lines = [
        HEADING,
        "",
        "Generated by `python bench/bench_operator.py --scenario fleet-loss --out` "
        "(local control plane v1.20, 2 cores shared, simulated nodes; "
        "the scheduler at `--kube-api-qps=300 --kube-api-burst=600`, the controller-manager "
        "at 100/200). Load average (1/5/15 min): at the start "
        f"{r['load_start']}, all Ready {r['load_ready']}, at the kill {r['load_kill']}, "
        f"at the end {r['load_end']}.",
        "",
        f"### {n} topologies × {r['tasks']} tasks ({args.fleet_cpu} CPU each), created back "
        f"to back on {r['nodes']} × {args.node_cpu}-CPU nodes",
        "",
        "Seconds after the first create call, per topology: the last (every topology), the "
        "median and the first.",
        "",
        "| phase | topologies | last / median / first (s) |",
        "|---|---|---|",
        *rows,
        "",
        f"Nodes used: {r['nodes_used']}. Duplicate pods: {dup_text(r['duplicates'])}. "
        f"Plans made outside the booking and made again in it (conflicts): {r['conflicts']}. "
        f"Operator peak RSS (VmHWM): {fmt_s(r['rss_peak_mib'])} MiB.",
        "",
        f"### Node loss touching {len(r['touched'])} topologies",
        "",
        f"{len(r['victims'])} nodes killed at once (the fewest whose tasks belong to "
        f"{args.touch}+ topologies), `gracePeriodSeconds` {args.grace}.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| kill → last victim NotReady (node controller) | {fmt_s(r['kill_to_notready'])} s |",
        f"| topologies with a first RecoveryPlan | {r['plans']}/{len(r['touched'])} |",
        f"| its first lost node NotReady → a topology's first plan: first / median / last | "
        f"{fmt_s(min(firsts, default=None))}"
        f" / {fmt_s(median(firsts))} / {fmt_s(max(firsts, default=None))} s |",
        f"| **NotReady + grace → first plan, the slowest topology** (target < 2 s) | "
        f"**{fmt_s(max(firsts) - args.grace if firsts else None)} s** |",
        f"| operator log warnings/errors | {len(r['problems'])} |",
        "",
    ]
    return "\n".join([*lines, *problem_lines(r["problems"]), *(notes or [])])
