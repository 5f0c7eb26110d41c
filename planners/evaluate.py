"""The one failure-effect model every planner is checked against.

Given backup flags ``M``, a placement ``Φ`` and a set ``F`` of tasks that fail
together::

    ℓ(v) = t_v + max over upstream u of a(u)      (ℓ(v) = t_v for a source)
    a(u) = 0      if u is not in F and M(u) = 1
    a(u) = ℓ(u)   otherwise
    H(F) = max over v in F of ℓ(v)

Single-task failures (the FTC seed) and single-node failures with ``M ≡ 1``
(the RTAP seeds) are special cases. Everything here is one topological pass,
O(V + E) per failure set at most (a failure set's pass visits only the tasks
its ``H`` reads), so it is cheap enough to check every plan.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from planners.errors import InvalidTopology
from planners.graph import TaskGraph

__all__ = [
    "Violation",
    "backup_flags",
    "check_plan",
    "node_failure_latency",
    "recovery_latencies",
    "tasks_by_node",
    "worst_correlated_failure",
    "worst_node_failure",
    "worst_task_failure",
]


def backup_flags(graph: TaskGraph, backups: Iterable[str] | None) -> list[bool]:
    """Backup flags ``M`` by index; ``None`` means every task keeps backups.

    Raises
    ------
    InvalidTopology
        If a backup names an unknown task.
    """
    if backups is None:
        return [True] * len(graph)
    flags = [False] * len(graph)
    for i in graph.indices(backups):
        flags[i] = True
    return flags


def recovery_latencies(
    graph: TaskGraph, backups: Iterable[str] | None, failed: Collection[str] = ()
) -> dict[str, float]:
    """Recovery latency ℓ(v) of every task when the tasks in ``failed`` fail together.

    Parameters
    ----------
    graph:
        The task DAG.
    backups:
        Tasks that keep upstream backups (``M(u) = 1``); ``None`` means all.
    failed:
        The failure set ``F`` (task ids).

    Returns
    -------
    dict
        ``{task id: ℓ(v)}`` for every task.

    Raises
    ------
    InvalidTopology
        If ``backups`` or ``failed`` names an unknown task.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...                     latency={"a": 1, "b": 1, "c": 1})
    >>> recovery_latencies(g, backups=[], failed=["c"])["c"]
    3.0
    >>> recovery_latencies(g, backups=["b"], failed=["c"])["c"]
    1.0
    >>> recovery_latencies(g, backups=["b"], failed=["b", "c"])["c"]
    3.0

    Notes
    -----
    O(V + E). Model: the module docstring; equation (3) of Li et al. *Minimum Backups
    for Stream Processing With Recovery Latency Guarantees* (Sec. III-B) and
    equation (2) of Li et al. *A Task Allocation Method for Stream Processing with
    Recovery Latency Constraint* (Section 3.3) are special cases.
    """
    flags = backup_flags(graph, backups)
    in_f = [False] * len(graph)
    for i in graph.indices(failed):
        in_f[i] = True
    ell = _latencies(graph, flags, in_f)
    return dict(zip(graph.tasks, ell, strict=True))


def _latencies(graph: TaskGraph, flags: list[bool], in_f: list[bool]) -> list[float]:
    ell = [0.0] * len(graph)
    lat = graph.latency
    for v, ps in enumerate(graph.preds):
        worst = 0.0
        for u in ps:
            if in_f[u] or not flags[u]:
                a = ell[u]
                if a > worst:
                    worst = a
        ell[v] = lat[v] + worst
    return ell


def _failure_h(graph: TaskGraph, flags: list[bool], members: Collection[int]) -> float:
    """``H(F)``: the same pass as :func:`_latencies`, over only the tasks ``H`` reads.

    ``ℓ(u)`` is read only for ``u`` in ``F`` or without a backup (otherwise
    ``a(u) = 0``), so ``F`` and, transitively, its upstream tasks without backups
    are all that is needed. A whole-graph pass per node would cost
    O(nodes · (V + E)), seconds per check of a 10k-task plan; this is about
    O(V + E) for all nodes together.
    """
    fail = set(members)
    need = set(fail)
    stack = list(fail)
    preds = graph.pred_sets
    while stack:
        for u in preds[stack.pop()] - need:
            if not flags[u]:
                need.add(u)
                stack.append(u)
    lat = graph.latency
    ell: dict[int, float] = {}
    for v in sorted(need):  # indices are topological
        worst = 0.0
        for u in preds[v] & need:  # the others are healthy backups: a(u) = 0
            if u in fail or not flags[u]:
                a = ell[u]
                if a > worst:
                    worst = a
        ell[v] = lat[v] + worst
    return max(ell[i] for i in fail)


def worst_task_failure(graph: TaskGraph, backups: Iterable[str] | None) -> tuple[float, str]:
    """Worst single-task recovery latency ``max_v L(v)`` (the FTC seed's objective).

    With ``F = {v}`` no upstream of ``v`` is in ``F``, so one pass with ``F = ∅``
    gives ``L(v)`` for every ``v`` at once: O(V + E).

    Returns
    -------
    (latency, task)
        The worst latency and a task that attains it.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2})
    >>> worst_task_failure(g, backups=[])
    (3.0, 'b')
    """
    flags = backup_flags(graph, backups)
    ell = _latencies(graph, flags, [False] * len(graph))
    v = max(range(len(graph)), key=ell.__getitem__)
    return ell[v], graph.tasks[v]


def tasks_by_node(assignment: Mapping[str, str]) -> dict[str, list[str]]:
    """Group a ``{task: node}`` assignment into ``{node: [tasks]}``."""
    nodes: dict[str, list[str]] = {}
    for task, node in assignment.items():
        nodes.setdefault(node, []).append(task)
    return nodes


def node_failure_latency(
    graph: TaskGraph, backups: Iterable[str] | None, failed: Collection[str]
) -> float:
    """``H(F)``: the largest ℓ(v) over the failed tasks ``F`` (0 when ``F`` is empty)."""
    if not failed:
        return 0.0
    flags = backup_flags(graph, backups)
    return _failure_h(graph, flags, graph.indices(failed))


def worst_node_failure(
    graph: TaskGraph, backups: Iterable[str] | None, assignment: Mapping[str, str]
) -> tuple[float, str | None]:
    """Worst ``H(K_p)`` over single-node failures, with the node that attains it.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2})
    >>> worst_node_failure(g, None, {"a": "n0", "b": "n0"})
    (3.0, 'n0')
    >>> worst_node_failure(g, None, {"a": "n0", "b": "n1"})
    (2.0, 'n1')
    """
    return worst_correlated_failure(graph, backups, assignment, k=1)


def worst_correlated_failure(
    graph: TaskGraph,
    backups: Iterable[str] | None,
    assignment: Mapping[str, str],
    *,
    k: int = 1,
    domains: Mapping[str, str] | None = None,
) -> tuple[float, str | None]:
    """Worst ``H(F)`` when any ``k`` nodes (or failure domains) fail together.

    Parameters
    ----------
    graph, backups:
        As in :func:`recovery_latencies`.
    assignment:
        ``{task: node}`` for every task.
    k:
        How many nodes (or domains) fail at once.
    domains:
        Optional ``{node: domain}`` (zone or rack); when given, whole domains fail.

    Returns
    -------
    (latency, label)
        The worst ``H`` and the failed nodes/domains joined by ``+`` (``None``
        when nothing is placed).

    Notes
    -----
    O(C(n, k) · (V + E)) for n nodes or domains at worst; each failure set costs
    only the tasks it fails and the upstream tasks without backups it recomputes.
    """
    backups_list = None if backups is None else list(backups)
    flags = backup_flags(graph, backups_list)
    missing = [t for t in graph.tasks if t not in assignment]
    if missing:
        raise InvalidTopology(f"task {missing[0]!r} is not placed")
    groups: dict[str, list[int]] = {}
    for task, node in assignment.items():
        key = domains.get(node, node) if domains else node
        groups.setdefault(key, []).append(graph.index(task))
    worst, label = 0.0, None
    for combo in combinations(sorted(groups), min(k, len(groups))):
        h = _failure_h(graph, flags, [i for key in combo for i in groups[key]])
        if label is None or h > worst:
            worst, label = h, "+".join(combo)
    return worst, label


@dataclass(frozen=True)
class Violation:
    """One broken invariant of a plan, in words a user can act on."""

    kind: str
    message: str


def check_plan(
    graph: TaskGraph,
    *,
    bound: float,
    backups: Iterable[str] | None,
    assignment: Mapping[str, str] | None = None,
    capacity: Mapping[str, float] | None = None,
    eps: float = 1e-9,
) -> list[Violation]:
    """The shared invariant checks: every plan in the project goes through them.

    Checks that backup ids are valid; that the worst single-task failure keeps
    the bound; and, when an assignment is given, that every task is placed
    exactly once on a known node, that no node's capacity is exceeded, and
    that every single-node failure keeps the bound.

    Returns
    -------
    list of Violation
        Empty when the plan is valid.

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 2})
    >>> check_plan(g, bound=3, backups=[])
    []
    >>> [v.kind for v in check_plan(g, bound=2, backups=[])]
    ['bound']
    """
    out: list[Violation] = []
    blist = None if backups is None else list(backups)
    if blist is not None:
        unknown = [b for b in blist if b not in graph._index]
        if unknown:
            return [Violation("ids", f"backup {unknown[0]!r} is not a task")]
        if len(set(blist)) != len(blist):
            out.append(Violation("ids", "a backup task is listed twice"))
    worst, task = worst_task_failure(graph, blist)
    if worst > bound + eps:
        out.append(Violation("bound", f"task {task} recovers in {worst:g}s > bound {bound:g}s"))
    if assignment is None:
        return out
    extra = [t for t in assignment if t not in graph._index]
    if extra:
        out.append(Violation("ids", f"assignment names unknown task {extra[0]!r}"))
        return out
    missing = [t for t in graph.tasks if t not in assignment]
    if missing:
        out.append(Violation("placed", f"task {missing[0]!r} is not placed"))
        return out
    if capacity is not None:
        load: dict[str, float] = {}
        for t, node in assignment.items():
            if node not in capacity:
                out.append(Violation("placed", f"task {t!r} is on unknown node {node!r}"))
                continue
            load[node] = load.get(node, 0.0) + graph.weight[graph.index(t)]
        for node, used in sorted(load.items()):
            if used > capacity[node] + eps:
                out.append(
                    Violation("capacity", f"node {node} holds {used:g} CPU > {capacity[node]:g}")
                )
    h, worst_node = worst_node_failure(graph, blist, assignment)
    if h > bound + eps:
        out.append(
            Violation("bound", f"losing node {worst_node} recovers in {h:g}s > bound {bound:g}s")
        )
    return out
