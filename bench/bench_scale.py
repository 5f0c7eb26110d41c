#!/usr/bin/env python3
"""Benchmark a 10k-task topology end to end on simulated nodes.

Why: the target is "a 10k-task topology is applied, placed, loses a node and
recovers on simulated nodes, with every status and ConfigMap write under its limit, the
operator's RSS under 300 MiB with 10k pods in the cluster, and the first RecoveryPlan
< 1 s after detection". This runs exactly that against the local control plane (real
API server, scheduler and node-lifecycle controller; the node simulator stands in for
kubelets) and says which part meets its figure and which does not.

Setup: ``--operators`` operators of ``--parallelism`` tasks each in a forward chain
(10 × 1000 = 10 000 tasks, 9 000 task edges), ``--cpu`` CPU each, on ``--nodes``
simulated nodes of ``--node-cpu`` CPU and ``--node-pods`` pod slots, in a pool of its
own. Steps and what is measured (API watches, seen within milliseconds):

* apply → plan recorded in the status, → all pods created, → all bound, → all Running,
  → ``Ready`` True;
* the node with the most tasks is killed (its heartbeats stop); the node-lifecycle
  controller turns it NotReady; **detection** is NotReady + ``gracePeriodSeconds``
  (as in ``bench_operator_recovery.py``), and the operator's own note of the loss
  (``status.recovery.lostHistory``) is shown too; then → first RecoveryPlan, → every
  lost task Running again on a live node, → ``Ready`` True again;
* the largest StreamTopology (whole object and ``status``), ConfigMap and RecoveryPlan
  the watches saw, against etcd's 1.5 MiB request limit and the 1 MiB ConfigMap limit;
* the operator's RSS (``/proc/PID/status``: ``VmRSS`` sampled every 0.5 s, and the
  kernel's peak ``VmHWM``) with all pods in the cluster.

``--profile FILE`` samples every thread's stack of the operator (``bench/stacksample.py``)
and writes the busiest functions to FILE. Prints a markdown section to stdout (progress
to stderr); ``--out`` writes its page, ``docs/benchmarks/scale.md``.
"""

from __future__ import annotations

import argparse
import json
import os
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
from backstop_testkit.sim.nodesim import NodeShape
from backstop_testkit.support.docsection import emit
from bench.bench_operator_recovery import NodeRecorder, PlanRecorder
from bench.opharness import (
    POOL_LABEL,
    Bench,
    PodRecorder,
    TopologyRecorder,
    bench,
    log,
    operator_log,
    problems,
)
from bench.procstat import RssSampler, cpu_seconds, ortools_loaded
from bench.procstat import loadavg as load
from bench.scale_report import HEADING, loaded, section

NAMES = ["src", "parse", "filter", "enrich", "score", "join", "agg", "rank", "format", "sink"]
STEP_LOG = "recovery step "
"""How the operator's log line on an issued step begins (its parts: wake-up, decision,
status write, RecoveryPlan write; ``backstop.controller.supervisor``)."""

PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "scale.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_scale.py --out"


def default_kubeconfig() -> str:
    run = os.environ.get("K8S_RUN_DIR") or str(Path.home() / ".cache/backstop/run")
    return str(Path(run) / "kubeconfig")


def scale_topology(name: str, pool: str, args: argparse.Namespace) -> dict[str, Any]:
    """A forward chain of ``args.operators`` operators, ``args.parallelism`` tasks each."""
    ops: list[dict[str, Any]] = []
    for i in range(args.operators):
        op_name = NAMES[i] if i < len(NAMES) else f"op{i}"
        ops.append(
            {
                "name": op_name,
                "parallelism": args.parallelism,
                "resources": {"cpu": args.cpu, "memory": "32Mi"},
                "reprocessingLatency": args.latency,
                "inputs": [] if i == 0 else [{"operator": ops[-1]["name"], "grouping": "forward"}],
            }
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/bench:1",
            "recoveryLatencyBound": args.bound,
            "placementAlgorithm": args.algorithm,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": args.grace, "mode": "incremental"},
            "operators": ops,
        },
    }


def size(obj: Any) -> int:
    """Bytes of an object as JSON (compact, as the API server stores it, give or take)."""
    return len(json.dumps(obj, separators=(",", ":")).encode())


