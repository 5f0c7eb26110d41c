"""What every minimum-backup algorithm shares: the plan type, the model's
helpers and the evaluator check every plan passes before it is returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from planners.errors import Infeasible
from planners.evaluate import check_plan, worst_task_failure
from planners.graph import TaskGraph

EPS = 1e-9
"""Tolerance on the bound, the same as :func:`planners.evaluate.check_plan`'s."""


@dataclass(frozen=True)
class BackupPlan:
    """Which tasks keep upstream backups, with what the evaluator says about it.

    Attributes
    ----------
    algorithm:
        The algorithm that produced the plan (``auto`` adds the method it used,
        e.g. ``auto:tree``).
    bound:
        The recovery-latency bound ``R`` (seconds) the plan keeps.
    backups:
        Ids of the backup tasks (``M(v) = 1``), in topological order.
    worst:
        The evaluator's worst single-task recovery latency ``max_v L(v)``.
    optimal:
        ``True`` if the number of backups is proven minimum, ``False`` if it is
        known or possibly not (e.g. a solver ran out of time), ``None`` if the
        algorithm cannot tell.
    """

    algorithm: str
    bound: float
    backups: tuple[str, ...]
    worst: float
    optimal: bool | None


class BackupAlgorithm(Protocol):
    """The one signature every minimum-backup algorithm has."""

    def __call__(
        self, graph: TaskGraph, bound: float, *, time_limit: float = 10.0
    ) -> BackupPlan: ...


# --------------------------------------------------------------------------- helpers


def smallest_feasible_bound(graph: TaskGraph) -> tuple[float, str]:
    """The smallest bound any plan can keep, and the task that forces it.

    With every task a backup no failed task waits for anything upstream, so the
    evaluator's worst latency with ``M ≡ 1`` (that is ``max_v t_v``) is the
    smallest feasible bound.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2.5})
    >>> smallest_feasible_bound(g)
    (2.5, 'b')
    """
    return worst_task_failure(graph, None)


def _require_feasible(graph: TaskGraph, bound: float) -> None:
    smallest, task = smallest_feasible_bound(graph)
    if not smallest <= bound + EPS:  # also rejects NaN
        raise Infeasible(
            f"bound {bound:g}s is infeasible: task {task} alone needs {smallest:g}s to "
            f"reprocess, so the smallest feasible bound is {smallest:g}s",
            smallest_bound=smallest,
        )


def _sinks(graph: TaskGraph) -> list[bool]:
    return [not s for s in graph.succs]


def _forced(graph: TaskGraph, bound: float) -> list[bool]:
    """Tasks every feasible plan must back up: ``t_u + t_w > R`` for a consumer ``w``."""
    t = graph.latency
    return [any(t[u] + t[w] > bound + EPS for w in ss) for u, ss in enumerate(graph.succs)]


def _ell(graph: TaskGraph, flags: list[bool]) -> list[float]:
    """``L(v)`` of every task for backup flags ``flags`` (eq. 3), one pass."""
    ell = [0.0] * len(graph)
    t = graph.latency
    for v, ps in enumerate(graph.preds):
        m = 0.0
        for u in ps:
            if not flags[u] and ell[u] > m:
                m = ell[u]
        ell[v] = t[v] + m
    return ell


def _finish(
    graph: TaskGraph, bound: float, algorithm: str, flags: list[bool], optimal: bool | None
) -> BackupPlan:
    """Check a plan with the shared evaluator and wrap it; a failure here is a bug."""
    backups = tuple(graph.ids(i for i, f in enumerate(flags) if f))
    problems = check_plan(graph, bound=bound, backups=backups)
    if problems:
        raise RuntimeError(
            f"internal error: backups_{algorithm} produced an invalid plan: "
            + "; ".join(p.message for p in problems)
        )
    worst, _ = worst_task_failure(graph, backups)
    return BackupPlan(algorithm, float(bound), backups, worst, optimal)


def topology_shape(graph: TaskGraph) -> str:
    """Classify a task graph as ``"lines"``, ``"tree"`` or ``"dag"`` (seed, Sec. IV).

    ``lines``: every task has at most one consumer, and only sinks have more
    than one input (sequential lines, or parallel lines joining a common sink).
    ``tree``: every task has at most one consumer (an in-forest rooted at sinks).

    Examples
    --------
    >>> lat = dict.fromkeys("abcd", 1.0)
    >>> topology_shape(TaskGraph.build("abc", [("a", "c"), ("b", "c")], latency=lat))
    'lines'
    >>> topology_shape(TaskGraph.build("abcd", [("a", "c"), ("b", "c"), ("c", "d")],
    ...                                latency=lat))
    'tree'
    >>> topology_shape(TaskGraph.build("abc", [("a", "b"), ("a", "c")], latency=lat))
    'dag'
    """
    if any(len(s) > 1 for s in graph.succs):
        return "dag"
    if all(len(p) <= 1 or not s for p, s in zip(graph.preds, graph.succs, strict=True)):
        return "lines"
    return "tree"


def _tree_greedy(graph: TaskGraph, bound: float) -> list[bool]:
    """Back up exactly the inputs that would break R, in topological order.

    Optimal on an in-forest (each input has one consumer, its last chance). On any DAG
    the plan keeps R, since every input that would push a consumer past it is backed
    up, though a backup may then serve several consumers less well than one upstream.
    """
    t = graph.latency
    flags = [False] * len(graph)
    ell = [0.0] * len(graph)
    for v, ps in enumerate(graph.preds):
        worst = 0.0
        for u in ps:
            if t[v] + ell[u] > bound + EPS:
                flags[u] = True  # u's only consumer is v: this is the last chance
            elif ell[u] > worst:
                worst = ell[u]
        ell[v] = t[v] + worst
    return flags
