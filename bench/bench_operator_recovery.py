#!/usr/bin/env python3
"""Benchmark node loss and incremental recovery in the operator.

Why: the targets are that the first RecoveryPlan is written within 2 s of a node
being NotReady for longer than the grace period, that the next plan follows
within 2 s of a replacement node turning Ready, and that a 500-task topology
losing 3 of 12 nodes recovers fully with every plan fitting the capacity left.
This measures all three against the real control plane: nodes are killed with
the node simulator (heartbeats stop) and the real node-lifecycle controller
turns them NotReady/Unknown (``--node-monitor-grace-period``, 20 s locally).

Setup: ``src 50 → map 200 (shuffle) → agg 200 (forward) → sink 50 (shuffle)``,
500 tasks of 150m CPU, bound 1.5 s, ``gracePeriodSeconds`` 1, utilization cap
0.8, incremental mode, on 12 × 8-CPU nodes. The 3 nodes carrying the most tasks
are killed at once; once the surviving capacity is used, 8-CPU replacement nodes
arrive one at a time (each after the previous step's pods run), until nothing is
left failed.

Times come from API watches on the pool's Nodes and the RecoveryPlans (each event
is seen within milliseconds, finer than the API's 1 s timestamps): "NotReady" is
when the watch first sees the node's Ready condition leave True, "plan" when it
first sees the RecoveryPlan. The API-timestamp variant (Ready's
``lastTransitionTime`` + grace → the plan's ``creationTimestamp``, both truncated
to the second) and the operator's own detection time (``status.recovery.lostHistory``,
its clock, sub-second) are reported too.

Every RecoveryPlan is replayed: each node's share of the plan must fit
``cap × allocatable`` minus this topology's load on the node at that step (the
assignment before the loss, minus the lost nodes, plus the earlier steps).

Prints a markdown section to stdout (progress to stderr); ``--out`` writes its
page, ``docs/benchmarks/operator-recovery.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_testkit.support.docsection import emit
from bench.opharness import (
    DEFAULT_KUBECONFIG,
    POOL_LABEL,
    Bench,
    TopologyRecorder,
    api_stamp,
    bench,
    chain_topology,
    log,
    operator_log,
    problems,
)
from bench.oprecovery_page import HEADING, render
from planners import TaskGraph

PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "operator-recovery.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_operator_recovery.py --out"
BIG = (50, 200, 200, 50)


@dataclass
class NodeTimes:
    ready_seen: float | None = None
    """First time the watch saw Ready=True."""
    schedulable_seen: float | None = None
    """First time Ready=True without a NoSchedule/NoExecute taint."""
    not_ready_seen: float | None = None
    """First time Ready left True after :attr:`armed` (the kill)."""
    not_ready_ltt: float | None = None
    ready_ltt: float | None = None
    armed: bool = False


class NodeRecorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, NodeTimes] = {}

    def __call__(self, kind: str, obj: dict[str, Any], at: float) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name or kind == "DELETED":
            return
        ready, ltt = False, None
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                ready, ltt = c.get("status") == "True", c.get("lastTransitionTime")
        spec = obj.get("spec") or {}
        tainted = any(
            t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []
        )
        with self.lock:
            nt = self.nodes.setdefault(name, NodeTimes())
            if ready and nt.ready_seen is None:
                nt.ready_seen, nt.ready_ltt = at, api_stamp(ltt)
            if ready and not tainted and not spec.get("unschedulable"):
                nt.schedulable_seen = nt.schedulable_seen or at
            if nt.armed and not ready and nt.not_ready_seen is None:
                nt.not_ready_seen, nt.not_ready_ltt = at, api_stamp(ltt)

    def get(self, name: str) -> NodeTimes:
        with self.lock:
            return self.nodes.setdefault(name, NodeTimes())


@dataclass
class PlanSeen:
    seen: float
    created: float
    spec: dict[str, Any]


@dataclass
class PlanRecorder:
    lock: threading.Lock = field(default_factory=threading.Lock)
    plans: dict[str, PlanSeen] = field(default_factory=dict)

    def __call__(self, kind: str, obj: dict[str, Any], at: float) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED" or "spec" not in obj:
            return
        with self.lock:
            if meta["name"] not in self.plans:
                self.plans[meta["name"]] = PlanSeen(
                    at, api_stamp(meta.get("creationTimestamp")), dict(obj["spec"])
                )

    def ordered(self) -> list[PlanSeen]:
        with self.lock:
            return sorted(self.plans.values(), key=lambda p: p.seen)


def _wait(pred: Any, timeout: float, what: str, interval: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    log(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def replay(
    graph: TaskGraph,
    before: dict[str, str],
    lost: set[str],
    plans: list[PlanSeen],
    alloc: dict[str, float],
    cap: float,
) -> list[dict[str, Any]]:
    """Check every plan step against the capacity left at that step; one row per step."""
    weight = {t: graph.weight[graph.index(t)] for t in graph.tasks}
    assignment = {t: n for t, n in before.items() if n not in lost}
    failed = {t for t, n in before.items() if n in lost}
    rows = []
    for p in plans:
        new = {a["task"]: a["node"] for a in p.spec["assignments"]}
        worst_slack = float("inf")
        violations = []
        for node in sorted(set(new.values())):
            load = sum(weight[t] for t, n in new.items() if n == node)
            already = sum(weight[t] for t, n in assignment.items() if n == node)
            room = max(0.0, cap * alloc.get(node, 0.0) - already)
            worst_slack = min(worst_slack, room - load)
            if node in lost or load > room + 1e-9:
                violations.append(f"{node}: {load:.2f} > {room:.2f}")
        twice = [t for t in new if t in assignment]
        unknown = [t for t in new if t not in failed]
        assignment.update(new)
        rows.append(
            {
                "step": p.spec["step"],
                "trigger": p.spec["trigger"],
                "tasks": len(new),
                "cpu": sum(weight[t] for t in new),
                "nodes": len(set(new.values())),
                "slack": worst_slack,
                "violations": violations + [f"{t} recovered twice" for t in twice[:3]],
                "not_failed": len(unknown),
                "pending": len(p.spec.get("pending") or []),
                "queries": len(p.spec.get("recoveredQueries") or []),
            }
        )
    return rows


@dataclass
class _Run:
    """What the phases of one run share: the harness, the topology and the recorders."""

    args: argparse.Namespace
    b: Bench
    name: str
    graph: TaskGraph
    node_rec: NodeRecorder
    plan_rec: PlanRecorder
    topos: TopologyRecorder
    out: dict[str, Any]


def _apply(args: argparse.Namespace, b: Bench, name: str) -> tuple[_Run, dict[str, str]]:
    """Start the nodes, the watches and the operator; apply the topology until Ready."""
    out: dict[str, Any] = {}
    doc = chain_topology(
        name,
        b.pool,
        BIG,
        cpu=args.cpu,
        bound=args.bound,
        recovery={
            "gracePeriodSeconds": args.grace,
            "utilizationCap": args.cap,
            "mode": "incremental",
        },
    )
    graph = expand(parse_spec(doc["spec"]))
    nodes = [b.add_node(str(args.node_cpu)) for _ in range(args.nodes)]
    b.wait_nodes_ready(nodes)
    node_rec = NodeRecorder()
    b.watch(b.core.list_node, (), node_rec, label_selector=f"{POOL_LABEL}={b.pool}")
    plan_rec = PlanRecorder()
    b.watch(
        b.custom.list_namespaced_custom_object,
        (GROUP, VERSION, b.namespace, "recoveryplans"),
        plan_rec,
    )
    topos = b.watch_topologies()
    b.start_operator()
    log(f"applying a {len(graph.tasks)}-task topology on {args.nodes} nodes")
    t_apply = time.time()
    b.create_topology(doc)
    if not _wait(lambda: topos.get(name).ready is not None, args.timeout, "Ready"):
        raise SystemExit("the topology never became Ready; see " + str(b.log_path))
    out["apply_to_ready"] = time.time() - t_apply
    status = b.get_topology(name)["status"]
    before: dict[str, str] = dict(status["plan"]["assignment"])
    out["before"] = {
        "nodes": len(set(before.values())),
        "worst": status["plan"]["worstRecoveryLatency"],
        "backups": status["plan"]["backupCount"],
    }
    return _Run(args, b, name, graph, node_rec, plan_rec, topos, out), before


def _kill(run: _Run, before: dict[str, str]) -> tuple[list[str], set[str], float]:
    """Kill the nodes with the most tasks at once: the victims, the failed tasks, the time."""
    args, b, graph, out = run.args, run.b, run.graph, run.out
    per_node = Counter(before.values())
    victims = [n for n, _ in per_node.most_common(args.kill)]
    failed = {t for t, n in before.items() if n in victims}
    out["victims"] = {v: per_node[v] for v in victims}
    out["failed"] = len(failed)
    out["failed_cpu"] = sum(graph.weight[graph.index(t)] for t in failed)
    time.sleep(2)  # a settled baseline
    for v in victims:
        run.node_rec.get(v).armed = True
    t_kill = time.time()
    for v in victims:
        b.sim.kill(v)
    log(f"killed {victims} ({len(failed)} tasks); waiting for NotReady + grace")
    return victims, failed, t_kill


def _first_plan(run: _Run, victims: list[str], t_kill: float) -> list[NodeTimes]:
    """Wait for the first RecoveryPlan; the detection latencies into ``run.out``."""
    args, b, out, plan_rec = run.args, run.b, run.out, run.plan_rec

    def first_plan() -> bool:
        return bool(plan_rec.plans)

    if not _wait(first_plan, 120, "the first RecoveryPlan"):
        raise SystemExit("no RecoveryPlan; see " + str(b.log_path))
    time.sleep(1)
    nr = [run.node_rec.get(v) for v in victims]
    nr_seen = [x.not_ready_seen for x in nr if x.not_ready_seen is not None]
    nr_ltt = [x.not_ready_ltt for x in nr if x.not_ready_ltt is not None]
    first = plan_rec.ordered()[0]
    rec = b.get_topology(run.name)["status"].get("recovery") or {}
    lost_at = [float(t) for t in (rec.get("lostHistory") or {}).values()]
    out["kill_to_notready"] = min(nr_seen) - t_kill if nr_seen else None
    out["notready_spread"] = max(nr_seen) - min(nr_seen) if nr_seen else None
    out["detect_watch"] = first.seen - (min(nr_seen) + args.grace) if nr_seen else None
    out["detect_api"] = first.created - (min(nr_ltt) + args.grace) if nr_ltt else None
    out["detect_operator"] = min(lost_at) - (min(nr_seen) + args.grace) if lost_at else None
    out["operator_to_plan"] = first.seen - min(lost_at) if lost_at else None
    out["first_trigger"] = first.spec["trigger"]
    return nr


def _lost_plans(run: _Run, victims: list[str], nr: list[NodeTimes]) -> list[float]:
    """Let every loss be acted on; each NodeLost plan's latency. The NotReady times."""
    args, out, node_rec = run.args, run.out, run.node_rec
    # the controller may mark the victims NotReady in different passes (separate
    # sessions): let every loss be noted and acted on before capacity arrives
    _wait(
        lambda: all(node_rec.get(v).not_ready_seen is not None for v in victims),
        60,
        "every victim NotReady",
    )
    time.sleep(args.grace + 3)
    nr_seen = [x.not_ready_seen for x in nr if x.not_ready_seen is not None]
    out["notready_spread"] = max(nr_seen) - min(nr_seen) if nr_seen else None
    lost_plans = []
    for p in run.plan_rec.ordered():
        if p.spec["trigger"] != "NodeLost":
            continue
        marks = [
            t
            for n in p.spec.get("lostNodes") or []
            if (t := node_rec.get(n).not_ready_seen) is not None and t <= p.seen
        ]
        if marks:
            lost_plans.append(p.seen - (max(marks) + args.grace))
    out["lost_plan_latencies"] = lost_plans
    return nr_seen


