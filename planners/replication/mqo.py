"""Incremental multi-query optimisation: a new query reuses the operators already running.

Seed: Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex Event
Processing Systems*, Section 2.1.

Why: every deployed operator costs CPU, and an operator that several queries share is
worth more to replicate (its QOD, Section 3.1, counts the queries using it). The seed
keeps "an internal global query graph subsuming all currently deployed queries" and,
when a query is added, discovers the reusable parts "using a breadth-first search on
the global query graph" (Figure 1: two queries share ``S1`` and ``F1``, which are
reused instead of being deployed again). :class:`QueryGraph` is that global graph and
:func:`add_query` that search; :func:`to_task_graph` hands the merged graph to the
selections of :mod:`planners.replication`, which take queries as output tasks.

The reuse rule: an operator is the same as a running one when it has the same label
(type and predicate) *and* the same inputs, i.e. its whole upstream is shared; a filter
with the same predicate over another stream is another operator. Sources match by
label alone.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planners.errors import InvalidTopology
from planners.graph import TaskGraph

__all__ = ["InvalidQuery", "QueryGraph", "add_query", "to_task_graph"]

Operators = Mapping[str, tuple[str, Sequence[str]]]
"""A query: ``{operator: (label, inputs)}``, the label being its type and predicate."""


class InvalidQuery(InvalidTopology, ValueError):
    """The query is malformed: empty, an unknown input, a cycle, or already deployed."""


@dataclass(frozen=True)
class QueryGraph:
    """The global query graph: every deployed operator, once.

    Attributes
    ----------
    label:
        ``{operator: label}``; the label names the type and predicate (``filter:x>3``).
    inputs:
        ``{operator: input operators}``, in order (a binary operator's sides differ).
    users:
        ``{operator: queries whose upstream holds it}``: the seed's ``deg(op)``.
    queries:
        ``{query: its output operators}``.
    """

    label: Mapping[str, str] = field(default_factory=dict)
    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    users: Mapping[str, frozenset[str]] = field(default_factory=dict)
    queries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def add_query(
    graph: QueryGraph, name: str, operators: Operators
) -> tuple[QueryGraph, dict[str, str]]:
    """Merge a query into the global query graph, reusing every operator it can.

    A breadth-first search from the query's sources visits each operator once all its
    inputs are placed. An operator is reused when a running operator has its label and,
    input for input, the operators its inputs became; so reuse stops at the first
    operator on each path that does not match, and all downstream of it is new (no
    running operator reads a new one). Two operators of the query with the same label
    and inputs become one. New operators are named ``<query>.<operator>`` (with
    ``~2``, ``~3``, … should that name be taken). Neither argument is changed.

    Parameters
    ----------
    graph:
        The global query graph of the running queries.
    name:
        The new query's name, not yet deployed.
    operators:
        ``{operator: (label, inputs)}``, a DAG; operators without inputs are sources,
        operators no other one reads are the query's outputs.

    Returns
    -------
    tuple
        The new global query graph, and ``{query operator: running operator}`` for
        every operator reused from ``graph``.

    Raises
    ------
    InvalidQuery
        An empty query, an input naming no operator of the query, a cycle (named),
        or a query name already deployed.

    Examples
    --------
    The seed's Figure 1: the second query's ``S1`` and ``F1`` are the first's.

    >>> q1 = {"S1": ("S1", ()), "F1": ("F1", ["S1"]), "A1": ("A1", ["F1"])}
    >>> q2 = {"S1": ("S1", ()), "F1": ("F1", ["S1"]), "J1": ("J1", ["F1"])}
    >>> g, _ = add_query(QueryGraph(), "q1", q1)
    >>> g, reused = add_query(g, "q2", q2)
    >>> reused
    {'S1': 'q1.S1', 'F1': 'q1.F1'}
    >>> sorted(g.label)
    ['q1.A1', 'q1.F1', 'q1.S1', 'q2.J1']
    >>> sorted(g.users["q1.F1"]), sorted(g.users["q2.J1"]), g.queries["q2"]
    (['q1', 'q2'], ['q2'], ('q2.J1',))

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex Event
    Processing Systems*, Section 2.1 and Figure 1.
    """
    if name in graph.queries:
        raise InvalidQuery(f"query {name!r} is already deployed")
    order = _bfs_order(name, operators)
    label, inputs = dict(graph.label), dict(graph.inputs)
    # One operator per (label, inputs); the smallest name wins should the graph hold two.
    same = {(label[o], inputs[o]): o for o in sorted(label, reverse=True)}
    placed: dict[str, str] = {}
    reused: dict[str, str] = {}
    for op in order:
        lab, ins = operators[op]
        key = (lab, tuple(placed[i] for i in ins))
        found = same.get(key)
        if found is None:
            found = _fresh(f"{name}.{op}", label)
            label[found], inputs[found], same[key] = lab, key[1], found
        elif found in graph.label:
            reused[op] = found
        placed[op] = found
    users = dict(graph.users)
    for op in set(placed.values()):
        users[op] = users.get(op, frozenset()) | {name}
    read = {i for _, ins in operators.values() for i in ins}
    outputs = tuple(sorted({placed[o] for o in operators if o not in read}))
    queries = {**graph.queries, name: outputs}
    return QueryGraph(label, inputs, users, queries), reused


def to_task_graph(
    graph: QueryGraph,
    *,
    latency: Mapping[str, float] | None = None,
    weight: Mapping[str, float] | None = None,
) -> TaskGraph:
    """The global query graph as the task DAG the replication selections take.

    Its outputs are the queries' output operators, each with the number of queries
    ending there as its priority, so ``importance(..., "qod")`` is the seed's QOD on the
    merged graph. Two identical queries end at one operator and count once there; the
    exact query sets are :attr:`QueryGraph.users`.

    Parameters
    ----------
    graph:
        The global query graph.
    latency, weight:
        Reprocessing latency (default 1 s) and CPU (default 1 core) per operator.

    Examples
    --------
    >>> from planners.replication.model import importance
    >>> g, _ = add_query(QueryGraph(), "q1", {"S": ("S", ()), "F": ("F", ["S"])})
    >>> g, _ = add_query(g, "q2", {"S": ("S", ()), "A": ("A", ["S"])})
    >>> importance(to_task_graph(g), "qod")
    {'q1.S': 1.0, 'q1.F': 0.5, 'q2.A': 0.5}
    """
    ops = list(graph.label)
    ends = Counter(o for outs in graph.queries.values() for o in outs)
    return TaskGraph.build(
        ops,
        [(i, o) for o in ops for i in graph.inputs[o]],
        latency={o: (latency or {}).get(o, 1.0) for o in ops},
        weight=weight,
        operator={o: o for o in ops},
        outputs=list(ends),
        priority={o: float(n) for o, n in ends.items()},
    )


def _bfs_order(name: str, operators: Operators) -> list[str]:
    """The query's operators breadth first from its sources, each after all its inputs."""
    if not operators:
        raise InvalidQuery(f"query {name!r} has no operators")
    readers: dict[str, list[str]] = {op: [] for op in operators}
    waiting: dict[str, int] = {}
    for op, (_, ins) in sorted(operators.items()):
        for i in ins:
            if i not in operators:
                raise InvalidQuery(f"operator {op!r} of query {name!r} reads unknown {i!r}")
            readers[i].append(op)
        waiting[op] = len(ins)
    queue = deque(op for op, n in waiting.items() if n == 0)
    order: list[str] = []
    while queue:
        op = queue.popleft()
        order.append(op)
        for r in readers[op]:
            waiting[r] -= 1
            if waiting[r] == 0:
                queue.append(r)
    if len(order) < len(operators):
        raise InvalidQuery(f"query {name!r} has a cycle: {_cycle(operators, set(order))}")
    return order


def _cycle(operators: Operators, done: set[str]) -> str:
    """A cycle among the operators the search never reached, as ``a -> b -> a``.

    Each of them reads another one of them, so walking inputs upstream repeats.
    """
    path = [min(op for op in operators if op not in done)]
    while path.count(path[-1]) < 2:
        path.append(min(i for i in operators[path[-1]][1] if i not in done))
    cycle = path[path.index(path[-1]) :]
    return " -> ".join(reversed(cycle))


def _fresh(base: str, taken: Mapping[str, object]) -> str:
    """``base``, or ``base~k`` for the smallest ``k >= 2`` not in ``taken``."""
    fresh, k = base, 2
    while fresh in taken:
        fresh, k = f"{base}~{k}", k + 1
    return fresh
