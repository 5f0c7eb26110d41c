#!/usr/bin/env python3
"""The supervisor's per-tick work and the first recovery decision at 10k tasks, in-process.

Why: ``bench_scale.py`` measures the whole loop against the API server, and on a shared
2-core host its figures are mostly the host's load. This measures the operator's own
share with no API server: the pure functions one supervision tick runs over a 10k-task
topology with every pod indexed, and :func:`backstop.domain.recovery.decide` for the
loss of the node with the most tasks (what stands between detection and the first
RecoveryPlan besides two writes), plus the sizes of what that tick writes.

The plan is built here, not planned (the planners have their own benchmarks): the first
half of forward chain ``c`` goes to node ``2 (c // chains-per-node)``, its second half to
the next node, every task but the sinks keeps a backup, and the failure-effect
evaluator checks it (:func:`planners.evaluate.check_plan`) before anything is timed.
CPU time (``time.process_time``) is reported next to wall time: the host is shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.controller.memo import TopologyMemo
from backstop.controller.tick import Tick, planned_pods, pod_states, pods_match
from backstop.domain import recovery
from backstop.domain.incidents import NodeInfo
from backstop.domain.spec import StreamTopologySpec, expand, parse_spec
from backstop.domain.status import (
    PlanStatus,
    TopologyStatus,
    derive_conditions,
    parse_status,
    recoveryplans,
    status_patch,
)
from backstop.k8s.manifests import Owner, build_recoveryplan, desired_pods
from backstop.k8s.sessionmap import build_session_configmap
from backstop_testkit.support.docsection import emit
from bench.procstat import loadavg
from planners.evaluate import check_plan
from planners.graph import TaskGraph

HEADING = "## Scale: one supervisor tick at 10k tasks (in-process)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "scale-tick.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_scale_tick.py --out"
TASK = "streams.backstop.dev/task"
NAMES = ["src", "parse", "filter", "enrich", "score", "join", "agg", "rank", "format", "sink"]


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of ``fn`` over ``repeats`` runs, and its last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), out


def size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


@dataclass
class ChainPlan:
    """The built plan over forward chains that the in-process scale benchmarks share."""

    model: StreamTopologySpec
    graph: TaskGraph
    assignment: dict[str, str]
    backups: list[str]
    used: list[str]
    """The nodes the plan uses, sorted: ``used[0]`` holds the most tasks (a full node)."""
    names: list[str]
    """``used`` and the spare nodes."""
    owner: Owner
    plan: PlanStatus
    status: TopologyStatus

    def tick(self, nodes: dict[str, NodeInfo], kube: Any = None, ledger: Any = None) -> Tick:
        """One supervision tick's inputs over this plan (``kube``/``ledger`` as the case needs)."""
        return Tick(
            kube=kube, owner=self.owner, model=self.model, graph=self.graph, generation=1,
            status=self.status, nodes=nodes, emit=lambda *_: None, ledger=ledger,
            memory=TopologyMemo(), resource_version="1",
        )  # fmt: skip

    def running_pods(self) -> list[Mapping[str, Any]]:
        """The plan's pods as the API server would show them: bound and Running."""
        pods = desired_pods(
            self.owner, self.model, self.graph, frozenset(self.backups), self.assignment
        )
        return [
            {
                **p,
                "spec": {**p["spec"], "nodeName": self.assignment[p["metadata"]["labels"][TASK]]},
                "status": {"phase": "Running"},
            }
            for p in pods.values()
        ]