@dataclass
class Sizes:
    """The largest object of each kind the watches saw, with its name."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    largest: dict[str, tuple[int, str]] = field(default_factory=dict)

    def note(self, kind: str, n: int, name: str) -> None:
        with self.lock:
            if n > self.largest.get(kind, (0, ""))[0]:
                self.largest[kind] = (n, name)

    def recorder(self, kind: str, part: str | None = None) -> Any:
        def on_event(ev: str, obj: dict[str, Any], _at: float) -> None:
            if ev == "DELETED":
                return
            name = (obj.get("metadata") or {}).get("name", "")
            self.note(kind, size(obj), name)
            if part is not None:
                self.note(f"{kind}.{part}", size(obj.get(part) or {}), name)

        return on_event


class CurrentPods:
    """The pods as they are now (a replaced pod keeps its name: the newest uid counts)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, tuple[str, str | None, bool]] = {}
        """pod name → (uid, node, Running)"""

    def __call__(self, kind: str, obj: dict[str, Any], _at: float) -> None:
        meta = obj.get("metadata") or {}
        name, uid = meta.get("name", ""), str(meta.get("uid"))
        with self.lock:
            if kind == "DELETED":
                if name in self.pods and self.pods[name][0] == uid:
                    del self.pods[name]
                return
            running = (obj.get("status") or {}).get("phase") == "Running"
            self.pods[name] = (uid, (obj.get("spec") or {}).get("nodeName"), running)

    def running_off(self, dead: str) -> int:
        with self.lock:
            return sum(1 for _, node, run in self.pods.values() if run and node != dead)


def ready_since(b: Bench, node: str) -> float | None:
    """Epoch seconds of the node's Ready condition's last transition (whole seconds)."""
    for c in b.core.read_node(node).status.conditions or []:
        if c.type == "Ready" and c.last_transition_time is not None:
            return float(c.last_transition_time.timestamp())
    return None


def fan_out(*recorders: Any) -> Any:
    """One watch's events to several recorders."""

    def on_event(kind: str, obj: dict[str, Any], at: float) -> None:
        for rec in recorders:
            rec(kind, obj, at)

    return on_event


