"""Every placement algorithm by name, and the family's dispatcher."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planners.errors import Infeasible, UnknownAlgorithm
from planners.graph import TaskGraph
from planners.placement.backtrack import place_rtap_bf_backtrack
from planners.placement.baselines import place_bfdh, place_ffdh, place_nfdh
from planners.placement.model import Node, NodePool, Placement, PlacementAlgorithm  # noqa: F401 (Node: doctest)
from planners.placement.rtap import (
    place_rtap_bf,
    place_rtap_bf_literal,
    place_rtap_ff,
    place_rtap_ff_literal,
    place_rtap_nf,
    place_rtap_nf_literal,
)
from planners.placement.search import place_auto, place_exact
from planners.placement.twosp import place_bfdh_2sp, place_ffdh_2sp, place_nfdh_2sp

PLACEMENT_ALGORITHMS: dict[str, PlacementAlgorithm] = {
    "auto": place_auto,
    "exact": place_exact,
    "rtap-bf": place_rtap_bf,
    "rtap-ff": place_rtap_ff,
    "rtap-nf": place_rtap_nf,
    "bfdh": place_bfdh,
    "ffdh": place_ffdh,
    "nfdh": place_nfdh,
    "rtap-bf-literal": place_rtap_bf_literal,
    "rtap-ff-literal": place_rtap_ff_literal,
    "rtap-nf-literal": place_rtap_nf_literal,
    "rtap-bf-backtrack": place_rtap_bf_backtrack,
    "bfdh-2sp": place_bfdh_2sp,
    "ffdh-2sp": place_ffdh_2sp,
    "nfdh-2sp": place_nfdh_2sp,
}
"""Every placement algorithm by name; ``auto`` is the default.

``rtap-nf``/``-ff``/``-bf`` are Backstop's variants of the RTAP seed's Algorithm 1: tasks
grouped by adjacent pairs, not by its Section 5.3.3 rule, and every fit checked by the
failure-effect model (:mod:`planners.placement.rtap` lists the deviations).

``*-2sp`` are the RTAP seed's baselines as it writes them (fit by level
height); their plans may break the bound and say so in
:attr:`Placement.violations` (:data:`REPORTS_VIOLATIONS`). ``*-literal`` are
the seed's Algorithm 1 with its grouping rule as written; ``rtap-bf-backtrack``
is its packing without grouping, picking out the tasks a new one makes unfit.
"""

REPORTS_VIOLATIONS = frozenset({"nfdh-2sp", "ffdh-2sp", "bfdh-2sp"})
"""Algorithms whose plans are reported, not guaranteed: they do not fit by the model."""


def require_valid(plan: Placement) -> Placement:
    """``plan`` itself if the failure-effect evaluator found nothing wrong with it.

    Only the ``*-2sp`` baselines can return a plan that breaks the bound;
    anything that acts on a plan (the joint plan, the operator) goes through
    here, so such a plan is refused with the evaluator's finding, not applied.

    Raises
    ------
    Infeasible
        Naming the algorithm and the first violation.

    Examples
    --------
    >>> from planners.graph import TaskGraph
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> require_valid(place(g, NodePool.uniform(2), bound=2)).nodes_used
    1
    """
    if plan.violations:
        raise Infeasible(
            f"placement algorithm {plan.algorithm!r} breaks the bound under the "
            f"failure-effect model ({plan.violations[0]}): it fits by the RTAP seed's "
            "level-height estimate; choose one that checks the model (auto, bfdh, rtap-bf)"
        )
    return plan


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
        Checked by the failure-effect evaluator; only the ``*-2sp`` baselines
        can return a plan over the bound, and say so in ``violations``.

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
    Li et al. *A Task Allocation Method for Stream Processing with Recovery Latency Constraint*.
    """
    fn = _algorithm(algorithm)
    return fn(
        graph, pool.with_domains(domains), bound=bound, backups=backups, time_limit=time_limit
    )
