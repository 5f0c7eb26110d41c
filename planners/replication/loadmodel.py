"""The seed's load model: event rates, operator load, network traffic and spare load.

*Adaptive Selective Replication for Complex Event Processing Systems*, Section 2.4 (after
Borealis and Viglas and Naughton's rate-based model): the input rate of a source is given and
its output rate equals it; every other operator's input rate is the sum of its predecessors'
output rates, and its output rate is its selectivity times its input rate, so every rate is
a linear combination of source rates and selectivities. An operator's load is its input rate
times its per-tuple cost ``c``; its incoming traffic is input rate times input tuple size,
its outgoing traffic output rate times output tuple size. Section 3 adds the spare load
``load_rem = n · host_cap − Σ load(op)``. The selections take these figures as the task
weights (``TaskGraph.weight``) and the network of each replica (``net``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planners.graph import TaskGraph

__all__ = ["OperatorLoad", "load_model", "load_rem"]


@dataclass(frozen=True)
class OperatorLoad:
    """The Section 2.4 figures of one operator.

    Attributes
    ----------
    rate_in, rate_out:
        Input and output event rate (events per second).
    load:
        ``rate_in · c(op)``: CPU share, 1.0 being one core busy.
    net_in, net_out:
        ``rate_in · input tuple size`` and ``rate_out · output tuple size``.
    """

    rate_in: float
    rate_out: float
    load: float
    net_in: float
    net_out: float


def load_model(
    graph: TaskGraph,
    source_rate: Mapping[str, float],
    cost: Mapping[str, float],
    selectivity: Mapping[str, float] | None = None,
    *,
    size_in: Mapping[str, float] | None = None,
    size_out: Mapping[str, float] | None = None,
) -> dict[str, OperatorLoad]:
    """Every operator's rates, load and network traffic under the seed's load model.

    Parameters
    ----------
    graph:
        The global query graph (operators and their edges).
    source_rate:
        Input event rate of each source (a task with no predecessor).
    cost:
        Time to process one tuple, per operator; a missing operator costs 0.
    selectivity:
        Output over input rate, per non-source operator (default 1); a
        source's output rate equals its input rate (its selectivity is unused).
    size_in, size_out:
        Input and output tuple size per operator (default 0: no traffic).

    Returns
    -------
    dict
        ``{task id: OperatorLoad}``.

    Raises
    ------
    ValueError
        If a source has no rate, or a rate, cost, selectivity or size is negative.

    Examples
    --------
    The seed's Figure 2 query ``S1 → F1 → A1 → D1``: ``load(S1) = r1·c(S1)``,
    ``load(F1) = r1·c(F1)``, ``load(A1) = r2·c(A1)``, ``load(D1) = r3·c(D1)`` with
    ``r2 = sel(F1)·r1`` and ``r3 = sel(A1)·sel(F1)·r1``. With ``r1 = 100``,
    ``sel(F1) = 0.5``, ``sel(A1) = 0.1`` and every cost 0.001 s:

    >>> g = TaskGraph.build(["S1", "F1", "A1", "D1"],
    ...     [("S1", "F1"), ("F1", "A1"), ("A1", "D1")],
    ...     latency=dict.fromkeys(["S1", "F1", "A1", "D1"], 1.0))
    >>> m = load_model(g, {"S1": 100.0}, dict.fromkeys(["S1", "F1", "A1", "D1"], 0.001),
    ...     {"F1": 0.5, "A1": 0.1}, size_in={"A1": 8.0}, size_out={"A1": 16.0})
    >>> [round(m[t].load, 6) for t in ("S1", "F1", "A1", "D1")]
    [0.1, 0.1, 0.05, 0.005]
    >>> m["D1"].rate_in, m["A1"].net_in, m["A1"].net_out
    (5.0, 400.0, 80.0)

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Section 2.4.
    """
    sel = selectivity or {}
    sin, sout = size_in or {}, size_out or {}
    for name, table in (("rate", source_rate), ("cost", cost), ("selectivity", sel)):
        for t, x in table.items():
            if not x >= 0:
                raise ValueError(f"{name} of {t!r} is {x}; it must be >= 0")
    for name, table in (("input size", sin), ("output size", sout)):
        for t, x in table.items():
            if not x >= 0:
                raise ValueError(f"{name} of {t!r} is {x}; it must be >= 0")
    out_rate = [0.0] * len(graph)
    result: dict[str, OperatorLoad] = {}
    for v in _topological(graph):
        t = graph.tasks[v]
        if not graph.preds[v]:
            if t not in source_rate:
                raise ValueError(f"source {t!r} has no input rate")
            r_in = float(source_rate[t])
            r_out = r_in
        else:
            r_in = sum(out_rate[u] for u in graph.preds[v])
            r_out = float(sel.get(t, 1.0)) * r_in
        out_rate[v] = r_out
        result[t] = OperatorLoad(
            rate_in=r_in,
            rate_out=r_out,
            load=r_in * float(cost.get(t, 0.0)),
            net_in=r_in * float(sin.get(t, 0.0)),
            net_out=r_out * float(sout.get(t, 0.0)),
        )
    return {t: result[t] for t in graph.tasks}


def _topological(graph: TaskGraph) -> list[int]:
    """Task indices, every task after its predecessors (Kahn, ties by index)."""
    indeg = [len(p) for p in graph.preds]
    ready = sorted(v for v in range(len(graph)) if indeg[v] == 0)
    order: list[int] = []
    while ready:
        v = ready.pop(0)
        order.append(v)
        for w in graph.succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
        ready.sort()
    return order


def load_rem(hosts: int, host_cap: float, loads: Mapping[str, float]) -> float:
    """The seed's spare load ``load_rem = n · host_cap − Σ_op load(op)`` (Section 3).

    Examples
    --------
    >>> load_rem(100, 1.0, {"a": 30.0, "b": 20.0})
    50.0
    """
    return hosts * host_cap - sum(loads.values())