def _wait(pred: Any, timeout: float, what: str, interval: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    log(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def _nth(times: list[float | None], n: int) -> float | None:
    got = sorted(t for t in times if t is not None)
    return got[n - 1] if len(got) >= n else None


def add_nodes(b: Bench, args: argparse.Namespace) -> list[str]:
    shape = NodeShape(cpu=str(args.node_cpu), memory="256Gi", pods=args.node_pods)
    names = []
    for _ in range(args.nodes):
        name = f"{b.prefix}-{len(b.nodes):03d}"
        b.nodes.append(name)
        b.sim.create(name, shape)
        b.core.patch_node(name, {"metadata": {"labels": {POOL_LABEL: b.pool}}})
        names.append(name)
    return names


@dataclass
class _Scale:
    """What the phases of one run share: the harness, the recorders and the figures."""

    args: argparse.Namespace
    b: Bench
    name: str
    tasks: int
    pods: PodRecorder
    topos: TopologyRecorder
    current: CurrentPods
    sizes: Sizes
    node_rec: NodeRecorder
    plan_rec: PlanRecorder
    out: dict[str, Any]


def _watch(args: argparse.Namespace, b: Bench, name: str, out: dict[str, Any]) -> _Scale:
    """Add the nodes and start the watches."""
    tasks = int(args.operators * args.parallelism)
    out["tasks"] = tasks
    nodes = add_nodes(b, args)
    b.wait_nodes_ready(nodes, timeout=120)
    # one watch per kind, each event to every recorder: at 10k pods the bench's own
    # decoding competed with the operator for the two cores
    pods, topos, current, sizes = PodRecorder(), TopologyRecorder(), CurrentPods(), Sizes()
    b.watch(b.core.list_namespaced_pod, (b.namespace,), fan_out(pods, current))
    b.watch(
        b.custom.list_namespaced_custom_object,
        (GROUP, VERSION, b.namespace, "streamtopologies"),
        fan_out(topos, sizes.recorder("StreamTopology", "status")),
    )
    b.watch(b.core.list_namespaced_config_map, (b.namespace,), sizes.recorder("ConfigMap"))
    node_rec = NodeRecorder()
    b.watch(b.core.list_node, (), node_rec, label_selector=f"{POOL_LABEL}={b.pool}")
    plan_rec = PlanRecorder()
    b.watch(
        b.custom.list_namespaced_custom_object,
        (GROUP, VERSION, b.namespace, "recoveryplans"),
        fan_out(plan_rec, sizes.recorder("RecoveryPlan")),
    )
    return _Scale(args, b, name, tasks, pods, topos, current, sizes, node_rec, plan_rec, out)


def _apply(s: _Scale, doc: dict[str, Any], t0: float) -> bool:
    """Create the topology; the times to its plan, pods and Ready. Whether it got Ready."""
    args, b, name, tasks, out = s.args, s.b, s.name, s.tasks, s.out
    b.create_topology(doc)
    ok = _wait(lambda: s.topos.get(name).ready is not None, args.timeout, "Ready")
    mine = s.pods.of(name)
    tt = s.topos.get(name)

    def rel(t: float | None) -> float | None:
        return None if t is None else t - t0

    out["apply"] = {
        "planned": rel(tt.planned),
        "all_pods": rel(_nth([p.added for p in mine], tasks)),
        "all_bound": rel(_nth([p.bound for p in mine], tasks)),
        "all_running": rel(_nth([p.running for p in mine], tasks)),
        "ready": rel(tt.ready),
        "pods_seen": len(mine),
    }
    out["load"]["ready"] = load()
    log(f"apply: {out['apply']} (load {load()})")
    save(args, out)  # each phase as it ends: a run stopped later keeps what it measured
    return ok


def _timed_out(s: _Scale, rss: RssSampler, pid: int) -> dict[str, Any]:
    """What the cluster and the operator look like when the topology never got Ready."""
    out = s.out
    out["problems"] = problems(operator_log(s.b.log_path))
    out["rss"] = rss.read()
    out["cpu"]["timeout"] = cpu_seconds(pid)
    with s.current.lock:
        out["pods_at_timeout"] = len(s.current.pods)
        out["running_at_timeout"] = sum(1 for _, _, run in s.current.pods.values() if run)
    save(s.args, out)
    return out


def _kill(s: _Scale) -> tuple[str, float, float | None]:
    """Kill the node with the most tasks; the latencies to the first RecoveryPlan.

    Returns the victim, the time of the kill and when the grace period ended.
    """
    args, b, name, out, plan_rec = s.args, s.b, s.name, s.out, s.plan_rec
    per_node = Counter(p.node for p in s.pods.of(name) if p.node and not p.deleted)
    victim, lost = per_node.most_common(1)[0]
    out["victim"], out["lost"] = victim, lost
    out["nodes_used"] = len(per_node)
    s.node_rec.get(victim).armed = True
    t_kill = time.time()
    out["load"]["kill"] = load()
    b.sim.kill(victim)
    log(f"killed {victim} ({lost} tasks); waiting for NotReady + grace")
    _wait(lambda: bool(plan_rec.plans), 180, "the first RecoveryPlan")
    nt = s.node_rec.get(victim)
    first = plan_rec.ordered()[0] if plan_rec.plans else None
    detect = None if nt.not_ready_seen is None else nt.not_ready_seen + args.grace
    out["kill_to_notready"] = None if nt.not_ready_seen is None else nt.not_ready_seen - t_kill
    out["detect_to_plan"] = None if first is None or detect is None else first.seen - detect
    status = b.get_topology(name).get("status") or {}
    lost_at = [float(t) for t in ((status.get("recovery") or {}).get("lostHistory") or {}).values()]
    out["noted_to_plan"] = None if first is None or not lost_at else first.seen - min(lost_at)
    stamp = ready_since(b, victim)  # where the operator starts the grace period
    out["stamp_to_plan"] = None if first is None or not stamp else first.seen - stamp - args.grace
    out["first_plan_tasks"] = None if first is None else len(first.spec.get("assignments") or [])
    out["steps_logged"] = [
        str(r.get("message"))
        for r in operator_log(b.log_path)
        if str(r.get("message")).startswith(STEP_LOG)
    ]
    out["sizes"] = dict(s.sizes.largest)
    save(args, out)
    return victim, t_kill, detect


def _recover(s: _Scale, victim: str, detect: float | None) -> None:
    """Wait until every lost task runs elsewhere and the session ends."""
    topos, name = s.topos, s.name

    def recovered() -> bool:
        return s.current.running_off(victim) >= s.tasks

    done = _wait(recovered, s.args.timeout, "every lost task Running elsewhere", 0.5)
    t_rec = time.time()
    if detect is not None and done:
        s.out["detect_to_recovered"] = t_rec - detect
    _wait(
        lambda: (
            (topos.get(name).last.get("status") or {}).get("recovery") is None
            or not ((topos.get(name).last.get("status") or {}).get("recovery") or {}).get("failed")
        ),
        60,
        "the session's end",
    )


def _end(s: _Scale, rss: RssSampler, pid: int, victim: str) -> None:
    """The settled operator's figures, the plans and the log's problems."""
    out, b = s.out, s.b
    time.sleep(s.args.settle)
    out["load"]["end"] = load()
    out["rss_end"] = rss.read()
    out["cpu"]["end"] = cpu_seconds(pid)
    out["ortools"]["end"] = ortools_loaded(pid)
    out["rss_peak_sampled"] = max((r for _, r in rss.samples), default=None)
    out["plans"] = [
        {
            "step": p.spec.get("step"),
            "trigger": p.spec.get("trigger"),
            "tasks": len(p.spec.get("assignments") or []),
        }
        for p in s.plan_rec.ordered()
    ]
    out["sizes"] = dict(s.sizes.largest)
    out["tasks_running_at_end"] = s.current.running_off(victim)
    records = operator_log(b.log_path)
    out["problems"] = problems(records)
    out["steps_logged"] = [
        str(r.get("message")) for r in records if str(r.get("message")).startswith(STEP_LOG)
    ]
    out["log"] = str(b.log_path)


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    name = "scale"
    out: dict[str, Any] = {"load": {}}
    with bench(args.kubeconfig, workdir, sim_interval=args.sim_interval) as b:
        doc = scale_topology(name, b.pool, args)
        s = _watch(args, b, name, out)
        start_operator(b, args)
        assert b.proc is not None
        pid = b.proc.pid
        rss = RssSampler(pid)
        out["rss_idle"] = rss.read().get("VmRSS")
        out["cpu"] = {"idle": cpu_seconds(pid)}
        log(f"applying {s.tasks} tasks on {args.nodes} x {args.node_cpu} CPU (load {load()})")
        out["load"]["apply"] = load()
        t0 = time.time()
        if not _apply(s, doc, t0):
            return _timed_out(s, rss, pid)
        time.sleep(args.settle)  # the operator with every pod in the cluster, steady
        out["rss_ready"] = rss.read()
        out["cpu"]["ready"] = cpu_seconds(pid)
        out["ortools"] = {"ready": ortools_loaded(pid)}
        victim, t_kill, detect = _kill(s)
        _recover(s, victim, detect)
        _end(s, rss, pid, victim)
        out["kill_at"] = t_kill - t0
        save(args, out)  # before the cleanup, which deletes 10k pods one by one
    return out


def save(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """The raw figures as JSON (``--json``), with the run's arguments."""
    if args.json:
        args.json.write_text(json.dumps({**out, "args": vars(args)}, indent=1, default=str))


def start_operator(b: Bench, args: argparse.Namespace) -> None:
    """``b.start_operator``, optionally under the sampling profiler (``bench/stacksample.py``,
    which sees Kopf's executor threads; cProfile sees only the main thread)."""
    if not args.profile:
        b.start_operator()
        return
    real = sys.executable
    wrapper = Path(tempfile.mkdtemp(prefix="bench-scale-")) / "python"
    sampler = Path(__file__).resolve().parent / "stacksample.py"
    wrapper.write_text(f'#!/bin/sh\nexec {real} {sampler} {args.profile.resolve()} "$@"\n')
    wrapper.chmod(0o755)
    sys.executable = str(wrapper)  # Bench.start_operator runs ``sys.executable -m backstop``
    try:
        b.start_operator()
    finally:
        sys.executable = real


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", default=default_kubeconfig())
    p.add_argument("--operators", type=int, default=10)
    p.add_argument("--parallelism", type=int, default=1000)
    p.add_argument("--cpu", default="100m", help="CPU request of a task")
    p.add_argument("--latency", type=float, default=0.5, help="reprocessingLatency, s")
    p.add_argument("--bound", type=float, default=3.0, help="recovery latency bound, s")
    p.add_argument("--algorithm", default="auto", help="spec.placementAlgorithm")
    p.add_argument("--grace", type=float, default=1.0, help="spec.recovery.gracePeriodSeconds")
    p.add_argument("--nodes", type=int, default=48)
    p.add_argument("--node-cpu", type=int, default=32)
    p.add_argument("--node-pods", type=int, default=400)
    p.add_argument("--sim-interval", type=float, default=1.0)
    p.add_argument("--settle", type=float, default=10, help="seconds of steady state measured")
    p.add_argument("--timeout", type=float, default=900, help="seconds to wait for each phase")
    p.add_argument("--profile", type=Path, help="sample the operator's stacks into this file")
    p.add_argument("--json", type=Path, help="also write the raw figures as JSON")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    p.add_argument(
        "--render",
        type=Path,
        nargs="+",
        help="run nothing: write the section from these --json files, one table each",
    )
    args = p.parse_args(argv)
    if args.render:
        runs = [loaded(path) for path in args.render]
    else:
        workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))  # kept: the operator log
        r = run(args, workdir)
        save(args, r)
        runs = [(args, r)]
    text = section(runs)
    return emit(text, args.out, HEADING, log, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
