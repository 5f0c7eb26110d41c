"""The selective-replication seed's workload: queries from six templates, spread on hosts.

The seed evaluates its replica selection on queries built from six operator templates with
operator reuse and skewed source rates (80 % of the operators take half the load), on hosts
whose primaries are balanced and whose spare capacity is a share of the system load.
``bench/bench_replication.py`` prints Figs. 4 and 5 on it, ``tests/unit/test_replication_seed.py``
asserts the seed's ordering on a small instance of it.
"""

from __future__ import annotations

import random

from planners.graph import TaskGraph

__all__ = ["COST", "SEL", "TEMPLATES", "spare_for", "spread", "workload"]

COST = {"filter": 1.0, "proj": 0.5, "agg": 2.0, "join": 3.0, "seq": 2.5, "dest": 0.3}
SEL = {"filter": 0.5, "proj": 1.0, "agg": 0.2, "join": 0.3, "seq": 0.2, "dest": 1.0}
TEMPLATES = (
    ("filter",),
    ("filter", "agg"),
    ("proj", "filter", "agg"),
    ("join",),
    ("filter", "seq"),
    ("agg", "filter"),
)
"""The six query templates: operator chains between source(s) and destination."""


def workload(
    rng: random.Random, queries: int = 400, sources: int = 40, predicates: int = 4
) -> TaskGraph:
    """Queries from the six templates with operator reuse, total load scaled to 100.

    Source rates are log-normal (a few hot streams), so operator loads are
    skewed as in the seed, where 80 % of the operators take half the load (Section 3.4).
    """
    rate = {f"src-{i}": rng.lognormvariate(0.0, 1.0) for i in range(sources)}
    ops: dict[tuple[object, ...], str] = {}
    out_rate: dict[str, float] = dict(rate)
    load: dict[str, float] = dict.fromkeys(rate, 0.0)
    edges: list[tuple[str, str]] = []
    outputs: list[str] = []

    def op(kind: str, pred: int, inputs: tuple[str, ...]) -> str:
        key = (kind, pred, inputs)
        if key not in ops:
            name = f"{kind}-{len(ops)}"
            ops[key] = name
            r_in = sum(out_rate[i] for i in inputs)
            load[name] = r_in * COST[kind] * rng.uniform(0.5, 1.5)
            out_rate[name] = r_in * SEL[kind]
            edges.extend((i, name) for i in inputs)
        return ops[key]

    srcs = sorted(rate)
    for q in range(queries):
        tpl = TEMPLATES[rng.randrange(len(TEMPLATES))]
        src = rng.choice(srcs)
        cur: tuple[str, ...] = (src,)
        for kind in tpl:
            if kind in ("join", "seq"):
                other = rng.choice([s for s in srcs if s != src])
                cur = (*cur, other)
            cur = (op(kind, rng.randrange(predicates), cur),)
        dest = f"dest-{q}"
        load[dest] = out_rate[cur[0]] * COST["dest"]
        out_rate[dest] = 0.0
        edges.append((cur[0], dest))
        outputs.append(dest)
    for s in srcs:  # a source costs its input rate
        load[s] = rate[s] * 0.2
    scale = 100.0 / sum(load.values())
    tasks = [t for t in load if any(t in e for e in edges)]
    return TaskGraph.build(
        tasks,
        [e for e in edges if e[0] in tasks],
        latency=dict.fromkeys(tasks, 1.0),
        weight={t: load[t] * scale for t in tasks},
        outputs=outputs,
    )


def spread(graph: TaskGraph, hosts: int) -> dict[str, str]:
    """Primaries largest first onto the least-loaded host (a balanced system load)."""
    names = [f"h{i:03d}" for i in range(hosts)]
    used = dict.fromkeys(names, 0.0)
    out: dict[str, str] = {}
    for v in sorted(range(len(graph)), key=lambda v: (-graph.weight[v], v)):
        h = min(names, key=lambda x: (used[x], x))
        out[graph.tasks[v]] = h
        used[h] += graph.weight[v]
    return out


def spare_for(
    graph: TaskGraph, assignment: dict[str, str], hosts: int, load_rem: float
) -> dict[str, float]:
    """Each host's capacity is ``1 + load_rem / hosts·…``: Σ spare = load_rem exactly."""
    used: dict[str, float] = {}
    for t, h in assignment.items():
        used[h] = used.get(h, 0.0) + graph.weight[graph.index(t)]
    cap = (sum(graph.weight) + load_rem) / hosts
    names = [f"h{i:03d}" for i in range(hosts)]
    raw = {h: cap - used.get(h, 0.0) for h in names}
    # hosts above the mean carry the deficit; keep Σ spare = load_rem, never negative
    short = sum(-x for x in raw.values() if x < 0)
    pos = sum(x for x in raw.values() if x > 0)
    return {h: max(0.0, max(0.0, x) * (1 - short / pos)) if pos else 0.0 for h, x in raw.items()}
