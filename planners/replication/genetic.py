"""The seed's replication optimizer: a genetic search over replica placements.

*Adaptive Selective Replication for Complex Event Processing Systems*, Section 4, states two
problems over the set ``P`` of placements "resulting from different operator selections,
different replication levels, as well as different placement strategies":
``max{A(plc) | cost(plc) ≤ cost_max}`` and ``min{cost(plc) | A(plc) ≥ A(Q)}``, to be solved
"using well-known optimization algorithms like genetic search" (Goldberg). The seed fixes
no encoding or operators; this module uses Goldberg's simple genetic algorithm on the most
direct encoding of ``plc``: one gene per replica slot (operator × level) holding a host or
nothing, fitness-proportionate selection on windowed fitness (``f`` minus the generation's
worst, one of Goldberg's scalings), one-point crossover, per-gene mutation,
generational replacement with the elitist model (the best individual so far survives).
``A`` is the seed's crash availability (Section 2.3), ``cost`` the replicas' load (Section 2.4).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from planners.graph import TaskGraph
from planners.replication.crash import crash_availability
from planners.replication.model import ReplicationPlan, availability, importance
from planners.replication.placement import _EPS, _Cluster

__all__ = ["replicate_genetic"]

_Genes = list[int]
"""One host index (into the hosts) or -1 (no replica) per replica slot."""


class _Search:
    """Decoding and fitness of chromosomes for one instance."""

    def __init__(
        self, cl: _Cluster, max_colors: int | None, target: float | None, seed: int
    ) -> None:
        self.cl = cl
        self.colors = max_colors
        self.target = target
        self.rng = random.Random(seed)
        self.ops = sorted(cl.primary)
        self.slots = [v for v in self.ops for _ in range(cl.level)]
        self.cache: dict[tuple[tuple[int, tuple[str, ...]], ...], float] = {}
        self.pool = frozenset(cl.assignment.values()) | frozenset(cl.spare)

    def decode(self, genes: _Genes) -> dict[int, list[str]]:
        """The valid placement a chromosome stands for: genes that break a rule are dropped.

        Rules, in gene order: a host with a copy of the operator, past its spare
        CPU or network or its colour bound, or past the budget, gets no replica.
        """
        cl, g = self.cl, self.cl.graph
        rem = {h: float(cl.spare[h]) for h in cl.hosts}
        net = dict(cl.netcap) if cl.netcap is not None else None
        count = dict.fromkeys(cl.hosts, 0)
        placed: dict[int, list[str]] = {}
        used = 0.0
        for v, x in zip(self.slots, genes, strict=True):
            if x < 0:
                continue
            h, w, t = cl.hosts[x], g.weight[v], cl.traffic[v]
            if h == cl.primary[v] or h in placed.get(v, ()) or rem[h] + _EPS < w:
                continue
            if net is not None and net[h] + _EPS < t:
                continue
            if (self.colors is not None and count[h] >= self.colors) or used + w > cl.limit + _EPS:
                continue
            placed.setdefault(v, []).append(h)
            rem[h] -= w
            count[h] += 1
            used += w
            if net is not None:
                net[h] -= t
        return placed

    def fitness(self, genes: _Genes) -> float:
        """``A(plc)`` (goal 1), or for goal 2 ``2 − cost/limit`` once ``A ≥ target``, else ``A``."""
        cl, g = self.cl, self.cl.graph
        placed = self.decode(genes)
        key = tuple((v, tuple(sorted(hs))) for v, hs in sorted(placed.items()))
        if key in self.cache:
            return self.cache[key]
        replicas = {g.tasks[v]: tuple(hs) for v, hs in placed.items()}
        if cl.p is not None:
            a = crash_availability(g, cl.assignment, replicas, cl.p)
        else:
            a = availability(g, cl.assignment, replicas, self.pool)
        fit = a
        if self.target is not None and a >= self.target - 1e-12:
            cost = sum(g.weight[v] * len(hs) for v, hs in placed.items())
            fit = 2.0 - (cost / cl.limit if cl.limit > 0 else 0.0)
        self.cache[key] = fit
        return fit

    def random_genes(self) -> _Genes:
        n = len(self.cl.hosts)
        if n == 0:
            return [-1] * len(self.slots)
        return [self.rng.randrange(n) if self.rng.random() < 0.5 else -1 for _ in self.slots]

    def encode(self, replicas: Mapping[str, Sequence[str]]) -> _Genes:
        """The chromosome of a given plan's replicas (extra replicas past the level dropped)."""
        cl, g = self.cl, self.cl.graph
        index = {h: i for i, h in enumerate(cl.hosts)}
        genes = [-1] * len(self.slots)
        for k, v in enumerate(self.ops):
            hs = [index[h] for h in replicas.get(g.tasks[v], ()) if h in index]
            for j, x in enumerate(hs[: cl.level]):
                genes[k * cl.level + j] = x
        return genes

    def roulette(self, pop: list[_Genes], fits: list[float]) -> _Genes:
        """Fitness-proportionate choice on the windowed fitness ``f − min f`` (uniform if flat).

        Availabilities of one generation differ in the third decimal; without
        windowing the wheel would be nearly uniform.
        """
        low = min(fits)
        total = sum(f - low for f in fits)
        if total <= 1e-15:
            return pop[self.rng.randrange(len(pop))]
        x = self.rng.random() * total
        for genes, f in zip(pop, fits, strict=True):
            x -= f - low
            if x < 0:
                return genes
        return pop[-1]

    def mutate(self, genes: _Genes, rate: float) -> _Genes:
        n = len(self.cl.hosts)
        return [(self.rng.randrange(-1, n) if self.rng.random() < rate else x) for x in genes]


