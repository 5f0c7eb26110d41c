"""The recovery problem: results, capacity helpers, the failed-query bitmasks and the validator.

Every recovery algorithm (``heuristics``, ``best_density``, ``exact``) builds on
the same :class:`_Problem` and answers to the same :func:`check_recovery`, so they can
be compared on equal terms.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from planners.errors import PlannerError
from planners.graph import TaskGraph

DEFAULT_UTILIZATION = 0.8
"""The seed's upper bound on a node's CPU usage during recovery (Section 5)."""

_EPS = 1e-9
_SCALE = 1000  # CPU in millicores for CP-SAT (Kubernetes' own granularity)
_RULES = ("best", "worst")  # best fit first: keeps large holes for later plans


class InvalidEvent(PlannerError, ValueError):
    """A session event names an unknown node, or a node back that was never lost."""


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class RecoveryStep:
    """One recovery plan: which failed tasks restart where, and what it buys.

    Attributes
    ----------
    algorithm:
        Name of the algorithm that produced the plan.
    recover:
        ``{task id: node}`` for the failed tasks recovered by this plan.
    pending:
        Failed tasks left for a later plan, in topological order.
    recovered_queries:
        Output task ids of the failed queries whose failed tasks are all recovered.
    recovered_priority:
        Summed priority of ``recovered_queries``.
    failed_priority:
        Summed priority of every failed query (a query with a failed task upstream).
    optimal:
        ``True`` if proven optimal for the per-node problem, ``False`` if not
        proven (e.g. the solver's time ran out), ``None`` for heuristics.
    upper_bound:
        A proven upper bound on the recoverable priority, when the algorithm has one.
    """

    algorithm: str
    recover: dict[str, str]
    pending: tuple[str, ...]
    recovered_queries: tuple[str, ...]
    recovered_priority: float
    failed_priority: float
    optimal: bool | None
    upper_bound: float | None = None


class RecoveryAlgorithm(Protocol):
    """The one signature every recovery algorithm shares."""

    def __call__(
        self,
        graph: TaskGraph,
        failed: Collection[str],
        capacity: Mapping[str, float],
        *,
        time_limit: float = 5.0,
    ) -> RecoveryStep: ...


# --------------------------------------------------------------------------- helpers


def free_capacity(
    allocatable: Mapping[str, float],
    used: Mapping[str, float],
    cap: float = DEFAULT_UTILIZATION,
) -> dict[str, float]:
    """Free CPU per node for recovery: ``allocatable × cap − used``, never below 0.

    Parameters
    ----------
    allocatable:
        Allocatable CPU (cores) of each available node.
    used:
        CPU already requested on each node; nodes missing here use nothing, and
        entries for nodes not in ``allocatable`` (lost nodes) are ignored.
    cap:
        Utilisation cap in ``(0, 1]`` (the seed uses 0.8).

    Returns
    -------
    dict
        ``{node: free cores}`` for every node of ``allocatable``.

    Raises
    ------
    ValueError
        If ``cap`` is not in ``(0, 1]`` or an allocatable CPU is negative.

    Examples
    --------
    >>> free_capacity({"n1": 4, "n2": 2}, {"n1": 1.5, "gone": 3})
    {'n1': 1.7000000000000002, 'n2': 1.6}
    """
    if not 0 < cap <= 1:
        raise ValueError(f"utilisation cap {cap} must be in (0, 1]")
    out: dict[str, float] = {}
    for node, cpu in allocatable.items():
        if cpu < 0:
            raise ValueError(f"node {node!r} has negative allocatable CPU {cpu}")
        out[node] = max(0.0, float(cpu) * cap - float(used.get(node, 0.0)))
    return out


def node_load(
    graph: TaskGraph, assignment: Mapping[str, str], exclude: Collection[str] = ()
) -> dict[str, float]:
    """CPU requested on each node by the tasks of ``assignment`` (minus ``exclude``).

    Raises
    ------
    InvalidTopology
        If the assignment names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> node_load(g, {"a": "n1", "b": "n1"})
    {'n1': 2.0}
    """
    skip = set(exclude)
    load: dict[str, float] = {}
    for task, node in assignment.items():
        w = graph.weight[graph.index(task)]
        if task not in skip:
            load[node] = load.get(node, 0.0) + w
    return load


def failed_queries(graph: TaskGraph, failed: Collection[str]) -> dict[str, frozenset[str]]:
    """The failed queries: output task id → the failed tasks of its upstream closure.

    A query (the seed's query partition) is an output task with everything it
    transitively reads from. It has failed when that closure holds a failed
    task, and it is recovered once all of those are recovered.

    Raises
    ------
    InvalidTopology
        If ``failed`` names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("s", "b")],
    ...                     latency={"s": 1, "a": 1, "b": 1})
    >>> sorted((q, sorted(ts)) for q, ts in failed_queries(g, ["s", "b"]).items())
    [('a', ['s']), ('b', ['b', 's'])]
    """
    fi = set(graph.indices(failed))
    out: dict[str, frozenset[str]] = {}
    for q in sorted(graph.outputs):
        hit = graph.upstream_closure[q] & fi
        if hit:
            out[graph.tasks[q]] = frozenset(graph.tasks[i] for i in hit)
    return out


class _Problem:
    """Failed tasks and queries as bitmasks over the failed tasks (topological order)."""

    def __init__(self, graph: TaskGraph, failed: Collection[str], capacity: Mapping[str, float]):
        idx = sorted(set(graph.indices(failed)))
        for node, cap in capacity.items():
            if not cap >= 0 or math.isinf(cap):
                raise ValueError(f"node {node!r} has invalid free capacity {cap}")
        self.graph = graph
        self.failed = idx  # graph indices, topological order
        self.pos = {v: p for p, v in enumerate(idx)}
        self.weight = [graph.weight[v] for v in idx]
        # by name, never in the caller's (API list) order: ties break the same way every time
        self.capacity = {str(n): float(c) for n, c in sorted(capacity.items())}
        self.total = sum(self.capacity.values())
        fset = set(idx)
        self.qout: list[int] = []  # output task index per query
        self.qmask: list[int] = []
        self.qprio: list[float] = []
        for q in sorted(graph.outputs):
            hit = graph.upstream_closure[q] & fset
            if hit:
                self.qout.append(q)
                self.qmask.append(sum(1 << self.pos[v] for v in hit))
                self.qprio.append(graph.priority[q])
        self.full = (1 << len(idx)) - 1
        union = 0
        for m in self.qmask:
            union |= m
        self.orphans = self.full & ~union  # failed tasks in no failed query

    @property
    def nq(self) -> int:
        return len(self.qmask)

    def bits(self, mask: int) -> list[int]:
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return out

    def cost(self, mask: int) -> float:
        return sum(self.weight[p] for p in self.bits(mask))

    def priority(self, mask: int) -> float:
        return float(sum(p for m, p in zip(self.qmask, self.qprio, strict=True) if m & ~mask == 0))

    def step(
        self,
        algorithm: str,
        placement: Mapping[int, str],
        optimal: bool | None,
        upper_bound: float | None = None,
    ) -> RecoveryStep:
        """Build the result from ``{failed position: node}``."""
        g = self.graph
        mask = sum(1 << p for p in placement)
        recovered = [
            g.tasks[q] for q, m in zip(self.qout, self.qmask, strict=True) if m & ~mask == 0
        ]
        return RecoveryStep(
            algorithm=algorithm,
            recover={g.tasks[self.failed[p]]: n for p, n in sorted(placement.items())},
            pending=tuple(g.tasks[v] for p, v in enumerate(self.failed) if p not in placement),
            recovered_queries=tuple(recovered),
            recovered_priority=self.priority(mask),
            failed_priority=float(sum(self.qprio)),
            optimal=optimal,
            upper_bound=upper_bound,
        )


def _place(weights: Mapping[int, float], remaining: dict[str, float]) -> dict[int, str] | None:
    """Place items on nodes, largest first; update ``remaining`` only on success.

    The seed assigns each recovered partition to the node with the most free
    resources (worst fit). We try best fit first, which keeps large free blocks
    for the tasks later plans must place (measured in ``bench/bench_recovery.py``:
    lower unavailability for every algorithm), and fall back to worst fit.
    """
    if not weights:
        return {}
    if sum(weights.values()) > sum(remaining.values()) + _EPS * (1 + len(weights)):
        return None
    order = sorted(weights, key=lambda p: (-weights[p], p))
    for rule in _RULES:
        rem = dict(remaining)
        out: dict[int, str] = {}
        for p in order:
            w = weights[p]
            fits = [n for n, c in rem.items() if c + _EPS >= w]
            if not fits:
                break
            if rule == "worst":
                node = max(fits, key=lambda n: (rem[n], _neg(n)))
            else:
                node = min(fits, key=lambda n: (rem[n], n))
            rem[node] -= w
            out[p] = node
        else:
            remaining.update(rem)
            return out
    return None


def _neg(name: str) -> tuple[int, ...]:
    """A key that orders names in reverse, so ``max`` breaks ties by the smallest name."""
    return tuple(-ord(c) for c in name)


def _fill_orphans(prob: _Problem, placement: dict[int, str], remaining: dict[str, float]) -> None:
    """Recover failed tasks that belong to no failed query where capacity is left.

    They earn no priority, but they must come back eventually and cost nothing
    that a query needed in this plan.
    """
    for p in prob.bits(prob.orphans):
        if p in placement:
            continue
        got = _place({p: prob.weight[p]}, remaining)
        if got:
            placement.update(got)


def _remaining_after(prob: _Problem, placement: Mapping[int, str]) -> dict[str, float]:
    rem = dict(prob.capacity)
    for p, n in placement.items():
        rem[n] -= prob.weight[p]
    return rem


def check_recovery(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    step: RecoveryStep,
) -> list[str]:
    """Every way ``step`` breaks the recovery-plan invariants (empty if valid).

    Checks: every recovered task was failed; recovered and pending partition the
    failed tasks, each once; every node exists and its free capacity is never
    exceeded; ``recovered_queries`` are exactly the failed queries whose failed
    tasks are all recovered; both priorities match.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> bad = RecoveryStep("x", {"a": "n"}, (), ("b",), 1.0, 1.0, None)
    >>> check_recovery(g, ["a", "b"], {"n": 0.5}, bad)  # doctest: +NORMALIZE_WHITESPACE
    ['failed tasks neither recovered nor pending: b',
     'node n: 1 cores recovered onto 0.5 free',
     "recovered_queries ['b'] != ['']", 'recovered_priority 1.0 != 0']
    """
    problems: list[str] = []
    known = set(graph.tasks)
    fset = {t for t in failed if t in known}
    problems += [f"failed task {t!r} is unknown" for t in failed if t not in known]
    for t in step.recover:
        if t not in fset:
            problems.append(f"recovered task {t} was not failed")
    pend = list(step.pending)
    if len(set(pend)) != len(pend):
        problems.append("pending lists a task twice")
    both = set(pend) & set(step.recover)
    if both:
        problems.append(f"tasks both recovered and pending: {', '.join(sorted(both))}")
    missing = fset - set(pend) - set(step.recover)
    if missing:
        problems.append(f"failed tasks neither recovered nor pending: {', '.join(sorted(missing))}")
    extra = set(pend) - fset
    if extra:
        problems.append(f"pending tasks that were not failed: {', '.join(sorted(extra))}")
    load: dict[str, float] = {}
    for t, n in step.recover.items():
        if n not in capacity:
            problems.append(f"task {t} recovered onto unknown or unavailable node {n}")
            continue
        if t in known:
            load[n] = load.get(n, 0.0) + graph.weight[graph.index(t)]
    for n, used in sorted(load.items()):
        if used > capacity[n] + 1e-6:
            problems.append(f"node {n}: {used:g} cores recovered onto {capacity[n]:g} free")
    fq = failed_queries(graph, fset)
    rec = set(step.recover)
    want = sorted(q for q, ts in fq.items() if ts <= rec)
    if sorted(step.recovered_queries) != want:
        problems.append(f"recovered_queries {sorted(step.recovered_queries)} != {want or ['']}")
    prio = {q: graph.priority[graph.index(q)] for q in fq}
    if abs(step.failed_priority - sum(prio.values())) > 1e-6:
        problems.append(f"failed_priority {step.failed_priority} != {sum(prio.values())}")
    got = sum(prio[q] for q in want)
    if abs(step.recovered_priority - got) > 1e-6:
        problems.append(f"recovered_priority {step.recovered_priority} != {got}")
    return problems
