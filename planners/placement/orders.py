"""The seeds' packing orders and RTAP's grouping step."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from planners.graph import TaskGraph
from planners.placement.model import _EPS

# ------------------------------------------------------------------ orders, groups


def weighted_upstream_degree(graph: TaskGraph) -> list[float]:
    """The seed's packing "hardness" ``WUD_v = |U_v| / n · Σ_{u ∈ U_v} t_u`` (eq. 10).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b", "c"], [("a", "c"), ("b", "c")],
    ...                     latency={"a": 1, "b": 2, "c": 1})
    >>> weighted_upstream_degree(g)
    [0.0, 0.0, 2.0]
    """
    n = len(graph)
    return [len(ps) / n * sum(graph.latency[u] for u in ps) for ps in graph.preds]


def _bfs_rank(graph: TaskGraph) -> list[int]:
    rank = [-1] * len(graph)
    queue = deque(graph.sources)
    for s in queue:
        rank[s] = 0
    pos = 0
    seen = set(queue)
    while queue:
        v = queue.popleft()
        rank[v] = pos
        pos += 1
        for s in graph.succs[v]:
            if s not in seen:
                seen.add(s)
                queue.append(s)
    return rank


def _wud_order(graph: TaskGraph) -> list[int]:
    wud, rank = weighted_upstream_degree(graph), _bfs_rank(graph)
    return sorted(range(len(graph)), key=lambda v: (-wud[v], rank[v]))


def _height_order(graph: TaskGraph) -> list[int]:
    return sorted(range(len(graph)), key=lambda v: (-graph.latency[v], -graph.weight[v], v))


def _rtap_groups(
    graph: TaskGraph,
    order: Sequence[int],
    single: Sequence[float],
    bound: float,
    *,
    literal: bool = False,
) -> list[list[int]]:
    """The seed's grouping step: first-fit colouring of rigid conflicts.

    Task ``v`` joins the first group holding no adjacent task ``u`` with
    ``h_u + t_v > R`` (upstream ``u``) or ``h_v + t_u > R`` (downstream ``u``),
    where ``h`` is the single-failure recovery latency: such a pair can never
    share a node, whatever else is there. The seed states the test over every
    member of the group (Section 5.3.3: "v_i can be put into
    G'_g iff ∀v_j∈G'_g, h_j+t_i ≤ H̄"); by default we apply it to
    backup-dependent (adjacent) pairs only, since the seed itself notes that
    independent tasks may share a node. ``literal=True`` applies the seed's
    rule as written: ``v`` joins the first group whose every member ``u`` has
    ``h_u + t_v ≤ R``.
    """
    t = graph.latency
    groups: list[list[int]] = []
    member_of: list[set[int]] = []
    tallest: list[float] = []  # max h_u over each group's members (the literal rule)
    for v in order:
        if literal:
            g = next((g for g, h in enumerate(tallest) if h + t[v] <= bound + _EPS), None)
            if g is None:
                groups.append([v])
                member_of.append({v})
                tallest.append(single[v])
            else:
                groups[g].append(v)
                member_of[g].add(v)
                tallest[g] = max(tallest[g], single[v])
            continue
        conflicts = {u for u in graph.preds[v] if single[u] + t[v] > bound + _EPS}
        conflicts |= {u for u in graph.succs[v] if single[v] + t[u] > bound + _EPS}
        for g, members in enumerate(member_of):
            if not (conflicts & members):
                groups[g].append(v)
                members.add(v)
                break
        else:
            groups.append([v])
            member_of.append({v})
    return groups
