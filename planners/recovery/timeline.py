"""Replaying a trace of node losses and arrivals, and filling idle capacity."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from planners.graph import TaskGraph
from planners.recovery.model import (
    _EPS,
    DEFAULT_UTILIZATION,
    InvalidEvent,
    RecoveryStep,
    failed_queries,
)
from planners.recovery.session import Event, Mode, NodeBack, NodeReady, NodesLost, RecoverySession


@dataclass(frozen=True)
class TimedStep:
    """A plan step issued at ``time`` (seconds since the trace's start)."""

    time: float
    step: RecoveryStep


@dataclass(frozen=True)
class Timeline:
    """When each query came back on one trace of losses and arrivals, and what it cost.

    Attributes
    ----------
    mode, algorithm:
        How the session recovered.
    steps:
        The plan steps, with the time each was issued.
    downtime:
        Seconds each query (output task id) was unavailable; queries never hit
        have no entry.
    back_at:
        Time each hit query last came back (``None``: still down at the horizon).
    unavailability:
        ``Σ priority × downtime`` (priority-seconds); lower is better.
    finished_at:
        Time nothing was failed any more (``None``: not within the trace).
    horizon:
        The time downtime of unrecovered queries is counted up to.
    """

    mode: str
    algorithm: str
    steps: tuple[TimedStep, ...]
    downtime: dict[str, float]
    back_at: dict[str, float | None]
    unavailability: float
    finished_at: float | None
    horizon: float

    @property
    def complete(self) -> bool:
        """Every failed task was recovered within the trace."""
        return self.finished_at is not None


def _check_events(
    node_cpu: Mapping[str, float], lost_at: Mapping[str, float], arrivals: Mapping[str, float]
) -> None:
    """Every lost node has a CPU, and none arrives back before it is lost."""
    for n in lost_at:
        if n not in node_cpu:
            raise InvalidEvent(f"lost node {n!r} has no CPU in node_cpu")
        if n in arrivals and arrivals[n] < lost_at[n]:
            raise InvalidEvent(f"node {n!r} arrives at {arrivals[n]} before it is lost")


def _events(
    node_cpu: Mapping[str, float], lost_at: Mapping[str, float], arrivals: Mapping[str, float]
) -> dict[float, list[Event]]:
    """The session's events by time."""
    events: dict[float, list[Event]] = {}
    for n, t in lost_at.items():
        events.setdefault(float(t), []).append(NodesLost((n,)))
    for n, t in arrivals.items():
        ev: Event = NodeBack(n) if n in lost_at else NodeReady(n, float(node_cpu[n]))
        events.setdefault(float(t), []).append(ev)
    return events


class _Downtime:
    """How long each output query is down, from the queries up after each event."""

    def __init__(self, outputs: list[str]) -> None:
        self.outputs = outputs
        self.down_since: dict[str, float] = {}
        self.downtime: dict[str, float] = {}
        self.back_at: dict[str, float | None] = {}

    def observe(self, t: float, up: Collection[str]) -> None:
        """At time ``t`` exactly the queries ``up`` run."""
        for q in self.outputs:
            if q not in up and q not in self.down_since:
                self.down_since[q] = t
                self.downtime.setdefault(q, 0.0)
                self.back_at[q] = None
            elif q in up and q in self.down_since:
                self.downtime[q] += t - self.down_since.pop(q)
                self.back_at[q] = t

    def close(self, end: float) -> dict[str, float]:
        """The downtime per query, counting the still-down ones until ``end``."""
        for q, since in self.down_since.items():
            self.downtime[q] += max(0.0, end - since)
        return self.downtime


def simulate_timeline(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    node_cpu: Mapping[str, float],
    lost_at: Mapping[str, float],
    arrivals: Mapping[str, float],
    *,
    mode: Mode = "incremental",
    algorithm: str = "auto",
    utilization: float = DEFAULT_UTILIZATION,
    time_limit: float = 5.0,
    horizon: float | None = None,
) -> Timeline:
    """Replay node losses and arrivals through a :class:`RecoverySession`.

    Parameters
    ----------
    graph:
        The task DAG.
    assignment:
        The healthy placement, task id → node.
    node_cpu:
        Allocatable CPU of every node that appears: the initial ones and the
        replacements.
    lost_at:
        Node → time it is lost.
    arrivals:
        Node → time it becomes Ready. A node that is not lost is a replacement
        that is absent before then; a lost node arriving later is that node back.
    mode, algorithm, utilization, time_limit:
        Passed to the session.
    horizon:
        Time up to which still-down queries accumulate downtime; default the last event.

    Returns
    -------
    Timeline
        Plans are issued instantly at each event time (all events at the same
        time are applied first); a query is back when its closure runs again.

    Raises
    ------
    InvalidEvent
        A lost node missing from ``node_cpu``, or a lost node "arriving" before it was lost.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "q-0", "q-1"], [("s-0", "q-0"), ("s-0", "q-1")],
    ...     latency={"s-0": 1, "q-0": 1, "q-1": 1}, priority={"q-0": 1, "q-1": 3})
    >>> tl = simulate_timeline(g, {"s-0": "a", "q-0": "b", "q-1": "b"},
    ...     {"a": 2.5, "b": 4, "c": 1.25}, lost_at={"b": 0}, arrivals={"c": 10},
    ...     algorithm="best-density")
    >>> tl.downtime, tl.unavailability
    ({'q-0': 10.0}, 10.0)

    Notes
    -----
    One plan per distinct event time, so the cost is that many calls of the algorithm.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Sections 2.2.3 and 7.2 (incremental vs. blocking).
    """
    _check_events(node_cpu, lost_at, arrivals)
    initial = {n: c for n, c in node_cpu.items() if n not in arrivals or n in lost_at}
    session = RecoverySession.start(
        graph,
        assignment,
        initial,
        mode=mode,
        algorithm=algorithm,
        utilization=utilization,
        time_limit=time_limit,
    )
    events = _events(node_cpu, lost_at, arrivals)
    times = sorted(events)
    end = float(horizon) if horizon is not None else (times[-1] if times else 0.0)
    outputs = [graph.tasks[q] for q in sorted(graph.outputs)]
    prio = {q: graph.priority[graph.index(q)] for q in outputs}
    clock = _Downtime(outputs)
    steps: list[TimedStep] = []
    finished: float | None = 0.0 if session.done else None
    for t in times:
        # losses first, then arrivals, so a same-time replacement can take the load
        batch = sorted(events[t], key=lambda e: 0 if isinstance(e, NodesLost) else 1)
        for ev in batch:
            session = session.apply(ev)
        session, step = session.plan()
        if step is not None:
            steps.append(TimedStep(t, step))
        clock.observe(t, session.available_queries())
        if not session.done:
            finished = None
        elif finished is None:
            finished = t
    downtime, back_at = clock.close(end), clock.back_at
    return Timeline(
        mode=mode,
        algorithm="operator-centric" if mode == "operator-centric" else algorithm,
        steps=tuple(steps),
        downtime=downtime,
        back_at=back_at,
        unavailability=sum(prio[q] * d for q, d in downtime.items()),
        finished_at=finished if session.done else None,
        horizon=end,
    )


def fill_leftover(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    step: RecoveryStep,
) -> RecoveryStep:
    """Use the capacity a query-centric step leaves idle for more failed tasks.

    A query-centric plan only recovers tasks that complete a query now; the
    rest of the capacity stays idle. Every failed task must come back anyway,
    so this starts the remaining ones early, most valuable first: by the
    largest priority of a failed query the task feeds, then topological order,
    each placed best fit where it fits. ``recovered_queries`` and the priorities
    are recomputed, so a query completed by the filling counts as recovered.

    Parameters
    ----------
    graph:
        The task DAG.
    failed:
        The failed tasks the step was planned for.
    capacity:
        Free CPU per node the step was planned for.
    step:
        The step to extend (its own placements are kept).

    Returns
    -------
    RecoveryStep
        The extended step (``algorithm`` gets a ``+fill`` suffix when it added tasks).

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "s-1", "q-0"], [("s-0", "q-0"), ("s-1", "q-0")],
    ...                     latency={"s-0": 1, "s-1": 1, "q-0": 1})
    >>> empty = RecoveryStep("auto", {}, ("s-0", "s-1"), (), 0.0, 1.0, None)
    >>> filled = fill_leftover(g, ["s-0", "s-1"], {"n": 1.5}, empty)
    >>> sorted(filled.recover), filled.recovered_queries
    (['s-0'], ())

    Notes
    -----
    O(F log F + F·N) for F failed tasks and N nodes.

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 5 recovers whole query partitions; filling the
    remainder is Backstop's addition, measured in ``bench/bench_recovery.py``.
    """
    remaining = dict(capacity)
    for task, node in step.recover.items():
        remaining[node] = remaining.get(node, 0.0) - graph.weight[graph.index(task)]
    fq = failed_queries(graph, failed)
    value: dict[str, float] = {}
    for q, tasks in fq.items():
        for t in tasks:
            value[t] = max(value.get(t, 0.0), graph.priority[graph.index(q)])
    todo = sorted(
        (t for t in failed if t not in step.recover),
        key=lambda t: (-value.get(t, 0.0), graph.index(t)),
    )
    recover = dict(step.recover)
    for t in todo:
        w = graph.weight[graph.index(t)]
        fits = [n for n, c in remaining.items() if c + _EPS >= w]
        if not fits:
            continue
        node = min(fits, key=lambda n: (remaining[n], n))
        remaining[node] -= w
        recover[t] = node
    if len(recover) == len(step.recover):
        return step
    done = set(recover)
    queries = tuple(sorted(q for q, ts in fq.items() if ts <= done))
    return replace(
        step,
        algorithm=step.algorithm + "+fill",
        recover=recover,
        pending=tuple(graph.ids(graph.index(t) for t in failed if t not in done)),
        recovered_queries=queries,
        recovered_priority=sum(graph.priority[graph.index(q)] for q in queries),
    )
