"""The placement step every replica selection shares, and the exact 0-1 knapsack.

The seed's selections differ in *which* operators get replicas; *where* they go is
one procedure for all of them (first fit over hosts, most important replica first, the
seed's network constraint (i), its rule that two copies never share a host (ii), and
colored bin packing, Section 3.3 of *Adaptive Selective Replication for Complex Event
Processing Systems*).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from planners.errors import UnknownAlgorithm
from planners.graph import TaskGraph
from planners.replication.crash import crash_availability
from planners.replication.model import ReplicationPlan, availability

__all__ = ["HOST_ORDERS"]

HOST_ORDERS = ("spare", "neighbour")
"""Host orders for first fit: most spare CPU first, or the seed's neighbouring factor."""

_EPS = 1e-9
_SCALE = 1000  # millicores for the knapsack

# --------------------------------------------------------------------------- shared steps


class _Cluster:
    """Validated inputs and the running state of one placement attempt."""

    def __init__(
        self,
        graph: TaskGraph,
        assignment: Mapping[str, str],
        spare: Mapping[str, float],
        budget: float,
        level: int,
        host_order: str,
        net: Mapping[str, float] | None,
        net_capacity: Mapping[str, float] | None,
        host_failure_prob: float | None,
    ):
        if budget < 0:
            raise ValueError(f"replication budget {budget} must be >= 0")
        if level < 1:
            raise ValueError(f"replication level {level} must be >= 1")
        if host_order not in HOST_ORDERS:
            raise UnknownAlgorithm(
                f"unknown host order {host_order!r}; choose one of: {', '.join(HOST_ORDERS)}"
            )
        if host_failure_prob is not None and not 0 <= host_failure_prob <= 1:
            raise ValueError(f"host failure probability {host_failure_prob} must be in [0, 1]")
        for n, c in spare.items():
            if not c >= 0:
                raise ValueError(f"node {n!r} has invalid spare CPU {c}")
        for n, c in (net_capacity or {}).items():
            if not c >= 0:
                raise ValueError(f"node {n!r} has invalid spare network {c}")
        self.graph = graph
        self.assignment = assignment
        self.spare = spare
        self.level = level
        self.host_order = host_order
        self.primary = {graph.index(t): n for t, n in assignment.items()}
        self.hosts = sorted(spare, key=lambda h: (-spare[h], h))
        self.limit = min(float(budget), sum(spare.values()))
        self.traffic = [float((net or {}).get(t, 0.0)) for t in graph.tasks]
        self.netcap = (
            None if net_capacity is None else {h: float(net_capacity.get(h, 0.0)) for h in spare}
        )
        self.p = host_failure_prob
        self.rank = _hops_to_output(graph)

    def tie(self, v: int) -> tuple[int, int]:
        """Between tasks of equal importance, the nearer to an output first: a lost
        output stops its query's output at once (see :func:`_hops_to_output`)."""
        return self.rank[v], v

    def fits_somewhere(self, v: int) -> bool:
        w = self.graph.weight[v]
        return any(h != self.primary[v] and self.spare[h] + _EPS >= w for h in self.hosts)

    def host_order_for(self, v: int) -> list[str]:
        """First-fit order for a replica of ``v``.

        ``neighbour``: hosts running more of ``v``'s predecessors and successors
        first (the seed's neighbouring factor, Section 3.3.1), ties by spare CPU.
        """
        if self.host_order == "spare":
            return self.hosts
        g = self.graph
        near: dict[str, int] = {}
        for u in (*g.preds[v], *g.succs[v]):
            h = self.primary.get(u)
            if h is not None:
                near[h] = near.get(h, 0) + 1
        rank = {h: i for i, h in enumerate(self.hosts)}
        return sorted(self.hosts, key=lambda h: (-near.get(h, 0), rank[h]))

    def place(
        self, order: list[int], colors: int | None
    ) -> tuple[dict[int, list[str]], list[int], dict[str, float], dict[str, float]]:
        """First fit of one replica per entry of ``order`` (a task may repeat, once per level).

        Constraints: spare CPU, spare network, never a host already holding a
        copy of the task, at most ``colors`` replicas per host.
        """
        g = self.graph
        rem = {h: float(self.spare[h]) for h in self.hosts}
        net = dict(self.netcap) if self.netcap is not None else None
        count = dict.fromkeys(self.hosts, 0)
        placed: dict[int, list[str]] = {}
        missed: list[int] = []
        for v in order:
            w, x = g.weight[v], self.traffic[v]
            have = {self.primary[v], *placed.get(v, ())}
            for h in self.host_order_for(v):
                if h in have or rem[h] + _EPS < w:
                    continue
                if net is not None and net[h] + _EPS < x:
                    continue
                if colors is not None and count[h] >= colors:
                    continue
                placed.setdefault(v, []).append(h)
                rem[h] -= w
                if net is not None:
                    net[h] -= x
                count[h] += 1
                break
            else:
                missed.append(v)
        return placed, missed, rem, net or {}

    def place_colored(
        self, order: list[int], max_colors: int | None
    ) -> tuple[dict[int, list[str]], list[int], dict[str, float], dict[str, float]]:
        """Colored bin packing: the smallest colour bound that places everything, else plain.

        Bounds tried: ``⌈m / hosts⌉`` and then doubling up to ``max_colors``
        (the seed's ``C``), so O(m·n·log m); past it, plain first fit (Section 3.3.2).
        """
        if not order or not self.hosts:
            return self.place(order, None)
        c = max(1, math.ceil(len(order) / len(self.hosts)))
        upper = len(order) if max_colors is None else min(max_colors, len(order))
        while c <= upper:
            got = self.place(order, c)
            if not got[1]:
                return got
            c = upper + 1 if c == upper else min(upper, 2 * c)
        return self.place(order, None)

    def plan(
        self,
        strategy: str,
        selection: str,
        imp: dict[str, float],
        placed: Mapping[int, list[str]],
        missed: list[int],
    ) -> ReplicationPlan:
        g = self.graph
        per_host: dict[str, int] = {}
        for hs in placed.values():
            for h in hs:
                per_host[h] = per_host.get(h, 0) + 1
        replicas = {g.tasks[v]: tuple(placed[v]) for v in sorted(placed) if placed[v]}
        pool = frozenset(self.assignment.values()) | frozenset(self.spare)
        crash = base_crash = None
        if self.p is not None:
            crash = crash_availability(g, self.assignment, replicas, self.p)
            base_crash = crash_availability(g, self.assignment, {}, self.p)
        return ReplicationPlan(
            strategy=strategy,
            replicas=replicas,
            importance=imp,
            cpu=sum(g.weight[v] * len(hs) for v, hs in placed.items()),
            unplaced=tuple(g.tasks[v] for v in sorted(set(missed) - set(placed))),
            colors=max(per_host.values(), default=None),
            availability=availability(g, self.assignment, replicas, pool),
            baseline_availability=availability(g, self.assignment, {}, pool),
            selection=selection,
            level=self.level,
            host_failure_prob=self.p,
            crash_availability=crash,
            baseline_crash_availability=base_crash,
        )


