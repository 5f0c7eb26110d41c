"""A lower bound on the number of backups: disjoint paths, each solved as a line.

Why: ``auto`` can only return ``optimal=True`` when something proves its plan minimum.
The forced backups (``t_u + t_w > R``) prove little on a DAG where no single edge
breaks the bound, and CP-SAT's proof grows with the graph: at 10,000 tasks it does not
finish within a default budget even where the heuristic's plan is minimum. The bound
here costs one pass over the edges and matches the heuristic's plan on the common
shapes at that scale (forward chains joined by shuffles), so the plan is proven
minimum without the solver.

Soundness: restricted to a path ``P`` of the DAG, a feasible plan stays feasible,
since each ``L(v)`` on ``P`` only loses terms of eq. 3 (the inputs off ``P``). So a
plan backs up at least the line minimum of ``P`` among ``P``'s tasks, and on
vertex-disjoint paths these counts add up. The tasks every plan backs up (the forced
ones) stay backups on the line; between two of them the line splits into independent
lines, so the line algorithm (back up a task only when its consumer on the line would
exceed the bound) stays exact.
"""

from __future__ import annotations

from planners.backups.common import EPS, _forced
from planners.graph import TaskGraph

__all__ = ["path_lower_bound", "path_partition"]


def path_partition(graph: TaskGraph) -> list[list[int]]:
    """Vertex-disjoint paths covering every task, each in topological order.

    Built in one pass in topological order: a task continues the path of the input
    whose path has the largest reprocessing latency so far and is not continued yet
    (earliest such input on ties), else starts a path. Long paths give large line
    minimums, which is what the bound adds up. O(N + E).

    Examples
    --------
    >>> g = TaskGraph.build("abcd", [("a", "c"), ("b", "c"), ("c", "d")],
    ...                     latency={"a": 1, "b": 2, "c": 1, "d": 1})
    >>> [g.ids(p) for p in path_partition(g)]
    [['a'], ['b', 'c', 'd']]
    """
    n = len(graph)
    t = graph.latency
    path_of = [-1] * n
    length = [0.0] * n
    continued = [False] * n
    paths: list[list[int]] = []
    for v, ps in enumerate(graph.preds):
        best = -1
        for u in ps:
            if not continued[u] and (best < 0 or length[u] > length[best]):
                best = u
        if best < 0:
            path_of[v] = len(paths)
            paths.append([v])
            length[v] = t[v]
            continue
        continued[best] = True
        path_of[v] = path_of[best]
        paths[path_of[v]].append(v)
        length[v] = length[best] + t[v]
    return paths


def _line_minimum(t: list[float], path: list[int], forced: list[bool], limit: float) -> int:
    """Fewest backups on ``path`` alone, with its forced tasks backed up (the line algorithm)."""
    count = 0
    ell = 0.0  # L of the previous task on the line, 0 if it keeps a backup
    for i, v in enumerate(path):
        if i and ell and t[v] + ell > limit:
            count += 1  # the previous task's last chance to keep v within R
            ell = 0.0
        ell = t[v] + ell
        if forced[v]:
            count += 1
            ell = 0.0
    return count


def path_lower_bound(graph: TaskGraph, bound: float) -> int:
    """A number of backups every plan that keeps ``bound`` needs (see the module doc).

    Never below the number of forced backups. O(N + E).

    Examples
    --------
    Two chains of four tasks joined by a shuffle at the third: each chain needs
    one backup to keep every recovery within three tasks' latency.

    >>> lat = dict.fromkeys(["a0", "a1", "b0", "b1", "c0", "c1", "d0", "d1"], 1.0)
    >>> edges = [("a0", "b0"), ("a1", "b1"), ("c0", "d0"), ("c1", "d1")]
    >>> edges += [(b, c) for b in ("b0", "b1") for c in ("c0", "c1")]
    >>> g = TaskGraph.build(list(lat), edges, latency=lat)
    >>> path_lower_bound(g, 3.0), path_lower_bound(g, 4.0)
    (2, 0)
    """
    forced = _forced(graph, bound)
    limit = bound + EPS
    t = list(graph.latency)
    return sum(_line_minimum(t, p, forced, limit) for p in path_partition(graph))
