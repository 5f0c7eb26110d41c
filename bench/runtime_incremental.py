"""Incremental vs blocking recovery on REAL nodes: each query's output resuming over time.

The incremental-recovery paper's question, measured: two of the example's nodes are lost at
once, so the one node left cannot hold every lost task; a replacement node arrives
``replace_after`` seconds after the loss is detected. With ``recovery.mode: incremental`` the
operator restarts what fits at once, the higher-priority query first (``sink``, priority 5,
before ``trending``, priority 2), and the rest when the replacement is Ready; with
``blocking`` it waits until everything fits. Per query, the time from the loss being detected
(the first RecoveryPlan) to its sink task processing fresh input again (a new copy, or the
surviving one, processing batches no further behind its sources than in the steady stream
plus 0.5 s) is measured from the tasks' ``status.json``. Run by
``bench/bench_runtime_recovery.py --incremental``.

The paper's Figs. 12-14 plot the *relative latency* of the failed and the normal queries
over time (latency during recovery over latency before the failure): each query's sink lag
(the age of the input of its last batch, ``status.json``) is sampled every 0.5 s and divided
by its median in the steady stream; a lost sink whose new copy has not started yet produces
no output ("down"). Besides ``incremental`` and ``blocking`` (the paper's Storm), the
paper's *BestCase* (all replacement nodes there soon after the failure) is the incremental
run with the replacement arriving at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from backstop_testkit.support.kubetools import node_ready
from bench.runtime_bench import CAUGHT_UP_SLACK, Bench, log, wait

HEADING = "## Runtime on real nodes: incremental vs blocking recovery"
QUERIES = {"sink-0": "sentiment per topic (`sink`, priority 5)", "trending-0": "hot topics "
           "(`trending`, priority 2)"}  # fmt: skip


@dataclass
class Session:
    mode: str
    victims: list[str]
    lost: int
    replacement_ready: float = 0.0  # seconds after detection
    resumed: dict[str, float] = field(default_factory=dict)  # query sink → seconds
    steps: list[str] = field(default_factory=list)
    series: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    """Per query sink: (seconds after detection, lag or None while its sink is down)."""
    steady: dict[str, float] = field(default_factory=dict)


def _sample(
    bench: Bench,
    name: str,
    out: Session,
    marks: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
    lost: list[str],
    seen: dict[str, int],
    at: float,
) -> None:
    """Each query's lag at ``at`` s after the plan, and whether it has resumed.

    ``marks`` are the queries' statuses before the kill and when the loss was detected.
    """
    before, base = marks
    for q in QUERIES:
        s = bench.status(name, q)
        epoch = int(before[q].get("epoch", 0))
        # no output: the lost sink's old status, or its new copy before a first batch
        # (its lag reads 0 until then)
        down = q in lost and (int(s.get("epoch", 0)) <= epoch or not s.get("lag"))
        lag = None if down or s.get("lag") is None else float(s["lag"])
        out.series.setdefault(q, []).append((at, lag))
        if q in out.resumed:
            continue
        if q in lost:  # a new copy, back to its steady lag
            ok = bench.caught_up(name, q, epoch, seen)
        else:  # the surviving copy processes fresh input again
            steady = bench.steady.get(q, 0.0) + CAUGHT_UP_SLACK
            ok = int(s.get("round", 0)) > int(base[q].get("round", 0)) and (lag or 0.0) <= steady
        if ok:
            out.resumed[q] = at


def _steps(bench: Bench, name: str) -> list[str]:
    """The topology's RecoveryPlans in order: trigger, step, tasks and queries back."""
    items = bench.custom.list_namespaced_custom_object(
        "streams.backstop.dev",
        "v1alpha1",
        bench.ns,
        "recoveryplans",
        label_selector=f"streams.backstop.dev/topology={name}",
    )["items"]
    stamp = "creationTimestamp"
    steps = []
    for it in sorted(items, key=lambda i: (i["metadata"][stamp], i["metadata"]["name"])):
        spec = it.get("spec") or {}
        back = ", ".join(spec.get("recoveredQueries") or []) or "none"
        n = len(spec.get("assignments") or [])
        steps.append(
            f"{spec.get('trigger')} step {spec.get('step')}: {n} tasks, queries back: {back}"
        )
    return steps