def replicate_genetic(
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    *,
    budget: float,
    strategy: str = "qod-lu",
    seed: int = 0,
    max_colors: int | None = None,
    level: int = 1,
    host_order: str | None = None,
    net: Mapping[str, float] | None = None,
    net_capacity: Mapping[str, float] | None = None,
    host_failure_prob: float | None = None,
    population: int = 20,
    generations: int = 30,
    crossover: float = 0.9,
    mutation: float | None = None,
    target: float | None = None,
    initial: Sequence[Mapping[str, Sequence[str]]] = (),
) -> ReplicationPlan:
    """The seed's replication optimizer (Section 4) by genetic search.

    Goal 1 (default): maximise ``A(plc)`` subject to ``cost(plc) ≤ cost_max``
    (``budget``). Goal 2 (``target`` given): minimise ``cost(plc)`` subject to
    ``A(plc) ≥ target``. ``A`` is :func:`planners.replication.crash_availability`
    for ``host_failure_prob`` (without it, the single-node availability); ``cost``
    is the replicas' load.

    Parameters
    ----------
    graph, assignment, spare, budget, max_colors, level, net, net_capacity, host_failure_prob:
        As for :func:`planners.replication.replicate_sort_fill`; ``level`` is the
        number of replica slots per operator, ``max_colors`` caps replicas per host.
    strategy:
        Only reported in the plan (the search uses no importance heuristic).
    seed:
        Seed of the search: the same arguments give the same plan.
    host_order:
        Ignored: the chromosome chooses each replica's host.
    population, generations:
        Individuals per generation and generations after the first.
    crossover:
        Probability that two parents cross (one point); else they are copied.
    mutation:
        Probability that a gene takes a new random value (default ``1 / genes``).
    target:
        The availability ``A(Q)`` of goal 2.
    initial:
        Replica maps (task → hosts) put into the first generation before the
        random individuals, e.g. other selections' plans.

    Returns
    -------
    ReplicationPlan
        The best individual of any generation, decoded; ``selection`` is ``"genetic"``.

    Raises
    ------
    InvalidTopology, ValueError
        As for :func:`planners.replication.replicate_sort_fill`, or if
        ``population < 2`` or ``generations < 0``.

    Examples
    --------
    One source ``s`` on ``n1`` feeding ``q`` on ``n2``, room for one replica:
    the optimum puts ``s`` on ``n2`` (then only ``n2``'s crash breaks the query,
    ``A = 0.9`` at ``p = 0.1``, against ``0.81`` without replicas).

    >>> g = TaskGraph.build(["s", "q"], [("s", "q")], latency={"s": 1, "q": 1})
    >>> plan = replicate_genetic(g, {"s": "n1", "q": "n2"}, {"n2": 1.0, "n3": 1.0},
    ...     budget=1.0, host_failure_prob=0.1, population=8, generations=5)
    >>> plan.replicas, round(plan.crash_availability, 6)
    ({'s': ('n2',)}, 0.9)

    Notes
    -----
    Every chromosome decodes to a valid plan (genes breaking a rule are
    dropped), and with the elitist model the result is never worse than the
    best initial individual. Cost: ``population · (generations + 1)`` fitness
    evaluations at most (decoded plans are cached), each a crash availability.

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Section 4. Goldberg, *Genetic Algorithms in
    Search, Optimization and Machine Learning*, ch. 1 (the simple genetic
    algorithm) and ch. 4 (the elitist model).
    """
    if population < 2 or generations < 0:
        raise ValueError(f"population {population} must be >= 2, generations {generations} >= 0")
    cl = _Cluster(
        graph,
        assignment,
        spare,
        budget,
        level,
        host_order or "spare",
        net,
        net_capacity,
        host_failure_prob,
    )
    s = _Search(cl, max_colors, target, seed)
    rate = mutation if mutation is not None else 1.0 / max(1, len(s.slots))
    pop = [s.encode(r) for r in initial][:population]
    pop += [s.random_genes() for _ in range(population - len(pop))]
    fits = [s.fitness(x) for x in pop]
    best = max(range(len(pop)), key=lambda i: (fits[i], -i))
    elite, elite_fit = pop[best], fits[best]
    for _ in range(generations):
        nxt: list[_Genes] = [elite]
        while len(nxt) < population:
            a, b = s.roulette(pop, fits), s.roulette(pop, fits)
            if len(s.slots) > 1 and s.rng.random() < crossover:
                cut = s.rng.randrange(1, len(s.slots))
                a, b = a[:cut] + b[cut:], b[:cut] + a[cut:]
            nxt += [s.mutate(a, rate), s.mutate(b, rate)]
        pop = nxt[:population]
        fits = [s.fitness(x) for x in pop]
        for x, f in zip(pop, fits, strict=True):
            if f > elite_fit + 1e-12:
                elite, elite_fit = x, f
    imp = importance(graph, strategy, seed=seed)
    return cl.plan(strategy, "genetic", imp, s.decode(elite), [])
