"""Incremental vs blocking recovery on REAL nodes: each query's output resuming over time.

The incremental-recovery paper's question, measured: ``lose`` of the nodes holding the most
tasks are lost at once, so the nodes left cannot hold every lost task; replacement nodes
arrive one by one, the first ``replace_after`` seconds after the loss is detected and then
one every ``arrive_every`` seconds (the paper acquires its new nodes over minutes). With
``recovery.mode: incremental`` the operator restarts what fits at once, the higher-priority
query first (``sink``, priority 5, before ``trending``, priority 2), and more as each
replacement turns Ready; with ``blocking`` it waits until everything fits. Per query, the
time from the loss being detected (the first RecoveryPlan) to its sink task processing fresh
input again (a new copy, or the surviving one, processing batches no further behind its
sources than in the steady stream plus 0.5 s) is measured from the tasks' ``status.json``.
Run by ``bench/bench_runtime_recovery.py --incremental``; ``--nodes``, ``--lose`` and
``--cpu-scale`` (every task's CPU request times this: smaller nodes, as far as the planner is
concerned) set the scale.

The paper's Figs. 12-14 plot the *relative latency* of the failed and the normal queries
over time (latency during recovery over latency before the failure): each query's sink lag
(the age of the input of its last batch, ``status.json``) is sampled every 0.5 s and divided
by its median in the steady stream; a lost sink whose new copy has not started yet produces
no output ("down"). Besides ``incremental`` and ``blocking`` (the paper's Storm), the
paper's *BestCase* (all replacement nodes there soon after the failure) is the incremental
run with every replacement arriving at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from backstop_testkit.support.catchup import CAUGHT_UP_SLACK
from backstop_testkit.support.kubetools import node_ready
from bench.runtime_bench import Bench, log, wait

HEADING = "## Runtime on real nodes: incremental vs blocking recovery"
COMPLETE_HEADING = "## Runtime on real nodes: recovery from a complete failure"
"""The page's heading when every node is lost (``--lose`` = ``--nodes``: the seed's Section 6)."""
QUERIES = {"sink-0": "sentiment per topic (`sink`, priority 5)", "trending-0": "hot topics "
           "(`trending`, priority 2)"}  # fmt: skip


@dataclass(frozen=True)
class Scale:
    """How large a session is: nodes lost together, when their replacements arrive."""

    lose: int = 2
    replace_after: float = 20.0
    """Seconds from detection to the first replacement (0: all at once, the best case)."""
    arrive_every: float = 20.0
    """Seconds between two replacements."""
    cpu_scale: float = 1.0
    """Every task's CPU request times this (the nodes as the planner sees them smaller)."""

    def arrivals(self, best_case: bool) -> list[float]:
        """Seconds after detection at which each replacement arrives.

        >>> Scale(lose=3, replace_after=10, arrive_every=15).arrivals(False)
        [10, 25, 40]
        >>> Scale(lose=3).arrivals(True)
        [0.0, 0.0, 0.0]
        """
        if best_case:
            return [0.0] * self.lose
        return [self.replace_after + i * self.arrive_every for i in range(self.lose)]


def scaled_cpu(quantity: str, factor: float) -> str:
    """A CPU quantity times ``factor``, in millicores.

    >>> scaled_cpu("150m", 2.5), scaled_cpu("1", 0.5), scaled_cpu("0.25", 2)
    ('375m', '500m', '500m')
    """
    milli = float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000
    return f"{round(milli * factor)}m"


@dataclass
class Session:
    mode: str
    victims: list[str]
    lost: int
    ready: list[float] = field(default_factory=list)
    """Seconds after detection at which each replacement turned Ready, in arrival order."""
    resumed: dict[str, float] = field(default_factory=dict)  # query sink → seconds
    steps: list[str] = field(default_factory=list)
    series: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    progress: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    """Per query sink: its last round seen to advance, when (seconds after detection), and
    its lag then."""
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
        lag = None if down or s.get("lag") is None else _latency(out, q, s, at)
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


STALLED = 1.0
"""Seconds without a new round after which a sink's output counts as stalled (it writes
``status.json`` four times a second and a round is 100 ms)."""


