#!/usr/bin/env python3
"""The recovery bound measured on REAL nodes: predicted ℓ(v) vs measured, per lost task.

Why: the operator promises that after any single node failure every lost task is back
within ``recoveryLatencyBound``; the planners check it with the failure-effect model
(ℓ(v) = t_v + the latency of the upstream it must wait for or regenerate from). This runs
``examples/twitter-sentiment.yaml`` (a copy: own store, own tweet log appended at a steady
rate, grace period 2 s, a node pool of its own) on real nodes (kubelet + containerd each,
``hack/real-node.sh``) with the operator as a host process, kills with ``backstop nodes
kill`` the node whose loss the plan predicts to be worst (then the next ones, each in a
fresh deployment), and measures per lost task:

- **detected**: the RecoveryPlan appearing (the node NotReady for the grace period);
- **caught up**: the task's new copy (a new epoch in the store) processes batches less than
  ``BACKSTOP_CAUGHT_UP_LAG`` (0.5 s) old: its ``status.json`` gives the process start and the
  seconds from there to catching up (restore, replay, catch-up);
- measured = caught up − detected, split into "pod start" (detected → process start: pod
  deleted and recreated, scheduled, container started, Python up) and "restore + replay".

Then the same with the recovery ignored: the same planner with the bound removed (a day, the
largest the CRD accepts), so it packs the tasks into as few nodes as fit and keeps no upstream
backups (plain bin packing), measured against the example's bound. ``--out`` writes its
page, ``docs/benchmarks/runtime-recovery.md`` (``--incremental``'s figures go to
``runtime-recovery-incremental.md`` beside it).

Needs root and a running control plane (``K8S_RUN_DIR``, default the shared one); starts and
removes its own real nodes (``REAL_NODE_NET``/``REAL_NODE_PORT_BASE``/``REAL_NODE_BRIDGE``
choose their network when another cluster on the host has real nodes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import StreamTopologySpec, expand
from backstop.k8s.cluster import api_client
from bench import runtime_incremental as incremental
from bench.docsection import write_section
from planners.evaluate import recovery_latencies
from tests.support.kubetools import create_namespace, install_crds, node_ready, start_operator
from tests.support.kubetools import stop_operator as _stop_operator
from tests.support.realnodes import CACHE, build_runtime_image, real_node_pool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
POOL = "bench.backstop.dev/pool"
IN_POD = "/var/lib/backstop"
HEADING = "## Runtime on real nodes: the bound measured"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "runtime-recovery.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_runtime_recovery.py --out"
UNBOUNDED = 86400.0  # the largest bound the CRD accepts: in effect none
CAUGHT_UP_SLACK = 0.5


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait(what: str, cond: Any, timeout: float, interval: float = 0.2) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(ApiException):
            got = cond()
            if got:
                return got
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class TaskResult:
    task: str
    predicted: float
    measured: float
    pod_start: float
    catch_up: float


@dataclass
class Cycle:
    variant: str
    victim: str
    predicted_node: float
    backups: list[str]
    placement: dict[str, list[str]]
    notready: float  # kill → NotReady seen
    detected: float  # kill → RecoveryPlan seen
    tasks: list[TaskResult] = field(default_factory=list)
    load: float = 0.0  # the host's 1-min load average when the last task caught up

    @property
    def worst(self) -> float:
        return max(t.measured for t in self.tasks)


class Bench:
    def __init__(self, kubeconfig: str, rate: float, warmup: float, show: bool = False) -> None:
        self.kubeconfig, self.rate, self.warmup, self.show = kubeconfig, rate, warmup, show
        self.kube = api_client(kubeconfig)
        self.core = client.CoreV1Api(self.kube)
        self.custom = client.CustomObjectsApi(self.kube)
        self.ns = f"bench-{uuid.uuid4().hex[:6]}"
        self.store = Path(tempfile.mkdtemp(prefix="backstop-bench-store-"))
        self.store.chmod(0o1777)
        self.nodes: list[str] = []
        self.steady: dict[str, float] = {}

    def status(self, name: str, task: str) -> dict[str, Any]:
        try:
            doc = json.loads((self.store / name / "tasks" / task / "status.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return dict(doc) if isinstance(doc, dict) else {}

    def tuples(self, name: str) -> dict[str, float]:
        """``tuples_in_total`` of every running task, from its ``/metrics`` (pod IP, port 9090)."""
        out: dict[str, float] = {}
        for pod in self.core.list_namespaced_pod(
            self.ns, label_selector=f"{GROUP}/topology={name}"
        ).items:
            if pod.status.phase != "Running" or not pod.status.pod_ip:
                continue
            with contextlib.suppress(OSError):
                url = f"http://{pod.status.pod_ip}:9090/metrics"
                text = urllib.request.urlopen(url, timeout=2).read().decode()
                for line in text.splitlines():
                    if line.startswith("backstop_task_tuples_in_total"):
                        out[pod.metadata.labels[f"{GROUP}/task"]] = float(line.rsplit(" ", 1)[1])
        return out

    def flowing(self, name: str, when: str, seconds: float = 3.0) -> None:
        """Print the records each task took in over ``seconds`` (the demo shows them)."""
        before = self.tuples(name)
        time.sleep(seconds)  # a rate needs an interval
        after = self.tuples(name)
        rates = {t: (after[t] - before[t]) / seconds for t in after if t in before}
        sink = sorted((self.store / name / "output").glob("*.jsonl"))
        last = sink[-1].read_text().splitlines()[-1:] if sink else []
        print(f"records flowing {when} (tuples in per second, from each task's /metrics):")
        print("  " + ", ".join(f"{t} {r:.0f}" for t, r in sorted(rates.items())))
        if last:
            print(f"  latest sink line: {last[0][:150]}")
        sys.stdout.flush()

    def cli(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "backstop", *args, "--kubeconfig", self.kubeconfig],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def manifest(self, name: str, bound: float | None) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
        doc["metadata"] = {"name": name}
        spec = doc["spec"]
        spec["store"] = {"hostPath": {"path": str(self.store), "type": "Directory"}}
        spec["nodeSelector"] = {POOL: self.nodes[0]}
        spec.setdefault("recovery", {}).update(gracePeriodSeconds=2, replanOnViolation=False)
        if bound is not None:
            spec["recoveryLatencyBound"] = bound
        for op in spec["operators"]:
            cfg = op["config"]
            if "path" in cfg:
                leaf = Path(cfg["path"]).name  # input, output, trending
                cfg["path"] = f"{IN_POD}/{name}/{leaf}"
        return doc

    def start(
        self, name: str, doc: dict[str, Any]
    ) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
        """Deploy ``doc`` with its own tweet log appended at the steady rate; return the plan
        (once every task has caught up with its input and a warm-up passed) and the generator."""
        for sub in (name, f"{name}/input"):  # the tasks (uid 65532) write under <name>
            (self.store / sub).mkdir()
            (self.store / sub).chmod(0o1777)
        gen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backstop_runtime.examples.tweets",
                str(self.store / name / "input"),
                "--follow",
                "--rate",
                str(self.rate),
                "--seconds",
                "3600",
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT / "runtime")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, "streamtopologies", doc
        )

        def plan() -> dict[str, Any] | None:
            st = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.ns, "streamtopologies", name
            )
            p = (st.get("status") or {}).get("plan") or {}
            return p if p.get("assignment") else None

        p: dict[str, Any] = wait(f"{name}: a plan", plan, 120)
        tasks = list(p["assignment"])

        def steady() -> bool:
            return all(self.status(name, t).get("recoverySeconds") is not None for t in tasks)

        wait(f"{name}: every task caught up with its input", steady, 240)
        log(f"{name}: all {len(tasks)} tasks caught up; steady for {self.warmup:.0f}s")
        # a steady stream before the failure, and each task's lag in it (status.json, every 1 s)
        samples: dict[str, list[float]] = {t: [] for t in tasks}
        end = time.monotonic() + self.warmup
        while time.monotonic() < end:
            for t in tasks:
                samples[t].append(float(self.status(name, t).get("lag") or 0.0))
            time.sleep(0.5)
        self.steady = {t: sorted(v)[len(v) // 2] for t, v in samples.items() if v}
        return p, gen

    def caught_up(self, name: str, task: str, epoch: int, seen: dict[str, int]) -> bool:
        """The new copy of ``task`` is back where it was before the failure: it processes
        batches no further behind its sources than its median lag in the steady stream,
        plus ``CAUGHT_UP_SLACK`` (so a host where the pipeline lags 1 s in steady state
        does not count every recovery as never caught up against a fixed 0.5 s)."""
        s = self.status(name, task)
        if int(s.get("epoch", 0)) <= epoch:
            return False
        first = seen.setdefault(task, int(s.get("round", 0)))  # its restored round
        lag = float(s.get("lag") or 0.0)
        return (
            int(s.get("round", 0)) > first and lag <= self.steady.get(task, 0.0) + CAUGHT_UP_SLACK
        )

    def recovery_plan_seen(self, name: str) -> bool:
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.ns, "recoveryplans", label_selector=f"{GROUP}/topology={name}"
        )["items"]
        return bool(items)

    def session_seen(self, name: str) -> bool:
        """A recovery session recorded (``status.recovery``) or a RecoveryPlan issued."""
        st = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "streamtopologies", name
        )
        rec = (st.get("status") or {}).get("recovery") or {}
        return bool(rec.get("active") and rec.get("session")) or self.recovery_plan_seen(name)

    def cycle(self, variant: str, name: str, bound: float | None, rank: int) -> Cycle:
        doc = self.manifest(name, bound)
        real_bound = float(yaml.safe_load(EXAMPLE.read_text())["spec"]["recoveryLatencyBound"])
        graph = expand(StreamTopologySpec.model_validate(doc["spec"]))
        victim = ""
        gen: subprocess.Popen[bytes] | None = None
        try:
            p, gen = self.start(name, doc)
            if self.show:
                self.flowing(name, "before the kill")
            placement: dict[str, list[str]] = {}
            for t, n in p["assignment"].items():
                placement.setdefault(n, []).append(t)
            by_node = sorted(placement, key=lambda n: (-p["worstByNode"].get(n, 0.0), n))
            victim = by_node[min(rank, len(by_node) - 1)]
            lost = placement[victim]
            restart = float(doc["spec"]["recovery"].get("restartSeconds", 0.0))
            # the model: every lost pod restarts at once, then ℓ(v) of reprocessing
            ell = {t: restart + v for t, v in recovery_latencies(graph, p["backups"], lost).items()}
            epochs = {t: self.status(name, t).get("epoch", 0) for t in lost}
            log(f"{name}: killing {victim} ({len(lost)} tasks, predicted {p['worstByNode']})")
            t_kill = time.time()
            self.cli("nodes", "kill", victim)
            wait(f"{victim} NotReady", lambda: not node_ready(self.core, victim), 120)
            t_notready = time.time()

            wait(f"{name}: a RecoveryPlan", lambda: self.recovery_plan_seen(name), 120, 0.1)
            t_plan = time.time()
            cyc = Cycle(
                variant,
                victim,
                restart + float(p["worstByNode"].get(victim, 0.0)),
                list(p["backups"]),
                placement,
                t_notready - t_kill,
                t_plan - t_kill,
            )

            seen: dict[str, int] = {}
            back: dict[str, float] = {}
            deadline = time.time() + 240
            while len(back) < len(lost) and time.time() < deadline:
                for t in lost:
                    if t not in back and self.caught_up(name, t, epochs[t], seen):
                        back[t] = time.time()
                time.sleep(0.2)
            cyc.load = os.getloadavg()[0]
            for t in sorted(lost, key=graph.index):
                if t not in back:
                    raise SystemExit(f"{name}: {t} did not catch up within 240 s")
                started = float(self.status(name, t)["started"])
                cyc.tasks.append(
                    TaskResult(t, ell[t], back[t] - t_plan, started - t_plan, back[t] - started)
                )
            log(
                f"{name}: worst measured {cyc.worst:.2f}s (bound {real_bound:g}s, "
                f"predicted {cyc.predicted_node:g}s; host load {cyc.load:.1f})"
            )
            if self.show:
                self.flowing(name, "after the recovery, the lost tasks on other nodes")
                for t in cyc.tasks:
                    print(
                        f"  {t.task:14} predicted c+ℓ {t.predicted:.1f} s   measured "
                        f"{t.measured:5.2f} s = pod start {t.pod_start:5.2f} s + "
                        f"restore/replay {t.catch_up:5.2f} s"
                    )
                print(
                    f"  worst {cyc.worst:.2f} s vs bound {real_bound:g} s: "
                    + ("within the bound" if cyc.worst <= real_bound else "OVER the bound")
                )
            return cyc
        finally:
            if gen is not None:
                gen.terminate()
                gen.wait()
            self.delete(name)
            if victim:
                self.cli("nodes", "revive", victim)
                wait(f"{victim} Ready", lambda: node_ready(self.core, victim), 120)

    def delete(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.ns, "streamtopologies", name
            )

        def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.ns, "streamtopologies", name
                )
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait(f"{name} deleted", gone, 120)
        wait(
            f"the pods of {name} gone",
            lambda: (
                not self.core.list_namespaced_pod(
                    self.ns, label_selector=f"{GROUP}/topology={name}"
                ).items
            ),
            120,
        )


def fmt_placement(c: Cycle) -> str:
    return "; ".join(f"{n}: {len(ts)}" for n, ts in sorted(c.placement.items()))


def report(cycles: list[Cycle], rate: float, bound: float, restart: float, seconds: float) -> str:
    lines = [
        HEADING,
        "",
        f"Generated by `bench/bench_runtime_recovery.py` on {datetime.now(UTC):%Y-%m-%d} "
        f"({seconds / 60:.0f} min): `examples/twitter-sentiment.yaml` (14 tasks, bound "
        f"{bound:g} s) on 3 real nodes (kubelet + containerd each, 2 CPUs = this host's), the "
        f"tweet log appended at **{rate:g} tweets/s**, the operator on the host with a 2 s grace "
        f"period, the node-monitor grace period {os.environ.get('NODE_MONITOR_GRACE', '20s')}, "
        "on a 2-core host whose load average is in the last column. Each row is one task "
        "lost with the killed node, in a fresh deployment per kill. *Predicted* is the "
        "model's c + ℓ(v) for that failure: the restart term c (`recovery.restartSeconds`, "
        f"{restart:g} s: every lost pod starts at once) plus ℓ(v) with the spec's t_v "
        "(`reprocessingLatency`) and the plan's backups; *measured* runs from the RecoveryPlan "
        "(loss detected) to the task's new copy having caught up with its input: it processes "
        "batches no further behind its sources than the task did in the steady stream before "
        "the failure (its median lag, from `status.json`) plus 0.5 s; split into *pod start* "
        "(pod recreated, scheduled, container and Python up: what c stands for) and *restore + "
        "replay* (from the process start: restore, replay, and the backlog that built up "
        "while the task was down).",
        "",
    ]
    for variant in dict.fromkeys(c.variant for c in cycles):
        lines += [f"**{variant}**", ""]
        lines += [
            "| killed node (rank) | tasks on it | predicted c + H(node) | backups "
            "| kill → NotReady | kill → RecoveryPlan | worst measured | within the bound "
            "| host load (1 min) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        mine = [c for c in cycles if c.variant == variant]
        for k, c in enumerate(mine):
            ok = "yes" if c.worst <= bound else f"**no** (+{c.worst - bound:.1f} s)"
            lines.append(
                f"| {c.victim} ({k + 1}) | {len(c.tasks)} of 14 ({fmt_placement(c)}) | "
                f"{c.predicted_node:.1f} s | {', '.join(c.backups) or 'none'} | "
                f"{c.notready:.0f} s | {c.detected:.0f} s | {c.worst:.2f} s | {ok} | "
                f"{c.load:.1f} |"
            )
        lines += [
            "",
            "| killed node | task | predicted c + ℓ(v) | measured | pod start | restore + replay |",
            "|---|---|---|---|---|---|",
        ]
        for c in mine:
            for t in c.tasks:
                lines.append(
                    f"| {c.victim} | {t.task} | {t.predicted:.1f} s | {t.measured:.2f} s | "
                    f"{t.pod_start:.2f} s | {t.catch_up:.2f} s |"
                )
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=100.0, help="tweets per second, in all")
    p.add_argument(
        "--kills", type=int, default=0, help="nodes killed (worst first); 0: every node used"
    )
    p.add_argument("--warmup", type=float, default=10.0, help="steady seconds before a kill")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    p.add_argument("--no-plain", action="store_true", help="skip the plain bin packing run")
    p.add_argument("--show", action="store_true", help="print records flowing (make demo)")
    p.add_argument(
        "--incremental",
        action="store_true",
        help="also: two nodes lost, one replaced later; incremental vs blocking recovery",
    )
    p.add_argument("--replace-after", type=float, default=20.0, help="seconds (--incremental)")
    p.add_argument("--no-bound", action="store_true", help="skip the single-node kills")
    p.add_argument(
        "--modes", default="incremental,blocking,best-case", help="(--incremental) which runs"
    )
    args = p.parse_args()
    # SIGTERM (or SIGINT, ignored in background jobs) unwinds: nodes, pods, store removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0:
        print("error: real nodes need root", file=sys.stderr)
        return 2
    run_dir = Path(os.environ.get("K8S_RUN_DIR") or CACHE / "run")
    kubeconfig = str(run_dir / "kubeconfig")
    t0 = time.monotonic()
    images = build_runtime_image()
    bench = Bench(kubeconfig, args.rate, args.warmup, args.show)
    install_crds(bench.kube)
    create_namespace(bench.core, bench.ns)
    names = [f"rb{uuid.uuid4().hex[:4]}-{i}" for i in range(3)]
    oplog = run_dir / f"{bench.ns}-operator.log"
    cycles: list[Cycle] = []
    sessions: list[incremental.Session] = []
    failed: list[str] = []
    try:
        with real_node_pool(run_dir, names, env={"REAL_NODE_IMAGES": str(images)}) as nodes:
            bench.nodes = nodes
            for n in nodes:
                bench.core.patch_node(n, {"metadata": {"labels": {POOL: nodes[0]}}})
            op = start_operator(kubeconfig, bench.ns, oplog)
            try:
                for k in range(0 if args.no_bound else args.kills or len(nodes)):
                    c = bench.cycle("recovery-aware plan", f"ts-plan-{k}", None, k)
                    cycles.append(c)
                    if not args.kills and k + 1 >= len(c.placement):
                        break  # every node the plan uses has been killed once
                if not args.no_plain and not args.no_bound:
                    cycles.append(
                        bench.cycle(
                            "plain bin packing (bound removed: fewest nodes, no backups)",
                            "ts-plain-0",
                            UNBOUNDED,
                            0,
                        )
                    )
                if args.incremental:
                    runs = [
                        ("incremental", args.replace_after),
                        ("blocking", args.replace_after),
                        ("best-case", 0.0),
                    ]
                    for mode, after in [r for r in runs if r[0] in args.modes.split(",")]:
                        try:
                            sessions.append(
                                incremental.run_session(bench, mode, f"ts-{mode}", after)
                            )
                        except SystemExit as err:  # a timeout: report the others, say why
                            log(f"ts-{mode}: {err} (host load {os.getloadavg()[0]:.1f})")
                            failed.append(f"{mode}: {err}")
            finally:
                _stop_operator(op)
    finally:
        with contextlib.suppress(ApiException):
            bench.core.delete_namespace(bench.ns)
        shutil.rmtree(bench.store, ignore_errors=True)
        shutil.rmtree(images, ignore_errors=True)
    example = yaml.safe_load(EXAMPLE.read_text())["spec"]
    bound = float(example["recoveryLatencyBound"])
    restart = float(example.get("recovery", {}).get("restartSeconds", 0.0))
    if cycles:
        text = report(cycles, args.rate, bound, restart, time.monotonic() - t0)
        print(text)
        if args.out:
            write_section(args.out, HEADING, text, command=COMMAND)
    if sessions:
        text = incremental.report(sessions, args.rate, args.replace_after)
        text += "".join(f"\nNot measured: {f}.\n" for f in failed)
        print(text)
        if args.out:
            out = args.out.with_name(f"{args.out.stem}-incremental.md")
            command = COMMAND.replace(" --out", " --incremental --out")
            write_section(out, incremental.HEADING, text, command=command)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