def run_session(bench: Bench, mode: str, name: str, replace_after: float) -> Session:
    """One deployment with ``recovery.mode = mode``: lose two nodes, replace one later."""
    doc = bench.manifest(name, None)
    doc["spec"]["recovery"]["mode"] = "incremental" if mode == "best-case" else mode
    gen = None
    victims: list[str] = []
    revived: list[str] = []
    reviving: threading.Thread | None = None
    try:
        p, gen = bench.start(name, doc)
        placement: dict[str, list[str]] = {}
        for t, n in p["assignment"].items():
            placement.setdefault(n, []).append(t)
        victims = sorted(placement, key=lambda n: (-len(placement[n]), n))[:2]
        if len(victims) < 2:  # the plan used one node: lose it and an empty one
            victims += [n for n in bench.nodes if n not in victims][: 2 - len(victims)]
        lost = [t for v in victims for t in placement.get(v, [])]
        before = {q: bench.status(name, q) for q in QUERIES}
        log(f"{name} ({mode}): killing {victims} ({len(lost)} of {len(p['assignment'])} tasks)")
        for v in victims:
            bench.cli("nodes", "kill", v)
        # detected: a RecoveryPlan, or (blocking: no plan until everything fits) the session
        wait(f"{name}: the loss detected", lambda: bench.session_seen(name), 180, 0.1)
        t_plan = time.time()
        base = {q: bench.status(name, q) for q in QUERIES}
        out = Session(mode, victims, len(lost))
        out.steady = {q: bench.steady.get(q, 0.0) for q in QUERIES}
        deadline = t_plan + 300
        tail = 0.0  # keep sampling a while after the last query resumed (its settling)
        seen: dict[str, int] = {}
        while (len(out.resumed) < len(QUERIES) or time.time() < tail) and time.time() < deadline:
            now = time.time()
            if len(out.resumed) == len(QUERIES) and not tail:
                tail = now + 10.0
            if not revived and now >= t_plan + replace_after:  # best case: at once
                # the replacement node arrives (in the background: sampling goes on meanwhile)
                reviving = threading.Thread(target=bench.cli, args=("nodes", "revive", victims[0]))
                reviving.start()
                revived.append(victims[0])
            if revived and not out.replacement_ready and node_ready(bench.core, victims[0]):
                out.replacement_ready = now - t_plan
            _sample(bench, name, out, (before, base), lost, seen, now - t_plan)
            time.sleep(0.5)
        out.steps += _steps(bench, name)
        log(
            f"{name} ({mode}): resumed {out.resumed}, "
            f"replacement Ready {out.replacement_ready:.1f}s"
        )
        return out
    finally:
        if gen is not None:
            gen.terminate()
            gen.wait()
        bench.delete(name)
        if reviving is not None:
            reviving.join()
        for v in victims:
            if v not in revived or not node_ready(bench.core, v):
                bench.cli("nodes", "revive", v)
            wait(f"{v} Ready", lambda v=v: node_ready(bench.core, v), 180)


def report(sessions: list[Session], rate: float, replace_after: float, store: str = "") -> str:
    """The page: when each query resumed per recovery mode, then the relative latencies;
    ``store``: a line on where the tasks' state lives, after the introduction."""
    lines = [
        HEADING,
        "",
        "Generated by `bench/bench_runtime_recovery.py --incremental`: the same example and real "
        f"nodes as above, the tweet log at {rate:g} tweets/s; in each run the two nodes with "
        "the most tasks are killed together, so the one node left cannot hold every lost task, "
        f"and one of them comes back (the replacement) {replace_after:g} s after the loss is "
        "detected. *Resumed* is the time from the loss being detected (the first RecoveryPlan) "
        "to the query's sink processing fresh input again: its new copy caught up with its "
        "input again, no further behind than in the steady stream plus 0.5 s (the new copy or "
        "the surviving one).",
        "",
        *([store, ""] if store else []),
        "| recovery mode | lost tasks | replacement Ready | "
        + " | ".join(f"{d}: resumed" for d in QUERIES.values())
        + " | RecoveryPlans |",
        "|---|---|---|" + "---|" * len(QUERIES) + "---|",
    ]
    for s in sessions:
        cells = [f"{s.resumed[q]:.1f} s" if q in s.resumed else "not in 300 s" for q in QUERIES]
        lines.append(
            f"| {s.mode} | {s.lost} | {s.replacement_ready:.1f} s | "
            + " | ".join(cells)
            + f" | {'; '.join(s.steps)} |"
        )
    return "\n".join(lines) + "\n\n" + relative_report(sessions)


BUCKET = 5.0
"""Seconds per row of the relative-latency table."""


def relative(s: Session, q: str, lo: float) -> str:
    """The worst relative latency of query ``q`` in ``[lo, lo + BUCKET)``: "down" when its
    sink produced nothing then, "" when it was not sampled (the run had ended)."""
    got = [lag for t, lag in s.series.get(q, []) if lo <= t < lo + BUCKET]
    if not got:
        return ""
    lags = [x for x in got if x is not None]
    if not lags:
        return "down"
    base = max(s.steady.get(q, 0.0), 0.05)  # a sink lag below 50 ms is noise
    return f"{max(lags) / base:.1f}"


def relative_report(sessions: list[Session]) -> str:
    """The paper's Figs. 12-14 as a table: relative latency per query and mode over time."""
    end = max((t for s in sessions for v in s.series.values() for t, _ in v), default=0.0)
    cols = [(s, q) for s in sessions for q in QUERIES]
    head = " | ".join(f"{s.mode}: {q.removesuffix('-0')}" for s, q in cols)
    lines = [
        "Relative latency (the paper's Figs. 12-14): each query's sink lag over its median "
        "lag in the steady stream before the failure, worst value per 5 s after the loss was "
        "detected; *down*: the query's sink is lost and its new copy has not started yet "
        "(no output). 1.0 is the steady stream.",
        "",
        f"| seconds after detection | {head} |",
        "|---|" + "---|" * len(cols),
    ]
    lo = 0.0
    while lo <= end:
        cells = [relative(s, q, lo) for s, q in cols]
        lines.append(f"| {lo:.0f}-{lo + BUCKET:.0f} | " + " | ".join(cells) + " |")
        lo += BUCKET
    return "\n".join(lines) + "\n"
