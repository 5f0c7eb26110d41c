"""Every recovery algorithm by name, and the one entry point that runs them."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.recovery.best_density import (
    recover_best_density,
    recover_best_density_pruned,
    recover_best_density_strong,
)
from planners.recovery.exact import recover_auto, recover_exact
from planners.recovery.heuristics import recover_dp, recover_operator_centric
from planners.recovery.model import RecoveryAlgorithm, RecoveryStep

RECOVERY_ALGORITHMS: dict[str, RecoveryAlgorithm] = {
    "operator-centric": recover_operator_centric,
    "best-density": recover_best_density,
    "best-density-pruned": recover_best_density_pruned,
    "best-density-strong": recover_best_density_strong,
    "dp": recover_dp,
    "exact": recover_exact,
    "auto": recover_auto,
}
"""Every recovery algorithm by name; ``auto`` is the default."""


def schedule_recovery(
    graph: TaskGraph,
    failed: Collection[str],
    capacity: Mapping[str, float],
    *,
    algorithm: str = "auto",
    time_limit: float = 5.0,
) -> RecoveryStep:
    """Run the recovery algorithm named ``algorithm`` (see :data:`RECOVERY_ALGORITHMS`).

    Raises
    ------
    UnknownAlgorithm
        If ``algorithm`` is not registered; the message lists the names.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> schedule_recovery(g, ["a", "b"], {"n": 3.0}).recover
    {'a': 'n', 'b': 'n'}
    """
    try:
        fn = RECOVERY_ALGORITHMS[algorithm]
    except KeyError:
        names = ", ".join(sorted(RECOVERY_ALGORITHMS))
        raise UnknownAlgorithm(
            f"unknown recovery algorithm {algorithm!r}; choose one of: {names}"
        ) from None
    return fn(graph, failed, capacity, time_limit=time_limit)