def chain_plan(
    operators: int = 10,
    parallelism: int = 1000,
    chains_per_node: int = 50,
    spare_nodes: int = 8,
    node_cpu: float = 32.0,
) -> ChainPlan:
    """``operators`` operators of ``parallelism`` tasks in forward chains, placed as the
    module docstring says; stops the benchmark if the failure-effect evaluator rejects it."""
    ops = [
        {
            "name": NAMES[i] if i < len(NAMES) else f"op{i}",
            "parallelism": parallelism,
            "resources": {"cpu": "100m", "memory": "32Mi"},
            "reprocessingLatency": 0.5,
            "inputs": [] if i == 0 else [{"operator": NAMES[i - 1], "grouping": "forward"}],
        }
        for i in range(operators)
    ]
    raw_spec = {
        "image": "i",
        "recoveryLatencyBound": 3.0,
        "recovery": {"gracePeriodSeconds": 1, "mode": "incremental"},
        "operators": ops,
    }
    model = parse_spec(raw_spec)
    graph = expand(model)
    # chain c's first half on one node, its second half on the next: a lost node costs
    # at most half a chain of recomputation (its upstream half keeps its buffers)
    order = {name: k for k, name in enumerate(o["name"] for o in ops)}
    half = (operators + 1) // 2
    assignment = {}
    for i, t in enumerate(graph.tasks):
        chain, k = int(t.rsplit("-", 1)[1]), order[graph.operator[i]]
        assignment[t] = f"n{(chain // chains_per_node) * 2 + (k >= half):03d}"
    used = sorted(set(assignment.values()))
    names = used + [f"n{i:03d}" for i in range(len(used), len(used) + spare_nodes)]
    backups = [t for i, t in enumerate(graph.tasks) if graph.succs[i]]
    violations = check_plan(
        graph,
        bound=3.0,
        backups=backups,
        assignment=assignment,
        capacity={n: 0.8 * node_cpu for n in names},
    )
    if violations:
        raise SystemExit(f"the built plan fails the evaluator: {violations[:3]}")
    plan = PlanStatus(generation=1, assignment=assignment, backups=backups, bound=3.0)
    return ChainPlan(
        model, graph, assignment, backups, used, names, Owner("scale", "ns", "uid"), plan,
        TopologyStatus(plan=plan),
    )  # fmt: skip


