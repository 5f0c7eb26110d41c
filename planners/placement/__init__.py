"""Recovery-latency-aware placement: which node each task runs on (RTAP seeds).

Tasks placed on one node fail together, and a task that fails together with its
upstream must wait for it to recover before it can replay (the correlated failure effect
model of *A Task Allocation Method for Stream Processing with Recovery Latency
Constraint*, Section 3.3). So a placement is not plain bin packing: every node failure
``K_p`` (and, with failure domains, every zone or rack) must keep ``H(K_p)`` within the
recovery-latency bound, while using as few nodes as possible.

Every algorithm shares one signature and is registered by name in
:data:`PLACEMENT_ALGORITHMS`; :func:`place` dispatches on it:

- ``nfdh``, ``ffdh``, ``bfdh``: the seed's 2SP-based greedy baselines made
  stronger (sort by reprocessing latency, then next/first/best fit with the
  exact recovery check);
- ``nfdh-2sp``, ``ffdh-2sp``, ``bfdh-2sp``: the same baselines as the seed
  writes them, fitting by the node's level height (:mod:`planners.placement.twosp`);
  their plans may break the bound and report it (:attr:`Placement.violations`);
- ``rtap-nf``, ``rtap-ff``, ``rtap-bf``: the seed's Algorithm 1 (weighted upstream
  degree order, grouping, then 1-D packing per group), and ``rtap-*-literal``
  with its grouping rule as written (Section 5.3.3: every member of a group,
  adjacent or not, must leave room for the new task's height);
- ``rtap-bf-backtrack``: the seed's packing without grouping, where tasks made
  unfit by a new one are picked out and re-queued (Section 4.3);
- ``exact``: CP-SAT (ortools, :mod:`planners.placement.cpsat`) within a budget,
  starting from the best heuristic;
- ``auto``: the best of several latency-aware greedy packings, improved by a local
  search that empties nodes, then CP-SAT when the instance is small.

:func:`plan_joint` goes beyond the seeds: it chooses the backups *and* the
placement so that every node failure keeps the bound, with as few nodes as
possible and then as few backups as possible.

Budgets (``time_limit``) are deterministic work limits (:mod:`planners.budget`):
the same input and budget give the same placement on any machine, and nodes are
taken in name order, so the dry run shows what the operator will do.

Every result is checked by :func:`planners.evaluate.check_plan` (and by the
correlated-failure evaluator when nodes carry domains) before it is returned: a
planner bug surfaces as an ``AssertionError`` here, never as a silently broken
guarantee (the ``*-2sp`` baselines record what the check finds instead).

Nodes are real: each :class:`Node` has its own available CPU (allocatable minus
what already runs there) and an optional failure domain. A :class:`NodePool` is
either such an explicit list or "as many identical nodes of size X as needed".
"""

from __future__ import annotations

from planners.placement.backtrack import place_rtap_bf_backtrack
from planners.placement.baselines import place_bfdh, place_ffdh, place_nfdh
from planners.placement.joint import plan_joint
from planners.placement.model import Node, NodePool, Placement, PlacementAlgorithm
from planners.placement.orders import weighted_upstream_degree
from planners.placement.registry import (
    PLACEMENT_ALGORITHMS,
    REPORTS_VIOLATIONS,
    place,
    require_valid,
)
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

__all__ = [
    "PLACEMENT_ALGORITHMS",
    "REPORTS_VIOLATIONS",
    "Node",
    "NodePool",
    "Placement",
    "PlacementAlgorithm",
    "place",
    "place_auto",
    "place_bfdh",
    "place_bfdh_2sp",
    "place_exact",
    "place_ffdh",
    "place_ffdh_2sp",
    "place_nfdh",
    "place_nfdh_2sp",
    "place_rtap_bf",
    "place_rtap_bf_backtrack",
    "place_rtap_bf_literal",
    "place_rtap_ff",
    "place_rtap_ff_literal",
    "place_rtap_nf",
    "place_rtap_nf_literal",
    "plan_joint",
    "require_valid",
    "weighted_upstream_degree",
]
