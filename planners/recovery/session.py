"""One incident's recovery as a pure state machine (:class:`RecoverySession`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.recovery.exact import recover_exact
from planners.recovery.model import (
    _EPS,
    DEFAULT_UTILIZATION,
    InvalidEvent,
    RecoveryStep,
    _place,
    _Problem,
    free_capacity,
    node_load,
)
from planners.recovery.registry import RECOVERY_ALGORITHMS, schedule_recovery


@dataclass(frozen=True)
class NodesLost:
    """Nodes that count as lost (NotReady past the grace period, or deleted)."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NodeReady:
    """A node became Ready: a replacement with ``cpu`` allocatable cores, or a lost node back."""

    node: str
    cpu: float | None = None


@dataclass(frozen=True)
class NodeBack:
    """A lost node returned (empty: its pods are gone), with its old allocatable CPU."""

    node: str


Event = NodesLost | NodeReady | NodeBack
Mode = Literal["incremental", "blocking", "operator-centric"]
MODES: tuple[Mode, ...] = ("incremental", "blocking", "operator-centric")


@dataclass(frozen=True)
class RecoverySession:
    """The recovery of one incident, as a pure state machine.

    Transitions return a new session and never mutate this one. ``apply``
    changes the cluster view for one event; :meth:`plan` issues the next plan
    step; :meth:`handle` does both. Tasks running on a node that is later lost
    (including tasks an earlier step recovered there) become failed again: the
    seed's repeated failures join the running session instead of starting over.

    Modes: ``incremental`` issues a query-centric plan (``algorithm``) at every
    trigger; ``operator-centric`` does the same with the OC baseline;
    ``blocking`` waits until every failed task fits, then recovers all at once.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "q-0", "q-1"], [("s-0", "q-0"), ("s-0", "q-1")],
    ...                     latency={"s-0": 1, "q-0": 1, "q-1": 1})
    >>> s = RecoverySession.start(g, {"s-0": "a", "q-0": "b", "q-1": "b"},
    ...                           {"a": 4, "b": 4}, algorithm="best-density")
    >>> s, step = s.handle(NodesLost(("b",)))
    >>> sorted(step.recover), sorted(s.failed)
    (['q-0', 'q-1'], [])
    """

    graph: TaskGraph
    assignment: dict[str, str]
    """Running tasks → node (failed tasks are absent)."""
    node_cpu: dict[str, float]
    """Allocatable CPU of the available nodes."""
    down: dict[str, float] = field(default_factory=dict)
    """Allocatable CPU of lost nodes, for when they come back."""
    failed: frozenset[str] = frozenset()
    mode: Mode = "incremental"
    algorithm: str = "auto"
    utilization: float = DEFAULT_UTILIZATION
    time_limit: float = 5.0
    steps: tuple[RecoveryStep, ...] = ()

    @classmethod
    def start(
        cls,
        graph: TaskGraph,
        assignment: Mapping[str, str],
        node_cpu: Mapping[str, float],
        *,
        mode: Mode = "incremental",
        algorithm: str = "auto",
        utilization: float = DEFAULT_UTILIZATION,
        time_limit: float = 5.0,
    ) -> RecoverySession:
        """A session over a healthy placement.

        Raises
        ------
        InvalidTopology
            If the assignment names an unknown task.
        InvalidEvent
            If it names a node missing from ``node_cpu``.
        UnknownAlgorithm
            If ``algorithm`` or ``mode`` is unknown.
        """
        graph.indices(assignment)
        for t, n in assignment.items():
            if n not in node_cpu:
                raise InvalidEvent(f"task {t} is assigned to node {n!r}, which has no capacity")
        if algorithm not in RECOVERY_ALGORITHMS:
            names = ", ".join(sorted(RECOVERY_ALGORITHMS))
            raise UnknownAlgorithm(f"unknown recovery algorithm {algorithm!r}; choose: {names}")
        if mode not in MODES:
            raise UnknownAlgorithm(f"unknown recovery mode {mode!r}; choose: {', '.join(MODES)}")
        if not 0 < utilization <= 1:
            raise ValueError(f"utilisation cap {utilization} must be in (0, 1]")
        return cls(
            graph=graph,
            assignment=dict(assignment),
            node_cpu={n: float(c) for n, c in node_cpu.items()},
            mode=mode,
            algorithm=algorithm,
            utilization=utilization,
            time_limit=time_limit,
        )

    @property
    def done(self) -> bool:
        """Nothing is failed."""
        return not self.failed

    def capacity(self) -> dict[str, float]:
        """Free CPU per available node for recovery (cap applied, running tasks subtracted)."""
        return free_capacity(
            self.node_cpu, node_load(self.graph, self.assignment), self.utilization
        )

    def available_queries(self) -> frozenset[str]:
        """Output tasks whose whole upstream closure is running."""
        fi = set(self.graph.indices(self.failed))
        return frozenset(
            self.graph.tasks[q]
            for q in self.graph.outputs
            if not self.graph.upstream_closure[q] & fi
        )

    def apply(self, event: Event) -> RecoverySession:
        """The session after ``event``, without planning.

        Raises
        ------
        InvalidEvent
            A lost node that was never known, or a node back that was never lost.
        """
        if isinstance(event, NodesLost):
            lost = [n for n in event.nodes if n not in self.down]
            unknown = [n for n in lost if n not in self.node_cpu]
            if unknown:
                raise InvalidEvent(f"lost node(s) {', '.join(unknown)} are not known")
            gone = set(lost)
            newly = {t for t, n in self.assignment.items() if n in gone}
            return replace(
                self,
                assignment={t: n for t, n in self.assignment.items() if n not in gone},
                node_cpu={n: c for n, c in self.node_cpu.items() if n not in gone},
                down={**self.down, **{n: self.node_cpu[n] for n in lost}},
                failed=self.failed | newly,
            )
        if isinstance(event, NodeBack):
            if event.node not in self.down:
                raise InvalidEvent(f"node {event.node!r} is back but was never lost")
            return self.apply(NodeReady(event.node, self.down[event.node]))
        if event.node in self.node_cpu:
            return self  # already available: a duplicate Ready
        cpu = event.cpu if event.cpu is not None else self.down.get(event.node)
        if cpu is None or cpu < 0:
            raise InvalidEvent(f"node {event.node!r} is Ready but its CPU is unknown")
        return replace(
            self,
            node_cpu={**self.node_cpu, event.node: float(cpu)},
            down={n: c for n, c in self.down.items() if n != event.node},
        )

    def plan(self) -> tuple[RecoverySession, RecoveryStep | None]:
        """Issue the next plan step, if it recovers anything.

        Returns
        -------
        (session, step)
            ``step`` is ``None`` when nothing can be recovered now (or nothing
            is failed); the session then is unchanged.
        """
        if not self.failed:
            return self, None
        capacity = self.capacity()
        if self.mode == "blocking":
            step = _recover_all(self.graph, self.failed, capacity, self.time_limit)
        else:
            name = "operator-centric" if self.mode == "operator-centric" else self.algorithm
            step = schedule_recovery(
                self.graph, self.failed, capacity, algorithm=name, time_limit=self.time_limit
            )
        if step is None or not step.recover:
            return self, None
        return (
            replace(
                self,
                assignment={**self.assignment, **step.recover},
                failed=self.failed - set(step.recover),
                steps=(*self.steps, step),
            ),
            step,
        )

    def handle(self, event: Event) -> tuple[RecoverySession, RecoveryStep | None]:
        """Apply ``event``, then plan."""
        return self.apply(event).plan()


def _recover_all(
    graph: TaskGraph, failed: Collection[str], capacity: Mapping[str, float], time_limit: float
) -> RecoveryStep | None:
    """Blocking recovery: every failed task at once, or nothing (``None``)."""
    prob = _Problem(graph, failed, capacity)
    rem = dict(prob.capacity)
    placement = _place({p: prob.weight[p] for p in range(len(prob.failed))}, rem)
    if placement is None and prob.cost(prob.full) <= prob.total + _EPS:
        ex = recover_exact(graph, failed, capacity, time_limit=time_limit)
        if not ex.pending:
            return replace(ex, algorithm="blocking")
    if placement is None:
        return None
    return prob.step("blocking", placement, True, prob.priority(prob.full))