class _Rows:
    """The timed rows of the table: (what, wall s, CPU s)."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self.rows: list[tuple[str, float, float]] = []

    def row(self, what: str, fn: Callable[[], Any], repeats: int | None = None) -> Any:
        wall, cpu, res = timed(fn, self.repeats if repeats is None else repeats)
        self.rows.append((what, wall, cpu))
        return res


def _steady(built: ChainPlan, tick: Tick, bodies: list[Mapping[str, Any]], t: _Rows) -> None:
    """A round with nothing lost: the status, the plan's pods, their match and states."""
    model, graph, assignment, backups = built.model, built.graph, built.assignment, built.backups
    owner, plan, r = built.owner, built.plan, t.repeats
    raw_status = built.status.dump()
    t.row("parse the status (`parse_status`, 10k assignment)", lambda: parse_status(raw_status))
    t.row(
        "build the plan's pods (`desired_pods`, uncached)",
        lambda: desired_pods(owner, model, graph, frozenset(backups), assignment),
        max(1, r // 2),
    )
    planned_pods(tick, plan)
    desired = t.row(
        "the plan's pods again (`planned_pods`, cached)", lambda: planned_pods(tick, plan)
    )
    t.row("pods match the plan (`pods_match`)", lambda: pods_match(desired, bodies))
    states = t.row("pod states (`pod_states`)", lambda: pod_states(bodies))
    t.row("conditions (`derive_conditions`)", lambda: derive_conditions(1, raw_status, states))


def _first_decision(
    args: argparse.Namespace, built: ChainPlan, nodes: dict[str, NodeInfo], t: _Rows
) -> Any:
    """The loss of the node with the most tasks, past its grace period: the decision."""
    model, graph, assignment, status = built.model, built.graph, built.assignment, built.status
    victim = built.used[0]
    now = 1000.0
    lost_nodes = {
        **nodes,
        victim: NodeInfo(victim, False, now - 5, float(args.node_cpu), False, False, pods=400),
    }

    def capacity(usable: Any) -> dict[str, float]:
        load: dict[str, float] = {}
        for n in assignment.values():
            load[n] = load.get(n, 0.0) + 0.1
        return {n: max(0.0, 0.8 * args.node_cpu - load.get(n, 0.0)) for n in usable}

    decision = t.row(
        "**first recovery decision** (`recovery.decide`, node lost, incl. the planner)",
        lambda: recovery.decide(status, model, graph, lost_nodes, now, capacity, generation=1),
        max(1, t.repeats // 2),
    )
    if decision is None or decision.issued is None:
        raise SystemExit(f"no recovery step issued: {decision}")
    return decision


def _object_sizes(built: ChainPlan, new: TopologyStatus, victim: str) -> dict[str, int]:
    """The sizes of the session ConfigMap and the first RecoveryPlan the step writes."""
    rec = new.recovery
    cm = build_session_configmap(
        built.owner, built.graph, built.backups, rec.dump() if rec else {}, None
    )
    wanted = recoveryplans.wanted_recovery_plans(new)
    rp = (
        build_recoveryplan(
            built.owner,
            session=wanted[0].session,
            step_no=wanted[0].step.step,
            trigger=wanted[0].step.trigger,
            lost=[victim],
            step=wanted[0].step.dump(),
        )
        if wanted
        else {}
    )
    return {"configmap_bytes": size(cm), "recoveryplan_bytes": size(rp)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    built = chain_plan(
        args.operators, args.parallelism, args.chains_per_node, args.spare_nodes, args.node_cpu
    )
    graph, assignment, used, status = built.graph, built.assignment, built.used, built.status
    out: dict[str, Any] = {"tasks": len(graph.tasks), "nodes": len(used)}
    nodes = {
        n: NodeInfo(n, True, 0.0, float(args.node_cpu), True, False, pods=400) for n in built.names
    }
    tick = built.tick(nodes)
    bodies = built.running_pods()
    t = _Rows(args.repeats)
    _steady(built, tick, bodies, t)
    decision = _first_decision(args, built, nodes, t)
    victim = used[0]
    out["lost"] = sum(1 for n in assignment.values() if n == victim)
    out["recovered_first"] = len(decision.issued.recover)
    new = decision.status
    patch = t.row("the status patch (`status_patch`)", lambda: status_patch(status, new))
    out["patch_bytes"] = size(patch)
    out["status_bytes"] = size(new.dump())
    out.update(_object_sizes(built, new, victim))
    out["rows"] = t.rows
    out["load"] = loadavg()
    return out


def render(args: argparse.Namespace, r: dict[str, Any]) -> str:
    lines = [
        HEADING,
        "",
        f"Generated by `python bench/bench_scale_tick.py --out`: "
        f"{r['tasks']} tasks ({args.operators} × {args.parallelism}, forward chains) on "
        f"{r['nodes']} nodes ({args.chains_per_node} half-chains each), every pod "
        f"indexed and Running; median of {args.repeats} (the uncached builds and the decision: "
        f"{max(1, args.repeats // 2)}). Load average when done: {r['load']} (2 cores shared). "
        "The plan passes the failure-effect evaluator (`check_plan`: capacity at cap 0.8, "
        "the bound for every single-node failure).",
        "",
        "| step of a tick | wall s | CPU s |",
        "|---|---|---|",
    ]
    lines += [f"| {what} | {wall:.3f} | {cpu:.3f} |" for what, wall, cpu in r["rows"]]
    lines += [
        "",
        f"The lost node carried {r['lost']} tasks; the first step recovers "
        f"{r['recovered_first']}. What that tick writes: the status patch "
        f"{r['patch_bytes'] / 1024:.0f} KiB (the whole status {r['status_bytes'] / 1024:.0f} "
        f"KiB), the session ConfigMap {r['configmap_bytes'] / 1024:.0f} KiB, the RecoveryPlan "
        f"{r['recoveryplan_bytes'] / 1024:.0f} KiB.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--operators", type=int, default=10)
    p.add_argument("--parallelism", type=int, default=1000)
    p.add_argument("--chains-per-node", type=int, default=50)
    p.add_argument("--spare-nodes", type=int, default=8)
    p.add_argument("--node-cpu", type=float, default=32.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    r = run(args)
    section = render(args, r)
    return emit(section, args.out, HEADING, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
