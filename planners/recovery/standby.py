"""Recovery from a complete failure onto nodes acquired one by one: the seed's Section 6.

When every node of the processing cluster is lost (a rack, a data centre), nothing runs to
roll back and nothing is free: recovery starts from the latest global checkpoint on nodes
that arrive one at a time, in the data centre that keeps the input log and the checkpoints.
*Incremental Recovery in Distributed Stream Processing Systems* (Section 6) recovers the
failed partitions incrementally, following that pace, instead of blocking until every
node is there. :func:`recover_complete_failure` plans exactly that on a pure
:class:`RecoverySession`; acquiring the nodes, the heartbeats that detect the failure and
the replicated log are the runtime's and the cluster's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from planners.graph import TaskGraph
from planners.recovery.execute import PlanExecution, execute_recovery_plans
from planners.recovery.model import DEFAULT_UTILIZATION, RecoveryStep
from planners.recovery.session import Mode, NodeReady, NodesLost, RecoverySession


@dataclass(frozen=True)
class CompleteFailureRecovery:
    """The plan of a recovery from a complete failure.

    Attributes
    ----------
    checkpoint:
        The latest complete global checkpoint: every task restarts from it.
    coordinator:
        The first node to arrive, where the coordinator (the seed's Nimbus and
        control bolt) restarts; ``None`` if no node arrives.
    plans:
        ``(node, plan)`` per arriving node, in arrival order: the plan issued
        once that node is available (``None``: nothing could be recovered yet).
    executions:
        Algorithm 2's actions for each issued plan; the first one carries the
        global rollback (with no task running, it only restores from the checkpoint).
    session:
        The session after the last arrival (``session.failed``: what still waits).
    """

    checkpoint: int
    coordinator: str | None
    plans: tuple[tuple[str, RecoveryStep | None], ...]
    executions: tuple[PlanExecution, ...]
    session: RecoverySession


def recover_complete_failure(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    node_cpu: Mapping[str, float],
    arrivals: Sequence[tuple[str, float]],
    *,
    checkpoints: Collection[int],
    mode: Mode = "incremental",
    algorithm: str = "auto",
    utilization: float = DEFAULT_UTILIZATION,
    time_limit: float = 5.0,
) -> CompleteFailureRecovery:
    """Recover a completely failed cluster onto nodes that arrive one by one (Section 6).

    Every node of ``assignment`` is lost, so every task fails. The latest
    global checkpoint is selected; the first arriving node hosts the
    coordinator; at each arrival (once the node is available) the session
    issues a recovery plan on the arrived nodes' free CPU, as Section 4.4
    does for a partial failure (``mode="blocking"``: the seed's "intuitive"
    alternative, which waits until every failed task fits).

    Parameters
    ----------
    graph:
        The task DAG.
    assignment:
        Task → node before the failure; all of these nodes are lost.
    node_cpu:
        Allocatable CPU of those nodes.
    arrivals:
        ``(node, allocatable CPU)`` of the acquired nodes, in arrival order (a
        lost node may come back under its own name).
    checkpoints:
        Ids of the complete global checkpoints (the coordinator's record).
    mode, algorithm, utilization, time_limit:
        As for :class:`RecoverySession`.

    Returns
    -------
    CompleteFailureRecovery

    Raises
    ------
    ValueError
        If there is no complete global checkpoint to restore from.
    InvalidEvent
        If the assignment names a node missing from ``node_cpu``, or an arrival's CPU is negative.

    Examples
    --------
    Two queries share a source; each arriving node offers 2 cores at the seed's
    80 % cap (1.6 free). The first node brings back the source and the
    priority-5 query, the second the other one.

    >>> g = TaskGraph.build(["s-0", "a-0", "b-0"], [("s-0", "a-0"), ("s-0", "b-0")],
    ...     latency={"s-0": 1, "a-0": 1, "b-0": 1}, weight={"s-0": 0.5, "a-0": 1, "b-0": 1},
    ...     priority={"a-0": 1, "b-0": 5})
    >>> r = recover_complete_failure(g, {"s-0": "x", "a-0": "x", "b-0": "y"}, {"x": 4, "y": 4},
    ...     [("n1", 2.0), ("n2", 2.0)], checkpoints=[3, 4])
    >>> r.checkpoint, r.coordinator
    (4, 'n1')
    >>> [(node, step.recovered_queries) for node, step in r.plans if step is not None]
    [('n1', ('b-0',)), ('n2', ('a-0',))]
    >>> [e.global_rollback for e in r.executions], sorted(r.session.failed)
    ([True, False], [])

    References
    ----------
    Su, Zhou. *Incremental Recovery in Distributed Stream Processing Systems*,
    Section 6 (recovery of complete failure), Section 4.4 and Algorithm 2.
    """
    if not checkpoints:
        raise ValueError("no complete global checkpoint to restore from")
    latest = max(checkpoints)
    session = RecoverySession.start(
        graph,
        assignment,
        node_cpu,
        mode=mode,
        algorithm=algorithm,
        utilization=utilization,
        time_limit=time_limit,
    )
    session = session.apply(NodesLost(tuple(sorted(set(node_cpu)))))
    plans: list[tuple[str, RecoveryStep | None]] = []
    for node, cpu in arrivals:
        session, step = session.handle(NodeReady(node, cpu))
        plans.append((node, step))
    executions = execute_recovery_plans(graph, {}, session.steps, checkpoint=latest)
    return CompleteFailureRecovery(
        checkpoint=latest,
        coordinator=arrivals[0][0] if arrivals else None,
        plans=tuple(plans),
        executions=executions,
        session=session,
    )
