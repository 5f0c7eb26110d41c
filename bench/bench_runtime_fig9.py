#!/usr/bin/env python3
"""Incremental against blocking recovery on the seed's Fig. 9 topology, in local mode.

*Incremental Recovery in Distributed Stream Processing Systems*, Section 7.2, runs its
Figs. 13-15 on a topology of fifteen queries (its Fig. 9) "under the local mode of Storm"
"to have more flexibility on controlling the location and timing of node failures". This
is the same experiment with Backstop's runtime in local mode (every task a local process,
:class:`~backstop_testkit.support.runtime_harness.LocalTopology`):

- **The topology** (:func:`fig9_spec`): a source of tweets at ``--rate`` per second, a parser
  emitting each hashtag, and fifteen operators of one task each, ``o0``…``o14``, the output
  of the queries Q0…Q14. ``o0``-``o3`` count hashtags over sliding windows of 5, 10, 20 and
  30 s; ``o4``-``o14`` each keep the newest top tags of the two window streams they
  subscribe to (:class:`~backstop_runtime.examples.hashtags.TopMerge`). The seed's text names
  the operators but its figure's edges are not in the text: :data:`MERGES` rebuilds them so
  that, as the seed says, a failure of ``o0``-``o3`` fails every query and a failure of
  ``o12``-``o14`` fails only those three.
- **The nodes**: the source and parser on a node that stays; the fifteen operators two per
  node on eight nodes (the seed kills "the 8 nodes where the output partitions of the 15
  queries are deployed"). A scenario SIGKILLs the tasks of some of these nodes at once.
- **The recovery**: replacement nodes, each with room for two tasks, arrive one by one,
  ``--replace-after`` seconds after the failure and then every ``--arrive-every`` seconds.
  The planner's own :class:`~planners.recovery.session.RecoverySession` decides what each
  arrival restarts: ``incremental`` with the seed's ``best-density``, one plan per
  arrival; ``blocking`` (the seed's Storm) everything at the last arrival. The harness starts
  the planned tasks as the kubelet would start their pods; each restores its newest
  checkpoint and replays from its producers.
- **The measure**, the seed's: a query's latency is the mean end-to-end latency of the input
  behind its output, here of each new round its task processes (when it processed it, from
  its ``status.json`` sampled four times a second, less when the source read that round);
  the relative latency is that over the same before the failure. A query whose task is lost
  or waits for a task upstream processes no new round: it is *silent*. A failed query is
  *back* once its new copy processes a round past the failure's within :data:`SLACK` of
  its steady latency.

Figs. 13/14: ``o0``-``o3`` lost (upstream), or ``o12``-``o14`` lost (downstream), two nodes.
Fig. 15: four or eight nodes lost, the operators taken in topological order (b) or in
reverse (a). Fig. 10's setting: 1, 2 and 3 consecutive node failures, :data:`WAVE` apart
(what Storm replays from the sources at every failure, Backstop does not). As in the seed,
Fig. 13 compares incremental with blocking recovery; Figs. 10 and 15 are incremental.
Prints a markdown section; ``--out`` writes ``docs/benchmarks/runtime-fig9.md``.
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.spec import StreamTopologySpec
from backstop_runtime.examples.tweets import write_files
from backstop_testkit.support.docsection import emit
from backstop_testkit.support.runtime_harness import LocalTopology
from planners.recovery.model import DEFAULT_UTILIZATION
from planners.recovery.session import NodeReady, NodesLost, RecoverySession

HEADING = "## Runtime, local mode: incremental recovery on Fig. 9's fifteen queries"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "runtime-fig9.md"
COMMAND = "python bench/bench_runtime_fig9.py --out"

OPS = tuple(f"o{i}" for i in range(15))
WINDOWS = {"o0": (5, 1), "o1": (10, 2), "o2": (20, 4), "o3": (30, 5)}
"""The four sliding-window aggregates: window and slide in seconds."""
MERGES = {
    "o4": ("o0", "o1"), "o5": ("o0", "o2"), "o6": ("o0", "o3"), "o7": ("o1", "o2"),
    "o8": ("o1", "o3"), "o9": ("o2", "o3"), "o10": ("o4", "o5"), "o11": ("o6", "o7"),
    "o12": ("o8", "o9"), "o13": ("o10", "o11"), "o14": ("o12", "o13"),
}  # fmt: skip
"""The queries above the windows and the two streams each subscribes to."""
TASK_CPU = 0.1
SLOTS = 2
WAVE = 20.0
"""Seconds between two consecutive failures (the seed's Fig. 10: 60 s, scaled down)."""
"""Tasks a node holds (the seed's eight nodes for fifteen operators)."""
NEW_CPU = SLOTS * TASK_CPU / DEFAULT_UTILIZATION + 0.01
"""A replacement node's CPU: room for :data:`SLOTS` tasks under the planner's cap."""
SLACK = 0.5
"""A query is available again once its lag is within this of its steady lag."""
STALLED = 1.0
"""Seconds without a new round after which a query's latency grows with the wait."""
BUCKET = 5.0
SAMPLE = 0.25
"""Seconds between two samples."""
STATUS_EVERY = 0.25
"""A task writes its ``status.json`` this often: a round newer than the one it shows was
processed at most this long before it was read."""
FLOOR = 0.002
"""Relative latencies divide by this at least (a task's lag is exact, but a round of a
few milliseconds is as fast as the process runs it)."""
SETTLE = 10.0
"""Seconds a run goes on after its last failed query is back (its latency settling)."""
"""A steady latency below this is noise: relative latencies divide by this at least."""
BATCH_SECONDS = 0.1
"""The source reads this much input per round (the runtime's batch interval)."""


def fig9_spec(inp: Path, rate: float) -> StreamTopologySpec:
    """The seed's Fig. 9 (edges rebuilt, see :data:`MERGES`), one task per operator."""

    def op(name: str, fn: str, inputs: list[dict[str, str]], **config: Any) -> dict[str, Any]:
        return {
            "name": name,
            "parallelism": 1,
            "reprocessingLatency": 1.0,
            "resources": {"cpu": f"{TASK_CPU * 1000:.0f}m", "memory": "128Mi"},
            "inputs": inputs,
            "config": {"function": f"backstop_runtime.examples.hashtags:{fn}", **config},
        }

    source = {
        **op("source", "", []),
        "config": {
            "function": "backstop_runtime.sources:JsonlSource",
            "path": str(inp),
            "bounded": True,
            "maxRecordsPerSecond": rate,
            "maxRecordsPerBatch": max(1, round(rate * BATCH_SECONDS)),  # paced in 0.1 s rounds
        },
    }
    del source["inputs"]
    ops = [source, op("parser", "Parser", [{"operator": "source", "grouping": "rebalance"}])]
    for name, (size, slide) in WINDOWS.items():
        keyed = [{"operator": "parser", "grouping": "key"}]
        ops.append(op(name, "SlidingCount", keyed, windowSeconds=size, slideSeconds=slide,
                      label=name))  # fmt: skip
    for name, (a, b) in MERGES.items():
        subs = [{"operator": a, "grouping": "global"}, {"operator": b, "grouping": "global"}]
        last = name == OPS[-1]  # nothing consumes it: a sink
        fn, out = ("TopMergeSink", {"path": str(inp.parent / "out")}) if last else ("TopMerge", {})
        ops.append(op(name, fn, subs, label=name, **out))
    for o in ops[2:]:
        o["output"] = True
    return StreamTopologySpec.model_validate(
        {"image": "backstop/runtime:0.2.0", "recoveryLatencyBound": 60.0, "operators": ops}
    )


def pairs(order: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Operators two per node in ``order``.

    >>> pairs(("a", "b", "c"))
    (('a', 'b'), ('c',))
    """
    return tuple(order[i : i + SLOTS] for i in range(0, len(order), SLOTS))


@dataclass(frozen=True)
class Scenario:
    name: str
    figure: str
    lost: tuple[tuple[str, ...], ...]
    """The operators of each node lost."""
    layout: tuple[tuple[str, ...], ...]
    """Every operator's node, two per node (the lost ones among them)."""
    waves: tuple[float, ...] = ()
    """Seconds after the first failure at which each lost node dies (default: all at once)."""

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(o for node in self.lost for o in node)

    def deaths(self) -> tuple[float, ...]:
        """When each lost node dies, in the order of :attr:`lost`."""
        return self.waves or (0.0,) * len(self.lost)


def _scenario(name: str, figure: str, order: tuple[str, ...], nodes: int) -> Scenario:
    layout = pairs(order)
    return Scenario(name, figure, layout[:nodes], layout)


SCENARIOS = {
    "upstream": Scenario(
        "o0-o3 lost (2 nodes)", "13, 14(b)", pairs(OPS[:4]), pairs(OPS)
    ),
    "downstream": Scenario(
        "o12-o14 lost (2 nodes)", "13, 14(a)", (("o12", "o13"), ("o14",)),
        (*pairs(OPS[:12]), ("o12", "o13"), ("o14",)),
    ),
    "reverse-4": _scenario("4 nodes, reverse order", "15(a)", OPS[::-1], 4),
    "reverse-8": _scenario("8 nodes, reverse order", "15(a)", OPS[::-1], 8),
    "topological-4": _scenario("4 nodes, topological order", "15(b)", OPS, 4),
    "topological-8": _scenario("8 nodes, topological order", "15(b)", OPS, 8),
    **{
        f"consecutive-{n}": Scenario(
            f"{n} consecutive node failure{'s' if n > 1 else ''}, {WAVE:g} s apart", "10",
            pairs(OPS[4:10])[:n], pairs(OPS), tuple(WAVE * i for i in range(n)),
        )
        for n in (1, 2, 3)
    },
}  # fmt: skip
CONSECUTIVE = ("consecutive-1", "consecutive-2", "consecutive-3")


def cluster(s: Scenario) -> tuple[dict[str, str], dict[str, float], list[str]]:
    """The placement before the failure (task → node), every node's CPU (full: only
    replacements have room) and the nodes lost."""
    assignment = {"source-0": "in", "parser-0": "in"}
    for i, node in enumerate(s.layout):
        assignment.update({f"{o}-0": f"node-{i}" for o in node})
    lost = [f"node-{s.layout.index(node)}" for node in s.lost]
    load: dict[str, float] = {}
    for n in assignment.values():
        load[n] = load.get(n, 0.0) + TASK_CPU
    return assignment, {n: c / DEFAULT_UTILIZATION for n, c in load.items()}, lost


class Ingest:
    """When the source read each round, from its ``status.json`` (its round and that
    round's lag) sampled as the run goes; rounds between two samples by interpolation."""

    def __init__(self) -> None:
        self.rounds: list[int] = []
        self.times: list[float] = []

    def note(self, s: dict[str, Any], now: float) -> None:
        r = int(s.get("round", 0))
        if r > 0 and (not self.rounds or r > self.rounds[-1]):
            self.rounds.append(r)
            self.times.append(now - float(s.get("lag") or 0.0))

    def at(self, r: int) -> float | None:
        """When round ``r`` was read (``None`` before the first sample).

        >>> i = Ingest(); i.note({"round": 10, "lag": 0.0}, 1.0); i.note({"round": 20}, 2.0)
        >>> i.at(15), i.at(25), i.at(5)
        (1.5, 2.5, None)
        """
        k = bisect.bisect_left(self.rounds, r)
        if k < len(self.rounds) and self.rounds[k] == r:
            return self.times[k]
        if k == 0:
            return None
        if k == len(self.rounds):
            return self.times[-1] + (r - self.rounds[-1]) * BATCH_SECONDS
        r0, r1, t0, t1 = self.rounds[k - 1], self.rounds[k], self.times[k - 1], self.times[k]
        return t0 + (t1 - t0) * (r - r0) / (r1 - r0)


@dataclass
class Run:
    scenario: str
    mode: str
    failed: tuple[str, ...]
    t0: float = 0.0
    """When the tasks were killed (Unix time)."""
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Per query, (when, latency) of every new round it processed."""
    seen: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Per query, its newest round and when it was sampled."""
    steady: dict[str, float] = field(default_factory=dict)
    back: dict[str, float] = field(default_factory=dict)
    """Seconds from the failure until each failed query is available again."""
    killed: dict[str, float] = field(default_factory=dict)
    """Seconds after the first failure at which each failed query's node died."""
    plans: list[str] = field(default_factory=list)


def rounds_done(run: Run, o: str, r: int, lag: float, now: float, ingest: Ingest) -> None:
    """Record the rounds ``o`` processed since its last sample, up to ``r``: each one's
    latency is when it was processed less when the source read it. Round ``r`` was
    processed ``lag`` after it was read (the task says so); an earlier one is taken to
    have had the same lag, but no earlier than the task could have processed it (after its
    previous round, and after the previous sample's ``status.json`` was written) and no
    later than round ``r``. Rounds it had processed before (a restarted copy's replay) are
    not new output and do not count.

    >>> run, ingest = Run("x", "incremental", ()), Ingest()
    >>> for r in (10, 40):  # round r read at r seconds
    ...     ingest.note({"round": r, "lag": 0.0}, float(r))
    >>> run.seen["q"] = (10, 10.0)
    >>> rounds_done(run, "q", 12, 0.5, 13.0, ingest)
    >>> [(round(t, 2), round(x, 2)) for t, x in run.points["q"]]
    [(11.5, 0.5), (12.5, 0.5)]
    >>> run.seen["q"] = (12, 30.0)  # seen stalled at round 12 until 30 s
    >>> rounds_done(run, "q", 30, 0.5, 31.0, ingest)
    >>> late = run.points["q"][2:]
    >>> len(late), late[0], late[-1]
    (18, (30.0, 17.0), (30.5, 0.5))
    """
    last, lo = run.seen.get(o, (r, now))
    read_r = ingest.at(r)
    done_r = min(now, read_r + lag) if read_r is not None else now
    for rho in range(last + 1, r + 1):
        read = ingest.at(rho)
        if read is not None:
            done = min(max(read + lag, lo), done_r)
            run.points.setdefault(o, []).append((done, max(done - read, 0.0)))
            lo = done
    run.seen[o] = (max(r, last), max(lo, now - STATUS_EVERY))


def sample(run: Run, topo: LocalTopology, ingest: Ingest, before: dict[str, dict[str, Any]],
           up: set[str]) -> None:  # fmt: skip
    """One sample of the source and every query. A failed query counts from its new copy's
    first round past the failure's on (``before``: its status at the failure), and is back
    once such a round's lag is within :data:`SLACK` of its steady latency."""
    now = time.time()
    ingest.note(topo.status("source-0"), now)
    for o in OPS:
        q = f"{o}-0"
        s = topo.status(q)
        old = before.get(q, {})
        if q in before and (q not in up or int(s.get("epoch", 0)) <= int(old.get("epoch", 0))):
            last, _ = run.seen.get(o, (0, now))
            run.seen[o] = (last, now)  # down: nothing processed
            continue
        r, lag = int(s.get("round", 0)), float(s.get("lag") or 0.0)
        rounds_done(run, o, r, lag, now, ingest)
        fresh = r > int(old.get("round", 0)) and lag <= run.steady.get(o, 0.0) + SLACK
        if q in before and o not in run.back and fresh:
            run.back[o] = now - run.t0 - run.killed[o]


def warm_up(topo: LocalTopology, run: Run, ingest: Ingest, seconds: float) -> None:
    """Wait until every query outputs, then take each one's mean latency for ``seconds``."""
    topo.wait("every query's first rounds", lambda: all(
        int(topo.status(f"{o}-0").get("round", 0)) > 50 for o in OPS), 120)  # fmt: skip
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sample(run, topo, ingest, {}, set())
        time.sleep(SAMPLE)
    run.steady = {o: statistics.mean(x for _, x in run.points.get(o, [(0, 0.0)])) for o in OPS}
    run.points.clear()


@dataclass
class Events:
    """What happens when, in seconds after the first failure: the nodes dying (each with
    its operators) and the replacements arriving."""

    deaths: list[tuple[float, str, tuple[str, ...]]]
    arrivals: list[float]

    @classmethod
    def of(cls, s: Scenario, lost: list[str], args: argparse.Namespace) -> Events:
        deaths = sorted(zip(s.deaths(), lost, s.lost, strict=True))
        arrivals = [max(w + args.replace_after, args.replace_after + i * args.arrive_every)
                    for i, (w, _, _) in enumerate(deaths)]  # fmt: skip
        return cls(deaths, sorted(arrivals))


def fail(run: Run, topo: LocalTopology, ev: Events, at: float, before: dict[str, Any],
         session: RecoverySession) -> RecoverySession:  # fmt: skip
    """Kill the tasks of every node due to die by ``at``; the session learns of it."""
    while ev.deaths and at >= ev.deaths[0][0]:
        _, node, ops = ev.deaths.pop(0)
        before.update({f"{o}-0": topo.status(f"{o}-0") for o in ops})
        for o in ops:
            topo.kill(f"{o}-0")
            run.killed[o] = time.time() - run.t0
        session, _ = session.handle(NodesLost((node,)))
    return session


def arrive(run: Run, topo: LocalTopology, ev: Events, at: float, up: set[str],
           session: RecoverySession) -> RecoverySession:  # fmt: skip
    """Add every replacement due by ``at`` and start what the session's plan recovers."""
    while ev.arrivals and at >= ev.arrivals[0]:
        ev.arrivals.pop(0)
        session, step = session.handle(NodeReady(f"new-{len(run.plans)}", NEW_CPU))
        started = sorted(step.recover) if step else []
        for t in started:
            topo.start(t)
        up |= set(started)
        names = ", ".join(t.removesuffix("-0") for t in started) or "nothing"
        run.plans.append(f"{at:.0f} s: {names}")
    return session


def run_once(base: Path, key: str, mode: str, args: argparse.Namespace) -> Run:
    """The failures of scenario ``key`` and the recovery in ``mode``."""
    s = SCENARIOS[key]
    run, ingest = Run(key, mode, s.failed), Ingest()
    spec = fig9_spec(base / "in", args.rate)
    settings = {"BACKSTOP_CHECKPOINT_INTERVAL": str(args.checkpoint),
                "BACKSTOP_METRICS_INTERVAL": "0.25"}  # fmt: skip
    topo = LocalTopology("fig9", spec, Path(tempfile.mkdtemp(dir=base)), env=settings)
    assignment, cpu, lost = cluster(s)
    session = RecoverySession.start(topo.graph, assignment, cpu, mode=mode,  # type: ignore[arg-type]
                                    algorithm="best-density")  # fmt: skip
    ev = Events.of(s, lost, args)
    end = ev.arrivals[-1] + args.hold
    topo.start_all()
    try:
        warm_up(topo, run, ingest, args.warm_up)
        before: dict[str, Any] = {}
        up: set[str] = set()
        run.t0 = time.time()
        while (at := time.time() - run.t0) < end:
            session = fail(run, topo, ev, at, before, session)
            session = arrive(run, topo, ev, at, up, session)
            sample(run, topo, ingest, before, up)
            done = [run.killed[o] + t for o, t in run.back.items()]
            settled = len(done) == len(s.failed) and at > max(done) + SETTLE
            if not ev.arrivals and settled:
                break
            time.sleep(SAMPLE)
    finally:
        topo.stop_all()
    return run


def relative(run: Run, o: str, lo: float) -> float | None:
    """``o``'s mean relative latency over the rounds it processed in ``[lo, lo + BUCKET)``
    after the failure; ``None`` when it processed none (no output)."""
    got = [x for t, x in run.points.get(o, []) if lo <= t - run.t0 < lo + BUCKET]
    return statistics.mean(got) / max(run.steady[o], FLOOR) if got else None


def summary(runs: list[Run]) -> str:
    lines = [
        "| figure | scenario | recovery | queries failed | steady latency | first back | "
        "median back | last back | plans (seconds after the first failure: tasks restarted) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = SCENARIOS[r.scenario]
        backs = sorted(r.back.values())
        missing = len(r.failed) - len(backs)
        last = f"{backs[-1]:.1f} s" if backs and not missing else f"{missing} not back"
        first = f"{backs[0]:.1f} s" if backs else "-"
        steady = f"{statistics.mean(r.steady.values()) * 1000:.1f} ms"
        med = f"{statistics.median(backs):.1f} s" if backs else "-"
        lines.append(
            f"| {s.figure} | {s.name} | {r.mode} | {len(r.failed)} | {steady} | {first} | {med} | "
            f"{last} | {'; '.join(r.plans)} |"
        )
    return "\n".join(lines) + "\n"


def curve(run: Run, which: list[str]) -> list[str]:
    """Per bucket: the mean relative latency of the queries in ``which`` that output, and
    how many are silent (no new round)."""
    end = max(t - run.t0 for v in run.points.values() for t, _ in v)
    cells, lo = [], 0.0
    while lo <= end:
        got = [x for o in which if (x := relative(run, o, lo)) is not None]
        down = len(which) - len(got)
        mean = f"{statistics.mean(got):.1f}" if got else ""
        cells.append(mean + (f" ({down} silent)" if down else ""))
        lo += BUCKET
    return cells


def curves(runs: list[Run], normal: bool) -> str:
    cols = [(r, [o for o in OPS if (o in r.failed) != normal]) for r in runs]
    cols = [(r, qs) for r, qs in cols if qs]
    series = [curve(r, qs) for r, qs in cols]
    head = " | ".join(f"{r.scenario}, {r.mode}" for r, _ in cols)
    lines = [f"| seconds after the failure | {head} |", "|---|" + "---|" * len(cols)]
    for i in range(max(len(c) for c in series)):
        row = [c[i] if i < len(c) else "" for c in series]
        lines.append(f"| {i * BUCKET:.0f}-{(i + 1) * BUCKET:.0f} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def wave_curves(runs: list[Run]) -> str:
    """Per run of :data:`CONSECUTIVE` and per node lost, its queries' relative latency."""
    cols = [(r, k, list(node)) for r in runs for k, node in enumerate(SCENARIOS[r.scenario].lost)]
    series = [curve(r, qs) for r, _, qs in cols]
    head = " | ".join(f"{r.scenario}, {r.mode}: node {k + 1}" for r, k, _ in cols)
    lines = [f"| seconds after the first failure | {head} |", "|---|" + "---|" * len(cols)]
    for i in range(max(len(c) for c in series)):
        row = [c[i] if i < len(c) else "" for c in series]
        lines.append(f"| {i * BUCKET:.0f}-{(i + 1) * BUCKET:.0f} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def report(args: argparse.Namespace, runs: list[Run]) -> str:
    fig15 = [r for r in runs if SCENARIOS[r.scenario].figure.startswith("15")]
    fig13 = [r for r in runs if SCENARIOS[r.scenario].figure.startswith("13")]
    fig10 = [r for r in runs if r.scenario in CONSECUTIVE]
    parts = [
        f"{HEADING}\n",
        "The incremental-recovery seed's Figs. 13-15 (and Fig. 10's setting), on its Fig. 9 "
        "topology of fifteen queries (edges rebuilt: see `bench/bench_runtime_fig9.py`), in "
        "local mode as the "
        "seed runs them: every task a local process, a node's failure the SIGKILL of its two "
        f"tasks. Input {args.rate:g} tweets/s, checkpoints every {args.checkpoint:g} s. "
        "Replacement nodes with room for two tasks each arrive one by one, the first "
        f"{args.replace_after:g} s after the failure, then one every {args.arrive_every:g} s; "
        "the planner's RecoverySession decides what each arrival restarts (incremental: "
        "`best-density`, one plan per arrival; blocking: everything once it all fits, at the "
        f"last arrival). A failed query is *back* once its lag is within {SLACK:g} s of its "
        "steady lag.\n",
        "### When the failed queries are back\n",
        "Seconds from each failed query's node dying until the query is back.\n",
        summary(runs),
        "### Relative latency of the failed queries (Figs. 13 and 15)\n",
        f"Per {BUCKET:g} s after the failure, each query's relative latency: the mean "
        "latency of the new rounds it processed then (when it processed each, less when the "
        "source read it: the seed's average end-to-end latency of the input behind its "
        "output) over the same before the failure, averaged over the failed queries; "
        "*(k silent)*: k of them processed no new round then (lost and not restarted, or "
        f"waiting for a task upstream). A steady latency below {FLOOR * 1000:g} ms counts "
        f"as {FLOOR * 1000:g} ms; the steady latency (mean over the queries) is in the table "
        "above.\n",
    ]
    if fig13:
        parts += ["Fig. 13 (two nodes):\n", curves(fig13, normal=False)]
    if fig15:
        parts += ["Fig. 15 (four and eight nodes, (a) reverse, (b) topological order):\n",
                  curves(fig15, normal=False)]  # fmt: skip
    if fig10:
        parts += [
            "### Consecutive failures (the seed's Fig. 10, on Backstop)\n",
            "The seed's Fig. 10 shows Storm replaying every source tuple again at each of 1, 2 "
            f"and 3 consecutive node failures; here the nodes of o4-o9 die {WAVE:g} s apart, "
            "each replaced "
            f"{args.replace_after:g} s after it died. Per {BUCKET:g} s, the mean relative "
            "latency of each node's two queries (*node k*: the k-th to die); the queries "
            "recovered before a later failure are not set back by it.\n",
            wave_curves(fig10),
        ]
    normal = [r for r in fig13 if len(r.failed) < len(OPS)]
    if normal:
        parts += [
            "### Relative latency of the normal queries (Fig. 14)\n",
            "The queries that did not fail, the same measure. With the downstream failure "
            "they never stop; with the upstream one every query is failed or stalled.\n",
            curves(normal, normal=True),
        ]
    return "\n".join(parts)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated, of: {', '.join(SCENARIOS)}")  # fmt: skip
    p.add_argument("--modes", default="incremental,blocking",
                   help="for Fig. 13's scenarios (the others: incremental)")  # fmt: skip
    p.add_argument("--rate", type=float, default=100.0, help="tweets per second (seed: 100)")
    p.add_argument("--checkpoint", type=float, default=10.0, help="seconds (seed: 10)")
    p.add_argument("--replace-after", type=float, default=10.0)
    p.add_argument("--arrive-every", type=float, default=8.0)
    p.add_argument("--hold", type=float, default=30.0,
                   help="seconds after the last arrival before a run gives up")  # fmt: skip
    p.add_argument("--warm-up", type=float, default=10.0)
    p.add_argument("--out", action="store_true", help=f"write {PAGE.name}")
    args = p.parse_args(argv)
    bad = [k for k in args.scenarios.split(",") if k not in SCENARIOS]
    bad += [m for m in args.modes.split(",") if m not in ("incremental", "blocking")]
    if bad:
        p.error(f"unknown scenario or mode: {', '.join(bad)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    base = Path(tempfile.mkdtemp(prefix="fig9-"))
    seconds = args.warm_up + args.replace_after + 8 * args.arrive_every + args.hold + 120
    files = argparse.Namespace(out=str(base / "in"), partitions=1, rate=args.rate,
                               seconds=seconds, start=0.0, follow=False)  # fmt: skip
    write_files(files, random.Random(9))
    runs = []
    for key in args.scenarios.split(","):
        # the seed compares with blocking recovery in Fig. 13; Figs. 10 and 15 are incremental
        compared = SCENARIOS[key].figure.startswith("13")
        for mode in args.modes.split(",") if compared else ["incremental"]:
            print(f"{key}, {mode} ...", file=sys.stderr, flush=True)
            r = run_once(base, key, mode, args)
            print(f"  back: {sorted(r.back.items(), key=lambda kv: kv[1])}; plans: {r.plans}",
                  file=sys.stderr, flush=True)  # fmt: skip
            runs.append(r)
    return emit(report(args, runs), PAGE if args.out else None, HEADING, command=COMMAND)


if __name__ == "__main__":
    sys.exit(main())