def _replacement(run: _Run, i: int) -> dict[str, Any]:
    """Add one replacement node once the last step's pods run; its latency to the plan."""
    args, b, plan_rec = run.args, run.b, run.plan_rec
    # a replacement arrives once the last step's pods run (they take minutes in life)
    _wait(lambda: _applied(b, run.name), 90, "the last step's pods Running", interval=0.5)
    seen_before = set(plan_rec.plans)
    node = b.add_node(str(args.node_cpu))
    t_added = time.time()
    log(f"replacement {i + 1}: {node}")

    def new_plan(known: set[str] = seen_before) -> bool:
        return bool(set(plan_rec.plans) - known)

    got = _wait(new_plan, 60, f"a plan after {node}")
    nt = run.node_rec.get(node)
    row: dict[str, Any] = {"node": node, "added_to_ready": None, "ready_to_plan": None}
    if nt.ready_seen is not None:
        row["added_to_ready"] = nt.ready_seen - t_added
    if got and nt.ready_seen is not None:
        with plan_rec.lock:
            fresh = [p for n, p in plan_rec.plans.items() if n not in seen_before]
        plan = min(fresh, key=lambda p: p.seen)
        row["ready_to_plan"] = plan.seen - nt.ready_seen
        if nt.schedulable_seen is not None:
            row["schedulable_to_plan"] = plan.seen - nt.schedulable_seen
        row["api"] = plan.created - (nt.ready_ltt or 0.0)
        row["trigger"] = plan.spec["trigger"]
        row["tasks"] = len(plan.spec["assignments"])
    return row


