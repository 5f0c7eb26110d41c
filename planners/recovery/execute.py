"""What every node does to carry out a recovery plan: the seed's Algorithm 2 and its rollback.

A recovery plan (:class:`RecoveryStep`) says which failed tasks restart where. Carrying it
out also means restoring their state, switching on adaptive buffering and order-preserving
processing, rolling the running tasks back when the plan is the incident's first, and
replaying the output that upstream tasks buffered for the restarted ones. Following
*Incremental Recovery in Distributed Stream Processing Systems* (Section 4.4, Algorithm 2
EXECUTERECOVERYPLAN), :func:`execute_recovery_plan` turns one plan into those actions, as
data, so that the runtime (not this pure package) performs them and a test can check them.
A seed "task" (one per operator per node) is a node here and a seed "partition" is a task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planners.graph import TaskGraph
from planners.recovery.model import RecoveryStep


@dataclass(frozen=True)
class PlanExecution:
    """The actions of one recovery plan, per Algorithm 2.

    Attributes
    ----------
    checkpoint:
        The global checkpoint (``RP.checkpoint``) restored tasks start from and
        a global rollback returns to.
    global_rollback:
        ``RP.globalRollback``: whether running tasks roll back too.
    install:
        Failed task → node: installed there with the checkpoint's state (lines 4, 14).
    rollback:
        Running task → node: buffers cleared and state rolled back to the
        checkpoint (lines 8–9); empty without a global rollback.
    flagged:
        Tasks whose buffering and order-preserving flags the plan switches on
        (lines 5–6, 10–11, 15–16).
    resend:
        ``(upstream, downstream, downstream's node)``: the output ``upstream``
        buffered for ``downstream`` is sent to the node ``downstream`` restarts
        on (lines 17–21).
    """

    checkpoint: int
    global_rollback: bool
    install: dict[str, str]
    rollback: dict[str, str]
    flagged: frozenset[str]
    resend: tuple[tuple[str, str, str], ...]


def execute_recovery_plan(
    graph: TaskGraph,
    step: RecoveryStep,
    running: Mapping[str, str],
    *,
    checkpoint: int,
    global_rollback: bool,
) -> PlanExecution:
    """The actions each node takes to carry out ``step`` (the seed's Algorithm 2).

    For each node (the seed's task ``t_i``), in name order: with a global
    rollback, install the failed tasks the plan puts there from the checkpoint
    and roll every running task back to it, all with buffering and
    order-preserving processing on; without one, only install. Then every task
    on the node (running or just installed) sends what it buffered for each
    downstream neighbour the plan recovers to that neighbour's node.

    Parameters
    ----------
    graph:
        The task DAG.
    step:
        The recovery plan.
    running:
        Task → node of every task running before the plan (failed tasks absent).
    checkpoint:
        The global checkpoint the plan restores (the latest complete one).
    global_rollback:
        The plan's rollback flag; the incident's first plan sets it (see
        :func:`execute_recovery_plans`).

    Returns
    -------
    PlanExecution

    Raises
    ------
    ValueError
        If the plan recovers a task that is running.

    Examples
    --------
    The seed's Fig. 5 (adaptive buffering): ``p3``, ``p4`` and ``p5`` fail; the
    first plan restarts ``p3`` and ``p4`` with a rollback, and ``p2`` replays
    to them; the second restarts ``p5``, which gets what ``p3`` buffered.

    >>> g = TaskGraph.build(["p1", "p2", "p3", "p4", "p5"],
    ...     [("p1", "p2"), ("p2", "p3"), ("p2", "p4"), ("p3", "p5")],
    ...     latency=dict.fromkeys(["p1", "p2", "p3", "p4", "p5"], 1.0))
    >>> first = RecoveryStep("x", {"p3": "n2", "p4": "n2"}, ("p5",), ("p4",), 1.0, 2.0, None)
    >>> ex = execute_recovery_plan(g, first, {"p1": "n1", "p2": "n1"},
    ...                            checkpoint=7, global_rollback=True)
    >>> sorted(ex.rollback), sorted(ex.flagged), ex.resend
    (['p1', 'p2'], ['p1', 'p2', 'p3', 'p4'], (('p2', 'p3', 'n2'), ('p2', 'p4', 'n2')))
    >>> second = RecoveryStep("x", {"p5": "n3"}, (), ("p5",), 1.0, 1.0, None)
    >>> ex = execute_recovery_plan(g, second, {"p1": "n1", "p2": "n1", "p3": "n2", "p4": "n2"},
    ...                            checkpoint=7, global_rollback=False)
    >>> ex.install, ex.rollback, ex.resend
    ({'p5': 'n3'}, {}, (('p3', 'p5', 'n3'),))

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 4.4 and Algorithm 2; Section 4.2 (Fig. 5).
    """
    both = sorted(set(step.recover) & set(running))
    if both:
        raise ValueError(f"the plan recovers running task(s): {', '.join(both)}")
    install: dict[str, str] = {}
    rollback: dict[str, str] = {}
    resend: list[tuple[str, str, str]] = []
    for node in sorted(set(running.values()) | set(step.recover.values())):
        installed = [t for t, n in step.recover.items() if n == node]
        alive = [t for t, n in running.items() if n == node]
        install.update(dict.fromkeys(installed, node))
        if global_rollback:
            rollback.update(dict.fromkeys(alive, node))
        for v in sorted(graph.indices(alive + installed)):
            for k in graph.succs[v]:
                t, down = graph.tasks[v], graph.tasks[k]
                if down in step.recover:
                    resend.append((t, down, step.recover[down]))
    return PlanExecution(
        checkpoint=checkpoint,
        global_rollback=global_rollback,
        install=install,
        rollback=rollback,
        flagged=frozenset(install) | frozenset(rollback),
        resend=tuple(resend),
    )


def execute_recovery_plans(
    graph: TaskGraph,
    running: Mapping[str, str],
    steps: Sequence[RecoveryStep],
    *,
    checkpoint: int,
) -> tuple[PlanExecution, ...]:
    """Algorithm 2 over an incident's plans: only the first one rolls back (Section 4.4).

    The first plan rolls every running task back to the latest global
    checkpoint ``ck(P_k)``; later plans only install, and the tasks earlier plans
    recovered count as running for them.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> s1 = RecoveryStep("x", {"a": "n2"}, ("b",), (), 0.0, 1.0, None)
    >>> s2 = RecoveryStep("x", {"b": "n3"}, (), ("b",), 1.0, 1.0, None)
    >>> [(e.global_rollback, e.resend) for e in execute_recovery_plans(g, {}, [s1, s2],
    ...                                                                 checkpoint=3)]
    [(True, ()), (False, (('a', 'b', 'n3'),))]

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 4.4.
    """
    out: list[PlanExecution] = []
    now = dict(running)
    for i, step in enumerate(steps):
        out.append(
            execute_recovery_plan(graph, step, now, checkpoint=checkpoint, global_rollback=i == 0)
        )
        now.update(step.recover)
    return tuple(out)
