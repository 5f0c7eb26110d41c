"""The placement vocabulary: nodes, node pools, the result and the algorithm signature."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from planners.errors import PlannerError
from planners.graph import TaskGraph

_EPS = 1e-9


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Node:
    """A node a task can land on.

    Attributes
    ----------
    name:
        The Kubernetes node name (``kubernetes.io/hostname``).
    cpu:
        Available cores: allocatable CPU minus the requests already running there.
    domain:
        Failure domain (zone or rack label value), or ``None`` for "only itself".
    """

    name: str
    cpu: float
    domain: str | None = None


@dataclass(frozen=True)
class NodePool:
    """Where tasks may go: explicit nodes, or identical nodes created on demand.

    Use :meth:`uniform` for "as many nodes of ``cpu`` cores as needed" (named
    ``node-0``, ``node-1``, …, the seeds' unit bins) and :meth:`of` for an
    explicit list of (possibly different) nodes.

    Examples
    --------
    >>> NodePool.uniform(1).slots(2)
    [Node(name='node-0', cpu=1.0, domain=None), Node(name='node-1', cpu=1.0, domain=None)]
    >>> [n.name for n in NodePool.of([Node("a", 2), Node("b", 4)]).slots(5)]
    ['b', 'a']
    """

    nodes: tuple[Node, ...] = ()
    node_cpu: float | None = None
    prefix: str = "node-"

    @classmethod
    def uniform(cls, cpu: float, *, prefix: str = "node-") -> NodePool:
        """As many identical nodes of ``cpu`` cores as needed."""
        if not cpu > 0:
            raise PlannerError(f"node size must be positive, got {cpu!r} cores")
        return cls(node_cpu=float(cpu), prefix=prefix)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> NodePool:
        """Exactly these nodes (names must be unique), kept sorted by name.

        Sorted so that the plan never depends on the order the caller (a file,
        or the API server's list) happened to give them in.
        """
        listed = tuple(sorted(nodes, key=lambda n: n.name))
        seen: set[str] = set()
        for n in listed:
            if n.name in seen:
                raise PlannerError(f"node {n.name!r} is listed twice")
            if n.cpu < 0:
                raise PlannerError(f"node {n.name!r} has negative CPU {n.cpu!r}")
            seen.add(n.name)
        if not listed:
            raise PlannerError("the node pool is empty")
        return cls(nodes=listed)

    @property
    def unbounded(self) -> bool:
        """Whether nodes are created on demand (identical sizes)."""
        return self.node_cpu is not None

    def slots(self, n_tasks: int) -> list[Node]:
        """The nodes a planner may open, in the order it opens them.

        On-demand pools offer one node per task (never more is needed); explicit
        pools offer their nodes largest first, so that a new node is the one most
        likely to take the next task.
        """
        if self.node_cpu is not None:
            return [Node(f"{self.prefix}{k}", self.node_cpu) for k in range(max(n_tasks, 1))]
        return sorted(self.nodes, key=lambda n: (-n.cpu, n.name))

    def largest(self) -> float:
        """The largest node size."""
        if self.node_cpu is not None:
            return self.node_cpu
        return max(n.cpu for n in self.nodes)

    def with_domains(self, domains: Mapping[str, str] | None) -> NodePool:
        """The same pool with node domains set from ``{node: domain}``."""
        if not domains:
            return self
        if self.node_cpu is not None:
            raise PlannerError("failure domains need an explicit node list, not --node-cpu")
        return NodePool(
            nodes=tuple(replace(n, domain=domains.get(n.name, n.domain)) for n in self.nodes)
        )

    def domains(self) -> dict[str, str] | None:
        """``{node: domain}`` for nodes that have one, or ``None`` if none has."""
        out = {n.name: n.domain for n in self.nodes if n.domain is not None}
        return out or None


@dataclass(frozen=True)
class Placement:
    """A placement (and its backups), as checked by the failure-effect evaluator.

    Attributes
    ----------
    algorithm:
        The algorithm name that produced it.
    bound:
        The recovery-latency bound it keeps (seconds).
    assignment:
        ``{task id: node name}`` for every task.
    backups:
        Tasks that keep upstream backups; ``None`` means every task (the seeds).
    nodes_used:
        Number of distinct nodes in ``assignment``.
    worst:
        The evaluator's worst single-node failure ``max_p H(K_p)`` (seconds).
    optimal:
        ``True`` if proven optimal (CP-SAT), ``False`` if not proven, ``None``
        for heuristics that make no claim.
    violations:
        What the failure-effect evaluator finds wrong with the plan. Always
        empty, except for the paper's 2SP baselines (``*-2sp``), which fit by
        an estimate instead of the model: their plans are reported as they
        are, broken bound included, never repaired or hidden.
    """

    algorithm: str
    bound: float
    assignment: dict[str, str]
    backups: tuple[str, ...] | None
    nodes_used: int
    worst: float
    optimal: bool | None
    violations: tuple[str, ...] = ()

    def by_node(self) -> dict[str, list[str]]:
        """``{node: [tasks]}``, nodes and tasks in a stable order."""
        out: dict[str, list[str]] = {}
        for task, node in self.assignment.items():
            out.setdefault(node, []).append(task)
        return {k: out[k] for k in sorted(out, key=_natural)}


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


class PlacementAlgorithm(Protocol):
    """The one signature every placement algorithm has."""

    def __call__(
        self,
        graph: TaskGraph,
        pool: NodePool,
        *,
        bound: float,
        backups: Iterable[str] | None = None,
        time_limit: float = 10.0,
    ) -> Placement: ...