def _replacements(run: _Run) -> None:
    """Add replacement nodes while tasks stay failed."""
    replacements: list[dict[str, Any]] = []
    for i in range(run.args.max_replacements):
        rec = run.b.get_topology(run.name)["status"].get("recovery") or {}
        if not rec.get("failed"):
            break
        replacements.append(_replacement(run, i))
    run.out["replacements"] = replacements


def _outcome(
    run: _Run,
    before: dict[str, str],
    victims: list[str],
    failed: set[str],
    t_kill: float,
    nr_seen: list[float],
) -> None:
    """Wait for the full recovery; the final figures and checks into ``run.out``."""
    args, b, name, graph, out = run.args, run.b, run.name, run.graph, run.out
    topos = run.topos

    def recovered() -> bool:
        obj = topos.get(name).last
        st = obj.get("status") or {}
        rec_ = st.get("recovery") or {}
        ready = any(
            c.get("type") == "Ready"
            and c.get("status") == "True"
            and c.get("observedGeneration") == obj["metadata"]["generation"]
            for c in st.get("conditions") or []
        )
        return ready and not rec_.get("active") and not rec_.get("failed")

    out["recovered"] = _wait(recovered, args.timeout, "full recovery (Ready, no failed)")
    t_done = time.time()
    out["kill_to_recovered"] = t_done - t_kill
    status = b.get_topology(name)["status"]
    rec = status.get("recovery") or {}
    plans = run.plan_rec.ordered()
    out["detection_to_recovered"] = t_done - (min(nr_seen) + args.grace) if nr_seen else None
    out["last_plan_after_first"] = plans[-1].seen - plans[0].seen
    out["steps"] = len(plans)
    out["final"] = {
        "worst": status["plan"].get("worstRecoveryLatency"),
        "bound_ok": status["plan"].get("boundSatisfied"),
        "nodes": len(set(status["plan"]["assignment"].values())),
        "message": rec.get("message", ""),
        "recovered": len(rec.get("recovered") or []),
    }
    alloc = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"])
        for n in b.core.list_node(label_selector=f"{POOL_LABEL}={b.pool}").items
    }
    out["replay"] = replay(graph, before, set(victims), plans, alloc, args.cap)
    out["recovered_once"] = sorted(
        t for p in plans for t in (a["task"] for a in p.spec["assignments"])
    ) == sorted(failed)
    out["pods"] = _check_pods(b, name, status["plan"]["assignment"], graph)
    out["problems"] = problems(operator_log(b.log_path))


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with bench(args.kubeconfig, workdir) as b:
        r, before = _apply(args, b, "rec")
        victims, failed, t_kill = _kill(r, before)
        nr = _first_plan(r, victims, t_kill)
        nr_seen = _lost_plans(r, victims, nr)
        _replacements(r)
        _outcome(r, before, victims, failed, t_kill, nr_seen)
    return r.out


