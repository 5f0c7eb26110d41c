"""Rollouts of a spec change in steps that keep the recovery bound.

Replacing a task's pod (a new image, new resources, a new role) takes the task down
for its restart, exactly like a failure: while it is down, its consumers wait for it
and, if it kept upstream backups, its buffers are gone. If every changed pod were
replaced at once, one node failure during the rollout would add its tasks to all the
replaced ones, and that failure set ``K_p ∪ D`` may recover far slower than the bound.
So a rollout replaces the changed tasks in steps ``D_1, D_2, …`` such that, in the state
of each step (tasks replaced earlier run their new pod on their new node with their new
backup flag, the others their old pod), every single-node failure ``p`` keeps ``H(K_p ∪
D_i) ≤ R`` under the failure-effect model
(:func:`planners.evaluate.node_failure_latency`). Each step is as large as keeps the
bound (nothing left can be added to it) and holds at least one task, so a rollout always
finishes; a step that cannot keep the bound even alone is reported.

This follows Flink's ``upgradeMode: savepoint`` (stop with a checkpoint, restart from
it) combined with Kubernetes' ``maxUnavailable``, with the step size chosen by the
model instead of a fixed number.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from planners.evaluate import node_failure_latency, tasks_by_node
from planners.graph import TaskGraph

__all__ = ["RolloutState", "mixed_state", "next_rollout_step", "plan_rollout", "rollout_worst"]


@dataclass(frozen=True)
class RolloutState:
    """The placement and backups while a rollout is under way.

    Attributes
    ----------
    assignment, backups:
        ``{task: node}`` and backup flags of every task's pod running now (tasks already
        replaced: their new node and flag; the others: their old ones). ``backups=None``
        means every task keeps backups.
    """

    assignment: Mapping[str, str]
    backups: frozenset[str] | None


def rollout_worst(graph: TaskGraph, state: RolloutState, down: Collection[str]) -> float:
    """Worst recovery latency while ``down`` is being replaced: the largest
    ``H(K_p ∪ down)`` over single-node failures ``p`` (``H(down)`` with no node).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2})
    >>> s = RolloutState({"a": "n0", "b": "n1"}, frozenset({"a"}))
    >>> rollout_worst(g, s, ["b"])   # b down, n0 fails too: b waits for a's replay
    3.0
    >>> rollout_worst(g, s, [])
    2.0
    """
    blist = None if state.backups is None else sorted(state.backups)
    down_set = set(down)
    worst = node_failure_latency(graph, blist, down_set)
    for tasks in tasks_by_node(state.assignment).values():
        worst = max(worst, node_failure_latency(graph, blist, down_set | set(tasks)))
    return worst


def next_rollout_step(
    graph: TaskGraph, state: RolloutState, pending: Iterable[str], *, bound: float, limit: int = 0
) -> tuple[list[str], float]:
    """The next step of a rollout: ``(tasks to replace now, worst latency meanwhile)``.

    First fit in the graph's topological order: the first pending task, then every
    further pending task whose addition keeps :func:`rollout_worst` within ``bound``.
    ``H`` only grows with the failure set, so a task refused once stays refused: the
    step is maximal (no pending task can be added) and always holds at least one task.
    ``limit`` caps the step's size (``0``: no cap).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c", "d"], [("a", "b"), ("c", "d")],
    ...                     latency={"a": 1, "b": 1, "c": 1, "d": 1.5})
    >>> s = RolloutState({"a": "n0", "b": "n1", "c": "n2", "d": "n3"}, frozenset({"c"}))
    >>> next_rollout_step(g, s, ["a", "b", "c", "d"], bound=2)   # c with d: 1 + 1.5 > 2
    (['a', 'b'], 2.0)
    """
    order = sorted(set(pending), key=graph.index)
    if not order:
        return [], rollout_worst(graph, state, [])
    step = [order[0]]
    worst = rollout_worst(graph, state, step)
    for task in order[1:]:
        if limit and len(step) >= limit:
            break
        w = rollout_worst(graph, state, [*step, task])
        if w <= bound + 1e-9:
            step.append(task)
            worst = w
    return step, worst


def plan_rollout(
    graph: TaskGraph,
    old: RolloutState,
    new: RolloutState,
    changed: Iterable[str],
    *,
    bound: float,
    limit: int = 0,
) -> list[tuple[list[str], float]]:
    """Every step of a rollout from ``old`` to ``new``: ``[(tasks, worst meanwhile), …]``.

    Parameters
    ----------
    graph:
        The task DAG (of the new spec; a changed spec keeps its task ids).
    old, new:
        The placement and backups before and after the rollout.
    changed:
        The tasks whose pods are replaced (each is replaced exactly once).
    bound:
        The planning bound ``R`` (minus the restart term).
    limit:
        At most this many tasks per step (``0``: as many as keep the bound).

    Returns
    -------
    list
        The steps in order, each with the worst ``H(K_p ∪ D_i)`` of its state; the
        state of step ``i`` has the tasks of steps ``< i`` on their new node and flag.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> s = RolloutState({"a": "n0", "b": "n1", "c": "n2"}, frozenset({"a", "b"}))
    >>> plan_rollout(g, s, s, ["a", "b", "c"], bound=2)   # a chain: one task at a time
    [(['a'], 2.0), (['b'], 2.0), (['c'], 2.0)]

    Notes
    -----
    Greedy (:func:`next_rollout_step`) on the state the previous steps leave; the
    evaluator is the failure-effect model of :mod:`planners.evaluate` for ``F = K_p ∪ D_i``.
    """
    pending = set(changed)
    done: set[str] = set()
    steps: list[tuple[list[str], float]] = []
    while pending:
        state = mixed_state(old, new, done)
        step, worst = next_rollout_step(graph, state, pending, bound=bound, limit=limit)
        steps.append((step, worst))
        pending -= set(step)
        done |= set(step)
    return steps


def mixed_state(old: RolloutState, new: RolloutState, done: Collection[str]) -> RolloutState:
    """The state once ``done`` runs its new pod: new node and flag for ``done``, old else.

    >>> o = RolloutState({"a": "n0", "b": "n0"}, frozenset({"a"}))
    >>> n = RolloutState({"a": "n1", "b": "n1"}, frozenset({"b"}))
    >>> s = mixed_state(o, n, ["a"])
    >>> dict(s.assignment), sorted(s.backups)
    ({'a': 'n1', 'b': 'n0'}, [])
    """
    done_set = set(done)
    assignment = {
        t: (new.assignment.get(t, n) if t in done_set else n) for t, n in old.assignment.items()
    }
    for t, n in new.assignment.items():
        assignment.setdefault(t, n)
    if old.backups is None and new.backups is None:
        return RolloutState(assignment, None)
    every = frozenset(assignment)
    ob = every if old.backups is None else old.backups
    nb = every if new.backups is None else new.backups
    flags = {t for t in assignment if (t in nb if t in done_set else t in ob)}
    return RolloutState(assignment, frozenset(flags))
