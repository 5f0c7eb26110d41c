#!/usr/bin/env python3
"""The supervisor's recovery round at 10k tasks, in-process: what the first RecoveryPlan waits on.

Why: ``bench_scale.py`` measures detection → first RecoveryPlan against the API server,
where the figure is mostly the host's load. This runs the very round that writes the
first step (:func:`backstop.controller.supervisor.recovery_tick`: the decision in the
capacity ledger's booking, the status write, the RecoveryPlan and ConfigMap) over a
10k-task topology with every pod indexed and in the ledger, against an API stand-in that
applies the merge patch and answers at once, and reports CPU seconds (not wall: the host
is shared). Each case runs in a fresh interpreter:

* ``cold``: as the operator is before its first recovery (CP-SAT not imported: the
  operator imports OR-Tools only where a planner needs it);
* ``warm``: CP-SAT already imported;
* ``warm, collected``: also with the scheduled full collection just done
  (:mod:`backstop.controller.gckeeper`), as the operator is between two of them.

The plan is :mod:`bench.bench_scale_tick`'s (checked by the failure-effect evaluator),
the loss that of its node with the most tasks, past its grace period.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.support.docsection import write_section
from bench.procstat import loadavg

HEADING = "## Scale: the recovery round at 10k tasks (in-process)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "recovery-round.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_recovery_round.py --out"
CASES = {"cold": (False, False), "warm": (True, False), "warm, collected": (True, True)}


class FakeKube:
    """The API calls of a recovery round: the status patch applied, the rest recorded."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status, self.rv = status, 1
        self.calls: list[str] = []

    def patch_status_returning(
        self, ns: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        def merge(old: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
            out = dict(old)
            for k, v in p.items():
                if v is None:
                    out.pop(k, None)
                elif isinstance(v, dict) and isinstance(old.get(k), dict):
                    out[k] = merge(old[k], v)
                else:
                    out[k] = v
            return out

        self.status, self.rv = merge(self.status, patch), self.rv + 1
        self.calls.append("status")
        return {"status": copy.deepcopy(self.status), "metadata": {"resourceVersion": str(self.rv)}}

    def put_recoveryplan(self, manifest: dict[str, Any], phase: str) -> None:
        self.calls.append("recoveryplan")

    def put_configmap(self, manifest: dict[str, Any]) -> None:
        self.calls.append("configmap")


def one_case(warm: bool, collected: bool) -> dict[str, Any]:
    """One round in this interpreter (run by :func:`main` in a fresh one per case)."""
    import logging

    from backstop.controller import gckeeper, supervisor

    tick, bodies, assignment, used, now = setup()
    kube: Any = tick.kube
    if warm:
        import ortools.sat.python.cp_model  # noqa: F401
    if collected:
        gckeeper.collect_and_freeze()
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logging.getLogger(supervisor.__name__).addHandler(Keep())
    logging.getLogger(supervisor.__name__).setLevel(logging.INFO)
    cpu, wall = time.process_time(), time.perf_counter()
    acted = supervisor.recovery_tick(tick, bodies, now=now)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    issued = tick.status.recovery_or_empty.last_step
    return {
        "acted": acted,
        "cpu": cpu,
        "wall": wall,
        "calls": kube.calls,
        "lost": sum(1 for n in assignment.values() if n == used[0]),
        "recovered": len(issued.recover) if issued is not None else 0,
        "log": records,
    }


def steady_case() -> dict[str, Any]:
    """A whole supervision round with nothing to do, then a steady one (same inputs), at
    10k pods with every node Ready (run by :func:`main` in a fresh interpreter)."""
    from backstop.controller import gckeeper, supervisor
    from backstop.controller.daemon import round_inputs
    from backstop.domain.incidents import NodeInfo

    tick, bodies, _assignment, used, _now = setup()
    info = tick.nodes[used[0]]
    tick.nodes[used[0]] = NodeInfo(
        info.name, True, 0.0, info.cpu, True, False, memory=info.memory, pods=info.pods
    )
    gckeeper.collect_and_freeze()
    out: dict[str, Any] = {"rounds": []}
    for _ in range(3):  # the first writes the conditions, the next settles, then steady
        tick.inputs = round_inputs(0, len(bodies), tick.nodes, tick.resource_version, 1)
        steady = supervisor._steady(tick)
        cpu, wall = time.process_time(), time.perf_counter()
        supervisor.supervise_once(tick, lambda: list(bodies))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out["rounds"].append({"steady": steady, "cpu": cpu, "wall": wall})
    return out


def setup() -> tuple[Any, list[Mapping[str, Any]], dict[str, str], list[str], float]:
    """The 10k-task topology, its pods indexed and in the ledger, the Tick of a round
    after its fullest node was lost (past the grace period): (tick, pods, assignment,
    used nodes, now)."""
    from backstop.controller.tick import planned_pods, status_wire
    from backstop.domain.incidents import NodeInfo
    from backstop.k8s.ledger import CapacityLedger
    from bench.bench_scale_tick import chain_plan

    built = chain_plan()  # 10 x 1000 tasks, 50 half-chains per node, 8 spare nodes
    used, names, assignment = built.used, built.names, built.assignment
    plan, status = built.plan, built.status
    bodies = built.running_pods()
    ledger = CapacityLedger()
    ledger.replace_pods(bodies)
    ledger.synced.set()
    now = time.time()
    nodes = {n: NodeInfo(n, True, 0.0, 32.0, True, False, memory=2.0**38, pods=400) for n in names}
    nodes[used[0]] = NodeInfo(
        used[0], False, now - 1.5, 32.0, False, False, memory=2.0**38, pods=400
    )
    kube = FakeKube(status.dump())
    tick = built.tick(nodes, kube, ledger)
    planned_pods(tick, plan)  # built once per plan, as in the steady state
    status_wire(tick)  # the status's compact form, kept by the steady rounds
    return tick, bodies, assignment, used, now


def child(case: str) -> dict[str, Any]:
    """One case in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, __file__, "--case", case], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _measure(repeats: int) -> list[str]:
    """Every case and the steady rounds, each in fresh interpreters: the page's lines."""
    before = loadavg()
    rows = []
    for case in CASES:
        runs = [child(case) for _ in range(repeats)]
        if not all(r["acted"] and r["calls"][:1] == ["status"] for r in runs):
            raise SystemExit(f"{case}: no step written: {runs[0]}")
        rows.append((case, runs))
    steady = [child("steady") for _ in range(repeats)]
    after = loadavg()
    first = rows[0][1][0]
    lines = [
        HEADING,
        "",
        f"Generated by `python bench/bench_recovery_round.py --out`: the "
        f"supervisor's round that writes the first RecoveryPlan (`recovery_tick`), over "
        f"10,000 tasks (10 × 1000, forward chains, every pod indexed and in the capacity "
        f"ledger) after the loss of the node with {first['lost']} tasks (the first step "
        f"recovers {first['recovered']}), against an API stand-in that answers at once; a "
        f"fresh interpreter per run, median of {repeats}. CPU seconds of the round "
        f"(wall in brackets). Load average {before} before, {after} after (2 cores shared).",
        "",
        "| case | CPU s (wall s) | the round's own account (last run) |",
        "|---|---|---|",
    ]
    for case, runs in rows:
        cpu = statistics.median(r["cpu"] for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        said = "; ".join(runs[-1]["log"]).split(": ", 1)[-1]
        lines.append(f"| {case} | {cpu:.3f} ({wall:.3f}) | {said} |")
    whole = statistics.median(r["rounds"][1]["cpu"] for r in steady)
    quiet = statistics.median(r["rounds"][-1]["cpu"] for r in steady)
    if not all(r["rounds"][-1]["steady"] and not r["rounds"][1]["steady"] for r in steady):
        raise SystemExit(f"the rounds did not settle: {steady[0]}")
    lines += [
        "",
        f"A supervision round with nothing lost (`supervise_once`, every node Ready, all "
        f"10,000 pods Running and matching the plan), median CPU s of {repeats}: a "
        f"whole round that finds everything settled {whole:.3f}, the next one on the same "
        f"inputs (a steady round: only the recovery decision) {quiet:.3f}.",
    ]
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh interpreters per case")
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    p.add_argument("--case", choices=[*CASES, "steady"], help=argparse.SUPPRESS)  # a child's
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(steady_case() if args.case == "steady" else one_case(*CASES[args.case])))
        return 0
    lines = _measure(args.repeats)
    text = "\n".join(lines)
    sys.stdout.write(text + "\n")
    if args.out:
        write_section(args.out, HEADING, text, command=COMMAND)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
