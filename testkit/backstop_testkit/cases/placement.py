"""The RTAP seed's placement instances (its Table 4), rebuilt, plus small ones for CP-SAT.

The seed's setup (Section 5.1): unit bins (1 core), task widths around ``α`` and heights
(reprocessing latencies) around ``β``. Its topologies are rebuilt from its description with
its Table 4 sizes: Tree (every task has one downstream), SignalGuru-like
(sequential-dominated), Twitter Sentiment (parallel-dominated) and random DAGs.
``bench/bench_placement.py`` prints the figures on them, the placement tests assert the
seed's claims on the same instances.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from planners.graph import TaskGraph

__all__ = ["Case", "cases", "guru", "rnd", "senti_seed", "table4", "tree"]


def _sizes(rng: random.Random, n: int, mean: float) -> list[float]:
    """Values uniform in [0.2·mean, 1.8·mean], clipped to (0, 1], two decimals."""
    return [min(1.0, max(0.01, round(rng.uniform(0.2 * mean, 1.8 * mean), 2))) for _ in range(n)]


def _graph(n: int, edges: set[tuple[int, int]], alpha: float, beta: float, seed: int) -> TaskGraph:
    rng = random.Random(seed * 7919 + n)
    ids = [f"t-{i}" for i in range(n)]
    w, t = _sizes(rng, n, alpha), _sizes(rng, n, beta)
    return TaskGraph.build(
        ids,
        sorted((ids[u], ids[v]) for u, v in edges),
        latency=dict(zip(ids, t, strict=True)),
        weight=dict(zip(ids, w, strict=True)),
    )


def tree(n: int, alpha: float, beta: float, seed: int) -> TaskGraph:
    """Every task but the sink has exactly one downstream (seed Fig. 6(a))."""
    rng = random.Random(seed)
    # index n-1 is the sink; task i < n-1 feeds a random later task
    edges = {(i, rng.randrange(i + 1, n)) for i in range(n - 1)}
    return _graph(n, edges, alpha, beta, seed)


def guru(stages: int, alpha: float, beta: float, seed: int, max_inputs: int = 2) -> TaskGraph:
    """Sequential-dominated: many short stages, each fed by 1–``max_inputs`` tasks of the last."""
    rng = random.Random(seed)
    layers: list[list[int]] = []
    n = 0
    for s in range(stages):
        width = 1 if s in (0, stages - 1) else rng.randint(1, 4)
        layers.append(list(range(n, n + width)))
        n += width
    edges: set[tuple[int, int]] = set()
    for prev, cur in itertools.pairwise(layers):
        for v in cur:
            for u in rng.sample(prev, min(len(prev), rng.randint(1, max_inputs))):
                edges.add((u, v))
        for u in prev:  # nobody is left without a consumer
            if not any(e[0] == u for e in edges):
                edges.add((u, rng.choice(cur)))
    return _graph(n, edges, alpha, beta, seed)


def senti_seed(scale: tuple[int, int, int], alpha: float, beta: float, seed: int) -> TaskGraph:
    """Twitter Sentiment as the FTC benchmark builds it: 93 tasks, 560 / 1050 edges.

    :mod:`backstop_testkit.cases.topologies`' shape (source, hot topics, merge, filter,
    sentiment, sink; every grouping a shuffle), which has exactly the RTAP
    seed's Table 4 edge counts for (50, 20, 20) and (30, 30, 30).
    """
    from backstop_testkit.cases.topologies import twitter_sentiment

    shape = twitter_sentiment(*scale)
    edges = {(u, v) for u, v in shape.edges}  # index pairs
    return _graph(len(shape), edges, alpha, beta, seed)


def rnd(n: int, m: int, alpha: float, beta: float, seed: int) -> TaskGraph:
    """A random DAG with ``n`` tasks and about ``m`` edges (forward in index order)."""
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    while len(edges) < m:
        u, v = sorted(rng.sample(range(n), 2))
        edges.add((u, v))
    return _graph(n, edges, alpha, beta, seed)


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], TaskGraph]


def cases(quick: bool) -> list[Case]:
    """The seed's Table 4 instances (:func:`table4`), plus small ones for CP-SAT."""
    small = [
        Case("Rnd-12 (α.3 β.4)", lambda: rnd(12, 18, 0.3, 0.4, 1)),
        Case("Tree-15 (α.3 β.4)", lambda: tree(15, 0.3, 0.4, 2)),
        Case("Guru-20 (α.3 β.5)", lambda: guru(9, 0.3, 0.5, 3)),
        Case("Rnd-25 (α.3 β.5)", lambda: rnd(25, 50, 0.3, 0.5, 4)),
    ]
    return small + table4(quick)


def table4(quick: bool = False) -> list[Case]:
    """The RTAP seed's Table 4 instances: its |V|, |A|, α and β (γ follows from them).

    Only S-Guru (94 edges, seed 95) and L-Guru (238, seed 239) miss an edge.
    """
    seed_like = [
        Case("S-Tree", lambda: tree(33, 0.3, 0.4, 5)),
        Case("S-Guru", lambda: guru(20, 0.3, 0.5, 33)),
        Case("S-Senti", lambda: senti_seed((50, 20, 20), 0.2, 0.2, 7)),
        Case("S-Rnd", lambda: rnd(200, 400, 0.2, 0.2, 8)),
        Case("L-Rnd", lambda: rnd(200, 400, 0.6, 0.6, 9)),
    ]
    large = [
        Case("L-Tree", lambda: tree(220, 0.2, 0.3, 10)),
        Case("L-Guru", lambda: guru(46, 0.2, 0.2, 91, max_inputs=3)),
        Case("L-Senti", lambda: senti_seed((30, 30, 30), 0.2, 0.2, 12)),
    ]
    return seed_like if quick else seed_like + large
