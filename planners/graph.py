"""The task DAG every planner works on.

A topology's operators expand into tasks (``<operator>-<index>``); planners only
see this expanded graph. Tasks are stored in a topological order with integer
indices so that the failure-effect evaluator is a single linear pass; the public
API of every planner speaks task ids (strings).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from planners.errors import InvalidTopology

if TYPE_CHECKING:
    import networkx as nx


def _upstreams(
    edges: Iterable[tuple[str, str]], position: Mapping[str, int]
) -> tuple[list[set[int]], bool]:
    """Each task's producers by position, and whether every edge goes forward.

    Raises :class:`InvalidTopology` for an edge naming an unknown task or a self loop.
    """
    ups: list[set[int]] = [set() for _ in position]
    ordered = True  # every edge goes from an earlier to a later task
    for u, v in edges:
        pu, pv = position.get(u), position.get(v)
        if pu is None or pv is None:
            end = u if pu is None else v
            raise InvalidTopology(f"edge {u!r} -> {v!r} names unknown task {end!r}")
        if pu == pv:
            raise InvalidTopology(f"task {u!r} feeds itself (cycle {u} -> {u})")
        if pu > pv:
            ordered = False
        ups[pv].add(pu)
    return ups, ordered


def _check_values(
    order: Iterable[str], latency: Mapping[str, float], weight: Mapping[str, float] | None
) -> None:
    """Every task has a positive latency and no negative weight."""
    for t in order:
        if t not in latency:
            raise InvalidTopology(f"task {t!r} has no reprocessing latency")
        if not float(latency[t]) > 0:
            raise InvalidTopology(
                f"task {t!r} has reprocessing latency {latency[t]}; it must be > 0"
            )
        if weight is not None and float(weight.get(t, 1.0)) < 0:
            raise InvalidTopology(f"task {t!r} has negative weight {weight[t]}")


def _lexicographic_order(ids: Sequence[str], ups: Sequence[set[int]]) -> list[str]:
    """``ids`` in the topological order that keeps each task as early as its position
    allows; :class:`InvalidTopology` naming a cycle if there is one."""
    import networkx as nx  # only for task lists out of topological order (see build)

    dg: nx.DiGraph = nx.DiGraph()
    dg.add_nodes_from(ids)
    dg.add_edges_from((ids[u], t) for t, us in zip(ids, ups, strict=True) for u in us)
    try:
        # is_directed_acyclic_graph is linear; find_cycle alone is slow on large DAGs.
        cycle = None if nx.is_directed_acyclic_graph(dg) else nx.find_cycle(dg)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join([str(e[0]) for e in cycle] + [str(cycle[0][0])])
        raise InvalidTopology(f"the topology has a cycle: {path}")
    position = {t: i for i, t in enumerate(ids)}
    return list(nx.lexicographical_topological_sort(dg, key=lambda t: position[t]))


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """An immutable task DAG in topological order.

    Attributes
    ----------
    tasks:
        Task ids, in a topological order (every edge goes from a lower to a higher index).
    weight:
        CPU request of each task, in cores (``w_v``).
    latency:
        Reprocessing latency of each task, in seconds (``t_v``).
    preds, succs:
        Adjacent upstream / downstream task indices.
    operator:
        The operator each task belongs to.
    outputs:
        Indices of output tasks (the queries of the recovery seed).
    priority:
        Query priority of each task (meaningful for outputs; 1 otherwise).
    """

    tasks: tuple[str, ...]
    weight: tuple[float, ...]
    latency: tuple[float, ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    operator: tuple[str, ...]
    outputs: frozenset[int]
    priority: tuple[float, ...]
    _index: dict[str, int] = field(repr=False, compare=False)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        tasks: Iterable[str],
        edges: Iterable[tuple[str, str]],
        *,
        latency: Mapping[str, float],
        weight: Mapping[str, float] | None = None,
        operator: Mapping[str, str] | None = None,
        outputs: Iterable[str] | None = None,
        priority: Mapping[str, float] | None = None,
    ) -> TaskGraph:
        """Build a graph from ids and edges, validating it.

        Parameters
        ----------
        tasks:
            Task ids; must be unique.
        edges:
            ``(upstream, downstream)`` pairs between known tasks.
        latency:
            Reprocessing latency per task (seconds, > 0).
        weight:
            CPU per task (cores, >= 0); default 1 for every task.
        operator:
            Operator name per task; default the task id up to its last ``-``.
        outputs:
            Output tasks; default the sinks (tasks without consumers).
        priority:
            Query priority per output task; default 1.

        Returns
        -------
        TaskGraph

        Raises
        ------
        InvalidTopology
            Duplicate ids, unknown endpoints, a self loop, a cycle (named),
            a missing or non-positive latency, or a negative weight.

        Examples
        --------
        >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2})
        >>> g.tasks, g.preds
        (('a', 'b'), ((), (0,)))
        """
        ids = list(tasks)
        position: dict[str, int] = {}
        for t in ids:
            if t in position:
                raise InvalidTopology(f"duplicate task id {t!r}")
            position[t] = len(position)
        ups, ordered = _upstreams(edges, position)
        # The order is the lexicographic topological order by position in ``ids``; when
        # ``ids`` already is topological (as expand writes it), that is ``ids`` itself and
        # no graph library is needed (networkx costs 0.1-0.3 s to import, and far more
        # time and memory than these sets on a million edges).
        order = ids if ordered else _lexicographic_order(ids, ups)
        index = position if ordered else {t: i for i, t in enumerate(order)}
        _check_values(order, latency, weight)
        pred_lists: list[list[int]] = (
            [sorted(us) for us in ups]
            if ordered
            else [sorted(index[ids[u]] for u in ups[position[t]]) for t in order]
        )
        succ_lists: list[list[int]] = [[] for _ in order]
        for j, ps in enumerate(pred_lists):
            for i in ps:
                succ_lists[i].append(j)  # in increasing j: sorted
        preds = tuple(tuple(ps) for ps in pred_lists)
        succs = tuple(tuple(ss) for ss in succ_lists)
        outs = (
            frozenset(index[t] for t in outputs)
            if outputs is not None
            else frozenset(i for i, s in enumerate(succs) if not s)
        )
        return cls(
            tasks=tuple(order),
            weight=tuple(float((weight or {}).get(t, 1.0)) for t in order),
            latency=tuple(float(latency[t]) for t in order),
            preds=preds,
            succs=succs,
            operator=tuple(
                (operator or {}).get(t, t.rsplit("-", 1)[0] if "-" in t else t) for t in order
            ),
            outputs=outs,
            priority=tuple(float((priority or {}).get(t, 1.0)) for t in order),
            _index=index,
        )

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.tasks)

    def index(self, task: str) -> int:
        """Index of a task id; raises ``InvalidTopology`` for an unknown id."""
        try:
            return self._index[task]
        except KeyError:
            raise InvalidTopology(f"unknown task {task!r}") from None

    def indices(self, tasks: Iterable[str]) -> list[int]:
        """Indices of several task ids (see :meth:`index`)."""
        index = self._index
        try:
            return [index[t] for t in tasks]
        except KeyError:  # name the first unknown id
            return [self.index(t) for t in tasks]

    def ids(self, indices: Iterable[int]) -> list[str]:
        """Task ids of indices, in topological order."""
        return [self.tasks[i] for i in sorted(indices)]

    @property
    def edges(self) -> list[tuple[int, int]]:
        """All edges as index pairs."""
        return [(u, v) for v, ps in enumerate(self.preds) for u in ps]

    @property
    def sources(self) -> list[int]:
        """Tasks with no upstream (they read a replayable log)."""
        return [i for i, p in enumerate(self.preds) if not p]

    @cached_property
    def pred_sets(self) -> tuple[frozenset[int], ...]:
        """``preds`` as sets, for the planners' set intersections (built once per graph)."""
        return tuple(frozenset(ps) for ps in self.preds)

    @cached_property
    def succ_sets(self) -> tuple[frozenset[int], ...]:
        """``succs`` as sets (see :attr:`pred_sets`)."""
        return tuple(frozenset(ss) for ss in self.succs)

    @cached_property
    def upstream_closure(self) -> tuple[frozenset[int], ...]:
        """For each task, itself plus every task it (transitively) reads from."""
        closure: list[frozenset[int]] = []
        for v, ps in enumerate(self.preds):
            acc = {v}
            for u in ps:
                acc |= closure[u]
            closure.append(frozenset(acc))
        return tuple(closure)

    def to_networkx(self) -> nx.DiGraph:
        """A networkx view (nodes are task ids with ``weight``/``latency`` attributes)."""
        import networkx as nx

        dg: nx.DiGraph = nx.DiGraph()
        for i, t in enumerate(self.tasks):
            dg.add_node(t, weight=self.weight[i], latency=self.latency[i])
        dg.add_edges_from((self.tasks[u], self.tasks[v]) for u, v in self.edges)
        return dg

    def with_latency(self, latency: Sequence[float]) -> TaskGraph:
        """The same graph with other reprocessing latencies (same order)."""
        return TaskGraph(
            tasks=self.tasks,
            weight=self.weight,
            latency=tuple(float(x) for x in latency),
            preds=self.preds,
            succs=self.succs,
            operator=self.operator,
            outputs=self.outputs,
            priority=self.priority,
            _index=self._index,
        )
