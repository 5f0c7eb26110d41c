#!/usr/bin/env python3
"""Benchmark operator failover: two replicas on a Lease, the leader killed.

Why: with one replica, a lost operator node stopped every recovery for the pod
eviction timeout (300 s by default) plus an image pull and a start. With two
``backstop operator --leader-elect`` replicas, the standby takes the Lease once
the dead leader's last renewal is ``--lease-duration`` old, starts Kopf and
recovers. This measures that on the local control plane, in the worst case for
recovery: the leader is SIGKILLed (it cannot give the Lease up) at the moment a
node carrying tasks is seen NotReady, with a grace period of 1 s, so the
recovery waits for the failover alone.

Per trial: a fresh namespace, 4 simulated 2-CPU nodes, two operator processes
(Lease timing 15/10/2 s, the chart's defaults), a 4-task topology Ready; then
the node with ``src-0`` is killed; when a watch-free poll (every 0.1 s) sees it
NotReady, the leader gets SIGKILL. Reported: kill → the standby holds the Lease,
kill → the first RecoveryPlan (the standby's Kopf start, indexes, the supervise
daemon's first tick and the planning included).

Prints a markdown section (progress to stderr); ``--out`` writes its page,
``docs/benchmarks/failover.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop_testkit.support.docsection import write_section
from backstop_testkit.support.kubetools import SINGLE_HOST_ENV, free_port, stop_operator, wait_for
from bench.opharness import DEFAULT_KUBECONFIG, POOL_LABEL, Bench, bench, fmt_s, log

HEADING = "## Operator failover"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "failover.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_failover.py --out"
LEASE = "backstop-operator"
TIMING = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 2}


def start(b: Bench, tag: str) -> subprocess.Popen[bytes]:
    out = (b.workdir / f"operator-{tag}.log").open("ab")
    args = [
        sys.executable, "-m", "backstop", "operator", "--namespace", b.namespace,
        "--liveness", f"http://127.0.0.1:{free_port()}/healthz", "--log-format", "plain",
        "--leader-elect", f"--leader-elect-namespace={b.namespace}",
        f"--leader-elect-name={LEASE}",
        *(f"--{k.replace('_', '-')}={v}" for k, v in TIMING.items()),
    ]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": b.kubeconfig, **SINGLE_HOST_ENV}
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def holder(b: Bench) -> str:
    try:
        lease = client.CoordinationV1Api(b.api).read_namespaced_lease(LEASE, b.namespace)
    except ApiException:
        return ""
    return str(lease.spec.holder_identity or "")


def topology(pool: str) -> dict[str, Any]:
    op = {"resources": {"cpu": "1", "memory": "64Mi"}, "reprocessingLatency": 0.5}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": "ha"},
        "spec": {
            "image": "registry.example/ha:1",
            "recoveryLatencyBound": 10,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1},
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "sink", "parallelism": 2, "inputs": [{"operator": "src"}], **op},
            ],
        },
    }


def trial(kubeconfig: str, workdir: Path) -> dict[str, float]:
    with bench(kubeconfig, workdir) as b:
        nodes = [b.add_node("2") for _ in range(4)]
        b.wait_nodes_ready(nodes)
        procs = [start(b, "a"), start(b, "b")]
        try:
            who = wait_for(lambda: holder(b), 60, "a Lease holder", interval=0.2)
            leader = next(p for p in procs if f"-{p.pid}-" in who)
            b.create_topology(topology(b.pool))

            def ready() -> bool:
                conds = (b.get_topology("ha").get("status") or {}).get("conditions") or []
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

            wait_for(ready, 120, "the topology Ready")
            victim = b.get_topology("ha")["status"]["plan"]["assignment"]["src-0"]
            b.sim.kill(victim)
            wait_for(lambda: not b.node_ready(victim), 60, f"{victim} NotReady", interval=0.1)
            leader.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            leader.wait()
            log(f"leader {leader.pid} killed; {victim} NotReady")
            wait_for(lambda: holder(b) not in ("", who), 60, "a new holder", interval=0.1)
            lease = time.monotonic() - killed
            wait_for(b.recoveryplans, 90, "a RecoveryPlan", interval=0.1)
            plan = time.monotonic() - killed
            b.custom.delete_namespaced_custom_object(
                GROUP, VERSION, b.namespace, "streamtopologies", "ha"
            )
            time.sleep(3)  # the new leader drops Kopf's finalizer
            return {"lease": lease, "plan": plan}
        finally:
            for p in procs:
                if p.poll() is None:
                    stop_operator(p)


def section(rows: list[dict[str, float]]) -> str:
    def stats(key: str) -> str:
        xs = [r[key] for r in rows]
        return f"{fmt_s(statistics.median(xs))} | {fmt_s(min(xs))} | {fmt_s(max(xs))}"

    t = TIMING
    return "\n".join(
        [
            HEADING,
            "",
            "Generated by `python bench/bench_failover.py --out` against the "
            f"local control plane (2 cores, shared). Two `backstop operator --leader-elect` "
            f"processes, Lease {t['lease_duration']}/{t['renew_deadline']}/{t['retry_period']} s "
            "(duration/renew deadline/retry, the chart's defaults); the leader is SIGKILLed when "
            "a node with tasks is seen NotReady, grace period 1 s, so the recovery waits for the "
            f"failover alone. {len(rows)} trials.",
            "",
            "| from the leader's SIGKILL to | median s | min s | max s |",
            "|---|---|---|---|",
            f"| the standby holds the Lease | {stats('lease')} |",
            f"| **the first RecoveryPlan** (Kopf start, indexes, first tick, plan) | "
            f"{stats('plan')} |",
            "",
            "With one replica and no Lease, recovery stops until Kubernetes evicts the "
            "operator pod from its lost node (300 s by default) and a new pod pulls its image "
            "and starts. The chart tolerates not-ready/unreachable for 30 s only "
            "(`nodeFailureTolerationSeconds`), so the spare replica is replaced soon after. "
            "The cluster test `tests/cluster/test_leader_election.py` checks the bound "
            "(a RecoveryPlan within the grace period + 15 s of the loss) with the leader killed "
            "just before the node.",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", DEFAULT_KUBECONFIG))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        for i in range(args.trials):
            log(f"trial {i + 1}/{args.trials}")
            rows.append(trial(str(args.kubeconfig), Path(tmp)))
            log(f"  lease {rows[-1]['lease']:.2f} s, plan {rows[-1]['plan']:.2f} s")
    text = section(rows)
    print(text)
    if args.out:
        write_section(args.out, HEADING, text + "\n", command=COMMAND)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