def _hops_to_output(graph: TaskGraph) -> list[int]:
    """Edges from each task to the nearest output (an output: 0; none reachable: ``V``).

    The tie-break of every selection: with one query every task's QOD is 1, and with
    equal weights every LU (``1 - w / max w``) is 0, so importance ranks nothing and task
    ids decided, sources first and the sink last; with room for some replicas only, the
    sink, whose loss stops the output at once, went without.

    >>> g = TaskGraph.build(["s", "a", "q"], [("s", "a"), ("a", "q")],
    ...     latency={"s": 1, "a": 1, "q": 1})
    >>> _hops_to_output(g)
    [2, 1, 0]
    """
    n = len(graph)
    hops = [n] * n
    frontier = sorted(graph.outputs)
    for v in frontier:
        hops[v] = 0
    while frontier:
        nxt = []
        for v in frontier:
            for u in graph.preds[v]:
                if hops[u] > hops[v] + 1:
                    hops[u] = hops[v] + 1
                    nxt.append(u)
        frontier = nxt
    return hops


def _knapsack(values: list[float], weights: list[float], budget: float) -> list[int]:
    """Indices of a 0-1 knapsack optimum (ortools, integer-scaled)."""
    from ortools.algorithms.python import knapsack_solver

    free = [i for i, w in enumerate(weights) if w <= _EPS and values[i] > 0]
    items = [i for i, w in enumerate(weights) if w > _EPS and values[i] > 0]
    cap = math.floor(budget * _SCALE + 1e-6)
    if not items or cap <= 0:
        return free
    # exact dynamic programme, divide and conquer: 0.16 s for 1000 items and a 50-core
    # budget, where branch and bound took 200 s (bench/bench_replication.py's workload)
    kind = knapsack_solver.SolverType.KNAPSACK_DIVIDE_AND_CONQUER_SOLVER
    solver = knapsack_solver.KnapsackSolver(kind, "replicas")
    solver.init(
        [round(values[i] * 1_000_000) for i in items],
        [[math.ceil(weights[i] * _SCALE - 1e-6) for i in items]],
        [cap],
    )
    solver.solve()
    return free + [i for k, i in enumerate(items) if solver.best_solution_contains(k)]
