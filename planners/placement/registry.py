"""Every placement algorithm by name, and the family's dispatcher."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.placement.baselines import place_bfdh, place_ffdh, place_nfdh
from planners.placement.model import Node, NodePool, Placement, PlacementAlgorithm  # noqa: F401 (Node: doctest)
from planners.placement.rtap import place_rtap_bf, place_rtap_ff, place_rtap_nf
from planners.placement.search import place_auto, place_exact

PLACEMENT_ALGORITHMS: dict[str, PlacementAlgorithm] = {
    "auto": place_auto,
    "exact": place_exact,
    "rtap-bf": place_rtap_bf,
    "rtap-ff": place_rtap_ff,
    "rtap-nf": place_rtap_nf,
    "bfdh": place_bfdh,
    "ffdh": place_ffdh,
    "nfdh": place_nfdh,
}
"""Every placement algorithm by name; ``auto`` is the default."""


def _algorithm(name: str) -> PlacementAlgorithm:
    try:
        return PLACEMENT_ALGORITHMS[name]
    except KeyError:
        raise UnknownAlgorithm(
            f"unknown placement algorithm {name!r}; choose one of "
            + ", ".join(PLACEMENT_ALGORITHMS)
        ) from None


def place(
    graph: TaskGraph,
    pool: NodePool,
    *,
    bound: float,
    backups: Iterable[str] | None = None,
    algorithm: str = "auto",
    time_limit: float = 10.0,
    domains: Mapping[str, str] | None = None,
) -> Placement:
    """Place every task with the named algorithm (the family's dispatcher).

    Parameters
    ----------
    graph, bound, backups, time_limit:
        As in :func:`place_nfdh`.
    pool:
        The nodes; their ``domain`` fields are the failure domains.
    algorithm:
        A key of :data:`PLACEMENT_ALGORITHMS`; default ``"auto"``.
    domains:
        Optional ``{node: domain}`` overriding the nodes' domains (explicit pools
        only); with domains, losing a whole domain also keeps the bound.

    Returns
    -------
    Placement

    Raises
    ------
    UnknownAlgorithm
        For a name not in the registry.
    Infeasible
        As the algorithm raises it.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> pool = NodePool.of([Node("n1", 4, "z1"), Node("n2", 4, "z1"), Node("n3", 1, "z2")])
    >>> p = place(g, pool, bound=1, algorithm="rtap-bf")
    >>> p.assignment["a"] != p.assignment["b"], p.nodes_used
    (True, 2)

    Notes
    -----
    Complexity is the algorithm's.

    References
    ----------
    ``seeds/rtap-journal.txt``.
    """
    fn = _algorithm(algorithm)
    return fn(
        graph, pool.with_domains(domains), bound=bound, backups=backups, time_limit=time_limit
    )
