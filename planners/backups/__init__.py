"""Minimum upstream backups that keep every single-task recovery within a bound.

Keeping an upstream buffer on every task (``M ≡ 1``) makes recovery fastest but
costs memory and CPU on every task; keeping none makes a failed task wait for its whole
upstream to recompute. The FTC seed (*Minimum Backups for Stream Processing With
Recovery Latency Guarantees*, Sec. III) asks for the fewest backup tasks such that every
task ``v`` recovers within ``R`` when it fails alone::

    L(v) = t_v + max over upstream u with M(u) = 0 of L(u)     (eq. 3)

which is the project's failure-effect model with ``F = {v}``
(:func:`planners.evaluate.worst_task_failure`).

Every algorithm here has one signature,
``backups_<name>(graph, bound, *, time_limit=10.0) -> BackupPlan``, and is
registered in :data:`BACKUP_ALGORITHMS`; :func:`plan_backups` picks one by
name. Every returned plan has been checked by :func:`planners.evaluate.check_plan`
before it leaves this module, so a bug shows up as an internal error here and
never as a silently broken bound.

The seed's algorithms are the floor: ``line`` and ``tree`` are Backstop's variants of
its exact O(N) algorithms (``line``: Algorithm 2 without the backup it adds every round;
``tree`` bottom-up; ``tree-topdown`` the seed's Algorithm 3 as written, searching from
the sources, which is not always minimum with non-uniform reprocessing times), ``dag``
is Backstop's variant of its Algorithm FTC (candidates ranked by b-cover share, not
Algorithm 4's backup workload) with its final redundancy-elimination step
(``dag-no-elim`` without that step), ``share-based``
its baseline and ``exhaustive`` its reference (``exhaustive-pruned`` the same search,
pruned, which finishes at the seed's Table III sizes). Each module lists where it
deviates from the seed, with the seed's section.
``exact`` (CP-SAT) and ``auto`` (shape detection, exact within a time budget,
then the DAG heuristic plus local search) are ours.
"""

from __future__ import annotations

from collections.abc import Callable

from planners.backups.auto import backups_auto
from planners.backups.baselines import EXHAUSTIVE_MAX_TASKS, backups_exhaustive, backups_share_based
from planners.backups.common import (
    BackupAlgorithm,
    BackupPlan,
    smallest_feasible_bound,
    topology_shape,
)
from planners.backups.dag import backups_dag, backups_dag_no_elim
from planners.backups.exact import backups_exact
from planners.backups.pruned import backups_exhaustive_pruned
from planners.backups.shapes import backups_line, backups_tree
from planners.backups.topdown import backups_tree_topdown
from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph

__all__ = [
    "BACKUP_ALGORITHMS",
    "EXHAUSTIVE_MAX_TASKS",
    "BackupPlan",
    "backups_auto",
    "backups_dag",
    "backups_dag_no_elim",
    "backups_exact",
    "backups_exhaustive",
    "backups_exhaustive_pruned",
    "backups_line",
    "backups_share_based",
    "backups_tree",
    "backups_tree_topdown",
    "plan_backups",
    "smallest_feasible_bound",
    "topology_shape",
]


BACKUP_ALGORITHMS: dict[str, BackupAlgorithm] = {
    "auto": backups_auto,
    "line": backups_line,
    "tree": backups_tree,
    "tree-topdown": backups_tree_topdown,
    "dag": backups_dag,
    "dag-no-elim": backups_dag_no_elim,
    "share-based": backups_share_based,
    "exhaustive": backups_exhaustive,
    "exhaustive-pruned": backups_exhaustive_pruned,
    "exact": backups_exact,
}
"""Every minimum-backup algorithm by name; ``auto`` is the default."""


def plan_backups(
    graph: TaskGraph, bound: float, *, algorithm: str = "auto", time_limit: float = 10.0
) -> BackupPlan:
    """Choose backup tasks with the named algorithm (see :data:`BACKUP_ALGORITHMS`).

    Parameters
    ----------
    graph : TaskGraph
        The task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    algorithm : str
        One of ``auto`` (default), ``line``, ``tree``, ``tree-topdown``, ``dag``,
        ``dag-no-elim``, ``share-based``, ``exhaustive``, ``exhaustive-pruned``, ``exact``.
    time_limit : float
        Seconds the searching algorithms may use.

    Returns
    -------
    BackupPlan
        A plan checked by the failure-effect evaluator.

    Raises
    ------
    UnknownAlgorithm
        If ``algorithm`` is not a registered name (the message lists them).
    InvalidTopology
        If ``line``, ``tree`` or ``tree-topdown`` is asked for a graph of another shape.
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "b"), ("b", "c"), ("c", "d")],
    ...                     latency=dict.fromkeys("abcd", 1.0))
    >>> plan_backups(g, 2.0).backups
    ('b',)
    >>> plan_backups(g, 0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    planners.errors.Infeasible: bound 0.5s is infeasible: ... smallest feasible bound is 1s

    Notes
    -----
    Dispatch only; see each algorithm for its complexity.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*.
    """
    try:
        fn: Callable[..., BackupPlan] = BACKUP_ALGORITHMS[algorithm]
    except KeyError:
        raise UnknownAlgorithm(
            f"unknown backup algorithm {algorithm!r}; choose one of " + ", ".join(BACKUP_ALGORITHMS)
        ) from None
    return fn(graph, bound, time_limit=time_limit)