def _latency(out: Session, q: str, s: dict[str, Any], at: float) -> float:
    """The query's output latency at ``at``: its sink's lag while its rounds advance; while
    they stall (a surviving sink waiting for lost upstream tasks), the lag of its last
    round plus the time since, the age its next output will have at least, as input
    queued during a recovery ages in the paper's measure.

    >>> out = Session("incremental", [], 0)
    >>> [_latency(out, "s", {"round": r, "lag": 0.2}, t) for r, t in [(5, 0), (6, 1), (6, 1.5)]]
    [0.2, 0.2, 0.2]
    >>> _latency(out, "s", {"round": 6, "lag": 0.2}, 4.0)
    3.2
    """
    r, lag = int(s.get("round", 0)), float(s.get("lag") or 0.0)
    last = out.progress.get(q)
    if last is None or r != last[0]:
        out.progress[q] = (r, at, lag)
        return lag
    since = at - last[1]
    return last[2] + since if since > STALLED else lag


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


def _deploy(bench: Bench, mode: str, name: str, cpu_scale: float) -> dict[str, Any]:
    """The example as ``name`` with ``recovery.mode`` for ``mode`` and its CPU scaled."""
    doc = bench.manifest(name, None)
    doc["spec"]["recovery"]["mode"] = "incremental" if mode == "best-case" else mode
    for op in doc["spec"]["operators"]:
        res = op.get("resources") or {}
        if "cpu" in res:
            res["cpu"] = scaled_cpu(str(res["cpu"]), cpu_scale)
    return doc


def _victims(p: dict[str, Any], nodes: list[str], lose: int) -> list[str]:
    """The ``lose`` nodes holding the most tasks (then empty ones, if too few hold any)."""
    placement: dict[str, int] = {}
    for n in p["assignment"].values():
        placement[n] = placement.get(n, 0) + 1
    victims = sorted(placement, key=lambda n: (-placement[n], n))[:lose]
    return victims + [n for n in nodes if n not in victims][: lose - len(victims)]


def _arrive(
    bench: Bench, victims: list[str], revivals: list[threading.Thread], at: float, when: list[float]
) -> None:
    """Bring back each killed node whose arrival time ``when`` has come by ``at`` (in the
    background: sampling goes on meanwhile)."""
    while len(revivals) < len(victims) and at >= when[len(revivals)]:
        v = victims[len(revivals)]
        revivals.append(threading.Thread(target=bench.cli, args=("nodes", "revive", v)))
        revivals[-1].start()


def run_session(bench: Bench, mode: str, name: str, scale: Scale) -> Session:
    """One deployment with ``recovery.mode = mode``: lose ``scale.lose`` nodes at once,
    their replacements arriving one by one (all at once for the best case)."""
    doc = _deploy(bench, mode, name, scale.cpu_scale)
    gen = None
    victims: list[str] = []
    revivals: list[threading.Thread] = []
    try:
        p, gen = bench.start(name, doc)
        victims = _victims(p, bench.nodes, scale.lose)
        lost = [t for t, n in p["assignment"].items() if n in victims]
        before = {q: bench.status(name, q) for q in QUERIES}
        log(f"{name} ({mode}): killing {victims} ({len(lost)} of {len(p['assignment'])} tasks)")
        kills = [threading.Thread(target=bench.cli, args=("nodes", "kill", v)) for v in victims]
        for killer in kills:  # together: one CLI call each, side by side
            killer.start()
        for killer in kills:
            killer.join()
        # detected: a RecoveryPlan, or (blocking: no plan until everything fits) the session
        wait(f"{name}: the loss detected", lambda: bench.session_seen(name), 180, 0.1)
        t_plan = time.time()
        base = {q: bench.status(name, q) for q in QUERIES}
        out = Session(mode, victims, len(lost))
        out.steady = {q: bench.steady.get(q, 0.0) for q in QUERIES}
        arrivals = scale.arrivals(mode == "best-case")
        deadline = t_plan + 300 + arrivals[-1]
        tail = 0.0  # keep sampling a while after the last query resumed (its settling)
        seen: dict[str, int] = {}
        while (len(out.resumed) < len(QUERIES) or time.time() < tail) and time.time() < deadline:
            now = time.time()
            if len(out.resumed) == len(QUERIES) and not tail:
                tail = now + 10.0
            _arrive(bench, victims, revivals, now - t_plan, arrivals)
            while len(out.ready) < len(revivals):  # back: `nodes revive` waits for Ready
                k = len(out.ready)
                if revivals[k].is_alive() or not node_ready(bench.core, victims[k]):
                    break
                out.ready.append(now - t_plan)
            _sample(bench, name, out, (before, base), lost, seen, now - t_plan)
            time.sleep(0.5)
        out.steps += _steps(bench, name)
        log(f"{name} ({mode}): resumed {out.resumed}, replacements Ready {out.ready}")
        return out
    finally:
        if gen is not None:
            gen.terminate()
            gen.wait()
        bench.delete(name)
        for thread in revivals:
            thread.join()
        for k, v in enumerate(victims):
            if k >= len(revivals) or not node_ready(bench.core, v):
                bench.cli("nodes", "revive", v)
            wait(f"{v} Ready", lambda v=v: node_ready(bench.core, v), 180)