def _applied(b: Bench, name: str) -> bool:
    """Whether the last recovery step is marked Applied (its pods run where it put them)."""
    rec = b.get_topology(name)["status"].get("recovery") or {}
    return bool(rec.get("appliedStep") == (rec.get("lastStep") or {}).get("step"))


def _check_pods(b: Bench, name: str, assignment: dict[str, str], graph: TaskGraph) -> str:
    pods = [
        p
        for p in b.core.list_namespaced_pod(
            b.namespace, label_selector=f"{GROUP}/topology={name}"
        ).items
        if p.metadata.deletion_timestamp is None
    ]
    per_task = Counter(p.metadata.labels[f"{GROUP}/task"] for p in pods)
    dup = sum(1 for c in per_task.values() if c > 1)
    missing = len(set(graph.tasks) - set(per_task))
    wrong = sum(
        1
        for p in pods
        if p.status.phase != "Running"
        or p.spec.node_name != assignment.get(p.metadata.labels[f"{GROUP}/task"])
    )
    return (
        f"{len(pods)} pods; {dup} tasks with 2+ pods, {missing} missing, "
        f"{wrong} not Running where planned"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", default=str(DEFAULT_KUBECONFIG))
    p.add_argument("--nodes", type=int, default=12)
    p.add_argument("--node-cpu", type=int, default=8)
    p.add_argument("--kill", type=int, default=3, help="nodes killed at once")
    p.add_argument("--cpu", default="150m", help="CPU request of a task")
    p.add_argument("--bound", type=float, default=1.5, help="recovery latency bound, s")
    p.add_argument("--grace", type=float, default=1.0, help="spec.recovery.gracePeriodSeconds")
    p.add_argument("--cap", type=float, default=0.8, help="spec.recovery.utilizationCap")
    p.add_argument("--max-replacements", type=int, default=4)
    p.add_argument("--timeout", type=float, default=240, help="seconds to wait per phase")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-recovery-"))  # kept: the operator log
    result = run(args, workdir)
    section = render(args, result, sum(BIG))
    return emit(section, args.out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
