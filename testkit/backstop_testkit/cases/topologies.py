"""Task graphs of the FTC seed's experiments (Table III, Figs. 3, 7 and 8), rebuilt.

Why: the benchmark and tests need the same shapes the seed measured (line(s),
tree, a SignalGuru-like sequential DAG, Twitter Sentiment at autoscale) plus
random DAGs for scale. The seed gives sizes and edge counts but not every
detail, so each generator documents what it assumes. Operator-level shapes go
through ``backstop.domain.spec.expand``, exactly like a user's manifest.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from backstop.domain.spec import StreamTopologySpec, expand
from planners.graph import TaskGraph

__all__ = [
    "latencies",
    "lines",
    "random_dag",
    "signalguru",
    "tree",
    "twitter_sentiment",
]


def latencies(n: int, *, uniform: bool, seed: int = 0) -> list[float]:
    """``n`` reprocessing latencies: all 1 (uniform) or integers 1..10 (seeded)."""
    if uniform:
        return [1.0] * n
    rng = random.Random(seed)
    return [float(rng.randint(1, 10)) for _ in range(n)]


def lines(n_lines: int, length: int, *, uniform: bool = True, seed: int = 0) -> TaskGraph:
    """``n_lines`` parallel lines of ``length`` tasks joining one sink (seed Fig. 4(a)).

    ``n_lines=1`` gives one sequential line of ``length + 1`` tasks.
    """
    tasks = [f"l{i}-{j}" for i in range(n_lines) for j in range(length)] + ["sink-0"]
    edges = [(f"l{i}-{j}", f"l{i}-{j + 1}") for i in range(n_lines) for j in range(length - 1)]
    edges += [(f"l{i}-{length - 1}", "sink-0") for i in range(n_lines)]
    lat = dict(zip(tasks, latencies(len(tasks), uniform=uniform, seed=seed), strict=True))
    return TaskGraph.build(tasks, edges, latency=lat)


def tree(depth: int, fanin: int = 2, *, uniform: bool = True, seed: int = 0) -> TaskGraph:
    """A complete in-tree: every task has ``fanin`` inputs, ``depth`` levels (Fig. 4(c))."""
    tasks = ["t0"]
    edges: list[tuple[str, str]] = []
    frontier = ["t0"]
    for _ in range(depth - 1):
        nxt = []
        for parent in frontier:
            for _ in range(fanin):
                child = f"t{len(tasks)}"
                tasks.append(child)
                edges.append((child, parent))
                nxt.append(child)
        frontier = nxt
    lat = dict(zip(tasks, latencies(len(tasks), uniform=uniform, seed=seed), strict=True))
    return TaskGraph.build(tasks, edges, latency=lat)


def _from_operators(
    ops: Sequence[tuple[str, int, Sequence[tuple[str, str]]]], *, uniform: bool, seed: int
) -> TaskGraph:
    """Expand ``(name, parallelism, [(input, grouping)])`` operators into a task graph.

    Every task gets its own latency (uniform 1, or 1..10 seeded), so the
    non-uniform case varies within an operator too, as in the seed.
    """
    spec = StreamTopologySpec.model_validate(
        {
            "image": "bench",
            "recoveryLatencyBound": 1,
            "operators": [
                {
                    "name": name,
                    "parallelism": par,
                    "reprocessingLatency": 1,
                    "inputs": [{"operator": u, "grouping": g} for u, g in ins],
                }
                for name, par, ins in ops
            ],
        }
    )
    g = expand(spec)
    return g.with_latency(latencies(len(g), uniform=uniform, seed=seed))


SIGNALGURU_PARALLELISM = (1, 6, 8, 8, 10, 8, 6, 6, 2)
"""Nine steps, 55 tasks (seed Sec. V-B); the per-step parallelism is our choice."""


def signalguru(*, uniform: bool = True, seed: int = 0) -> TaskGraph:
    """A SignalGuru-like sequential-dominated DAG: 9 steps, 55 tasks (seed Fig. 8(a)).

    Steps alternate shuffle and forward groupings (forward where the
    parallelism is equal), so paths are long and tasks have several inputs.
    """
    groupings = ("shuffle", "shuffle", "forward", "shuffle", "shuffle", "shuffle", "forward",
                 "shuffle")  # fmt: skip
    ops: list[tuple[str, int, list[tuple[str, str]]]] = []
    for i, par in enumerate(SIGNALGURU_PARALLELISM):
        ins = [(f"step{i}", groupings[i - 1])] if i else []
        ops.append((f"step{i + 1}", par, ins))
    return _from_operators(ops, uniform=uniform, seed=seed)


def twitter_sentiment(a: int, b: int, c: int, *, uniform: bool = True, seed: int = 0) -> TaskGraph:
    """Twitter Sentiment at autoscale ``(hot topics, filter, sentiment) = (a, b, c)``.

    ``source → hot(a) → merge; merge and source → filter(b) → sentiment(c) →
    sink`` (seed Fig. 8(d)), with one source, merge and sink task and every
    grouping a shuffle. Then ``|E| = 2a + 2b + bc + c``: 560 for (50, 20, 20)
    and 1050 for (30, 30, 30), the seed's two cases, each with ``a + b + c + 3
    = 93`` tasks (the seed reports 92 nodes for the same edge counts).
    """
    ops = [
        ("source", 1, []),
        ("hot", a, [("source", "shuffle")]),
        ("merge", 1, [("hot", "shuffle")]),
        ("filter", b, [("source", "shuffle"), ("merge", "shuffle")]),
        ("sentiment", c, [("filter", "shuffle")]),
        ("sink", 1, [("sentiment", "shuffle")]),
    ]
    return _from_operators(ops, uniform=uniform, seed=seed)


def random_dag(
    n: int, *, layers: int = 100, max_inputs: int = 3, uniform: bool = False, seed: int = 0
) -> TaskGraph:
    """A layered random DAG of ``n`` tasks: each task reads 1..max_inputs earlier tasks.

    Inputs come from the previous two layers, so paths are long (``layers``
    deep) and fan-in/fan-out are mixed, like a large multi-query topology.
    """
    rng = random.Random(seed)
    per = max(1, n // layers)
    tasks = [f"v-{i}" for i in range(n)]
    edges: set[tuple[str, str]] = set()
    for i in range(per, n):
        layer = i // per
        lo = max(0, (layer - 2) * per)
        hi = layer * per
        for _ in range(rng.randint(1, max_inputs)):
            edges.add((tasks[rng.randrange(lo, hi)], tasks[i]))
    lat = dict(zip(tasks, latencies(n, uniform=uniform, seed=seed + 1), strict=True))
    return TaskGraph.build(tasks, sorted(edges), latency=lat)
