"""Algorithm 4 of the FTC seed as its text writes it, with each ambiguous step a knob.

``dag`` (:mod:`planners.backups.dag`) departs from the seed's ChooseBackup-DAG in
its ranking, its candidate set and its final step; this module follows the
pseudocode line by line so the two can be compared on the seed's own cases
(``bench/bench_backups.py``, ``docs/ftc-algorithm4.md``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

from planners.backups.common import EPS, BackupPlan, _finish, _forced, _require_feasible
from planners.backups.dag import _bfs_levels, _region
from planners.backups.local import _State
from planners.errors import PlannerError
from planners.evaluate import worst_task_failure
from planners.graph import TaskGraph

Termination = Literal["candidates", "percentage"]
"""When a round stops: Algorithm 4's loop (``while Z ≠ ∅``) or the prose
(the chosen tasks' b-cover percentages ``F`` sum to 1)."""


@dataclass(frozen=True)
class Reading:
    """One reading of Algorithm 4; the defaults are the literal text.

    Attributes
    ----------
    termination:
        :data:`Termination`.
    sinks:
        Whether a sink is a candidate (the text does not exclude it, though a
        backup on a sink serves no consumer).
    dynamic:
        Whether lines 2-4 (``Z``, ``F``, ``B``) run again after each new backup,
        tasks already removed from ``Z`` staying out (the text runs them once,
        before the loop; Sec. IV-E calls the function one that "updates current
        task coverage dynamically").
    eliminate:
        Whether a final pass, run only when the plan keeps ``R``, drops every
        backup whose removal keeps every ``L(v) ≤ R`` (ours; the text's "remove
        tasks that have been b-covered" is line 11, which removes them from ``Z``).
    """

    termination: Termination = "candidates"
    sinks: bool = True
    dynamic: bool = False
    eliminate: bool = False


LITERAL = Reading()
"""Algorithm 4 exactly as printed."""


class BoundBroken(PlannerError):
    """The text's steps give a plan that leaves a task beyond ``R`` (a better plan exists)."""


def _ranks(
    graph: TaskGraph, v: int, zone: list[int], inside: set[int]
) -> tuple[dict[int, float], dict[int, float]]:
    """``F`` (eq. 7) and ``B`` (eq. 8) over the candidate set, ``v`` the base case."""
    t, preds, succs = graph.latency, graph.preds, graph.succs
    f: dict[int, float] = {v: 1.0}
    b: dict[int, float] = {v: t[v]}
    for w in zone:
        if w == v:
            continue
        fw = bw = 0.0
        for u in preds[w]:
            if u in inside and u in f:
                q = len(succs[u])
                fw += f[u] / q
                bw += (b[u] + t[u]) / q
        f[w], b[w] = fw, bw
    return f, b


def _on_paths(graph: TaskGraph, v: int, mark: int, through: set[int]) -> set[int]:
    """Line 11: the tasks on the paths from ``v`` to ``mark`` (through ``through``)."""
    found = {mark}
    stack = [mark]
    while stack:
        w = stack.pop()
        if w == v:
            continue
        for u in graph.preds[w]:
            if u in through and u not in found:
                found.add(u)
                stack.append(u)
    return found


def _round(
    graph: TaskGraph, bound: float, v: int, flags: list[bool], reading: Reading
) -> list[int]:
    """One call of ChooseBackup-DAGTopology from search source ``v``; returns ``V_m``."""
    removed: set[int] = set()
    picks: list[int] = []
    covered = 0.0
    while True:
        region = _region(graph, bound + EPS, v, flags)  # line 2: GenerateCandidate
        zone = [v, *region.order]  # Z: v and every task within distance R of it
        alive = {w for w in zone if w not in removed and (reading.sinks or graph.succs[w])}
        f, b = _ranks(graph, v, zone, set(zone))  # lines 3-4
        while alive:  # line 5
            top = max(round(b[w], 9) for w in alive)  # line 6
            ties = [w for w in alive if round(b[w], 9) == top]
            mark = max(ties, key=lambda w: (region.dist[w], -w))  # line 7
            new = not flags[mark]
            if new:  # lines 8-10
                flags[mark] = True
                picks.append(mark)
            covered += f.get(mark, 0.0)
            gone = _on_paths(graph, v, mark, region.expanded)  # line 11
            alive -= gone
            removed |= gone
            if reading.termination == "percentage" and covered >= 1.0 - 1e-9:
                return picks
            if reading.dynamic and new:
                break  # lines 2-4 again, with the new backup
        else:
            return picks


def ftc_algorithm4(graph: TaskGraph, bound: float, reading: Reading = LITERAL) -> list[str]:
    """Algorithm FTC (Algorithm 1) with ChooseBackup-DAG (Algorithm 4), unchecked.

    Returns the backups the text's steps give under ``reading``, whether or not
    they keep the bound: the evaluator's verdict is the point of comparing
    readings. :func:`backups_dag_paper` is the checked form.
    """
    _require_feasible(graph, bound)
    flags = [False] * len(graph)
    level = _bfs_levels(graph)
    heap = [(-level[s], -s, s) for s in graph.sources]  # line 1: S := V_s
    heapq.heapify(heap)
    while heap:  # line 2
        _, _, v = heapq.heappop(heap)  # line 3: the largest BFS index I(v)
        for w in _round(graph, bound, v, flags, reading):  # line 4
            heapq.heappush(heap, (-level[w], -w, w))  # line 5: V_m joins S
    if reading.eliminate:
        state = _State(graph, bound, flags)
        forced = _forced(graph, bound)
        if all(e <= state.limit for e in state.ell):
            for u in sorted((u for u in range(len(graph)) if flags[u]), reverse=True):
                if not forced[u]:
                    state.set_flag(u, False)
            flags = state.flags
    return graph.ids(i for i, m in enumerate(flags) if m)


def backups_dag_paper(
    graph: TaskGraph, bound: float, *, time_limit: float = 10.0, reading: Reading = LITERAL
) -> BackupPlan:
    """The seed's ChooseBackup-DAG exactly as Algorithm 4 prints it.

    Parameters
    ----------
    graph : TaskGraph
        Any task DAG.
    bound : float
        Recovery-latency bound ``R`` in seconds.
    time_limit : float
        Unused (the heuristic does not search); kept for the common signature.
    reading : Reading
        Which reading of the ambiguous steps (:class:`Reading`; default: literal).

    Returns
    -------
    BackupPlan
        The plan, checked by the failure-effect evaluator.

    Raises
    ------
    Infeasible
        If ``bound`` is below the smallest feasible bound ``max_v t_v``.
    BoundBroken
        If the text's plan leaves a task beyond ``R`` (the message names it):
        the literal steps do not always keep the bound, so this is the
        algorithm's answer, not a bug here.

    Examples
    --------
    Source ``s`` feeds ``a`` and ``b``; ``a`` feeds ``b`` and ``x``; every
    ``t`` is 1 but ``t_x = 3``, and ``R = 3``. The candidates are ``s, a, b``
    (``x`` is 2 + 3 away); ``B(b) = 2`` beats ``B(a) = 1`` so line 6 picks the
    sink ``b``, line 11 removes ``s, a, b`` from ``Z``, and ``x`` is left at
    ``L(x) = 5``. The optimum is ``{a}`` (``t_a + t_x > R`` forces it):

    >>> g = TaskGraph.build("sabx", [("s", "a"), ("s", "b"), ("a", "b"), ("a", "x")],
    ...                     latency={"s": 1, "a": 1, "b": 1, "x": 3})
    >>> ftc_algorithm4(g, 3.0)
    ['b']
    >>> backups_dag_paper(g, 3.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    planners.backups.dag_paper.BoundBroken: Algorithm 4 as written leaves task x at L = 5s ...

    Notes
    -----
    Algorithm 1 pops the pending search source of largest breadth-first index
    from the sinks. Algorithm 4 from source ``v``: ``Z`` is ``v`` and every task
    within distance ``R`` of it through non-backups (line 2); ``F`` (eq. 7) and
    ``B`` (eq. 8) are computed once over ``Z`` with ``v`` as the base case
    (the equations' ``V_s``: for a search source that is a backup, reading it
    as the topology's sources would make every ``F`` and ``B`` zero); while
    ``Z`` is not empty, the task of highest ``B``, then longest distance, is
    chosen, kept as a new backup unless it is one already, and every task on
    the paths from ``v`` to it leaves ``Z`` (lines 5-12). Each round is
    O(Z log Z + Z²) for ``Z`` candidates.

    References
    ----------
    Li et al. *Minimum Backups for Stream Processing With Recovery Latency
    Guarantees*, Sec. IV-A and IV-D, Algorithms 1 and 4, eqs. (7) and (8).
    """
    backups = ftc_algorithm4(graph, bound, reading)
    worst, task = worst_task_failure(graph, backups)
    if worst > bound + EPS:
        raise BoundBroken(
            f"Algorithm 4 as written leaves task {task} at L = {worst:g}s > R = {bound:g}s "
            f"with backups {backups}; use algorithm 'dag' for a plan that keeps R"
        )
    flags = [False] * len(graph)
    for i in graph.indices(backups):
        flags[i] = True
    lower = sum(_forced(graph, bound))
    return _finish(graph, bound, "dag-paper", flags, True if sum(flags) == lower else None)