def _setting(rate: float, scale: Scale, nodes: int) -> str:
    """What the sessions ran: nodes, losses, arrivals, requests."""
    cpu = (
        ""
        if scale.cpu_scale == 1
        else f" Every task's CPU request is {scale.cpu_scale:g} times the example's, so a "
        "node holds proportionally fewer tasks (smaller nodes, as the planner sees them)."
    )
    lost = (
        f"all {nodes} nodes are killed together, one kill command per node side by side "
        "(a complete failure, the incremental-recovery seed's Section 6: nothing runs, the "
        "tweet log and every checkpoint outlive the nodes in the object store, the operator "
        "runs off the nodes as the seed's coordinator in the standby data centre)"
        if scale.lose >= nodes
        else f"the {scale.lose} nodes with the most tasks are killed together (one kill command "
        "per node, side by side), so the nodes left cannot hold every lost task,"
    )
    return (
        "Generated by `bench/bench_runtime_recovery.py --incremental`: "
        "`examples/twitter-sentiment.yaml` on "
        f"{nodes} real nodes, the tweet log at {rate:g} tweets/s; in each run {lost} "
        "and replacements for them arrive one by one (each a killed node coming "
        f"back): the first {scale.replace_after:g} s after the loss is detected, then one every "
        f"{scale.arrive_every:g} s; in *best-case* all at once.{cpu} *Resumed* is the time from "
        "the loss being detected (the first RecoveryPlan) to the query's sink processing fresh "
        "input again: its new copy caught up with its input again, no further behind than in "
        "the steady stream plus 0.5 s (the new copy or the surviving one)."
    )


def report(sessions: list[Session], rate: float, scale: Scale, nodes: int, store: str = "") -> str:
    """The page: when each query resumed per recovery mode, then the relative latencies;
    ``store``: a line on where the tasks' state lives, after the introduction."""
    lines = [
        COMPLETE_HEADING if scale.lose >= nodes else HEADING,
        "",
        _setting(rate, scale, nodes),
        "",
        *([store, ""] if store else []),
        "| recovery mode | lost tasks | replacements Ready | "
        + " | ".join(f"{d}: resumed" for d in QUERIES.values())
        + " | RecoveryPlans |",
        "|---|---|---|" + "---|" * len(QUERIES) + "---|",
    ]
    for s in sessions:
        cells = [f"{s.resumed[q]:.1f} s" if q in s.resumed else "not resumed" for q in QUERIES]
        ready = ", ".join(f"{t:.1f} s" for t in s.ready) or "none before the end"
        lines.append(
            f"| {s.mode} | {s.lost} | {ready} | " + " | ".join(cells) + f" | {'; '.join(s.steps)} |"
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
        "Relative latency (the paper's Figs. 12-14): each query's output latency over its "
        "median in the steady stream before the failure, worst value per 5 s after the loss "
        "was detected. The latency is the sink's lag (the age of the input of its last "
        "round); while a surviving sink's rounds stall (its upstream tasks lost), the lag of "
        "its last round plus the time since. *down*: the query's sink is lost and its new "
        "copy has not started yet (no output). 1.0 is the steady stream.",
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
