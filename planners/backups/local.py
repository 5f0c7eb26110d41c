"""Local search over backup flags, shared by ``exact`` (its hint) and ``auto``."""

from __future__ import annotations

import heapq

from planners.backups.common import EPS, _ell, _forced, _sinks
from planners.budget import WorkBudget
from planners.graph import TaskGraph

# --------------------------------------------------------------------------- local search


class _State:
    """Backup flags with their latencies, updated incrementally and transactionally."""

    def __init__(self, graph: TaskGraph, bound: float, flags: list[bool]) -> None:
        self.graph = graph
        self.limit = bound + EPS
        self.flags = list(flags)
        self.ell = _ell(graph, self.flags)
        self.touched = 0
        """Tasks whose latency :meth:`set_flag` has recomputed so far (its work)."""

    def set_flag(self, u: int, value: bool, *, check: bool = True) -> bool:
        """Set ``M(u)``; keep it and return True only if every latency it changes stays within R.

        With ``check=False`` the flag is set and the latencies updated whatever
        they become (``dag`` records its new backups this way while parts of
        the graph are still beyond R).
        """
        flags = self.flags
        if flags[u] == value:
            return True
        flags[u] = value
        preds, succs, t, ell = self.graph.preds, self.graph.succs, self.graph.latency, self.ell
        log: list[tuple[int, float]] = []
        heap = list(succs[u])
        queued = set(heap)
        ok = True
        while heap:
            w = heapq.heappop(heap)  # increasing index: inputs are final when w is popped
            self.touched += 1
            worst = 0.0
            for p in preds[w]:
                if not flags[p] and ell[p] > worst:
                    worst = ell[p]
            new = t[w] + worst
            if new == ell[w]:
                continue
            log.append((w, ell[w]))
            ell[w] = new
            if check and new > self.limit:
                ok = False
                break
            if not flags[w]:
                for s in succs[w]:
                    if s not in queued:
                        queued.add(s)
                        heapq.heappush(heap, s)
        if not ok:
            for w, old in reversed(log):
                ell[w] = old
            flags[u] = not value
        return ok

    def cover(self, c: int) -> list[int]:
        """Backups next to ``c``: its upstream cover set and its downstream b-cover."""
        preds, succs, flags = self.graph.preds, self.graph.succs, self.flags
        out: list[int] = []
        seen = {c}
        stack = list(preds[c])
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            if flags[u]:
                out.append(u)
            else:
                stack.extend(preds[u])
        stack = list(succs[c])
        while stack:
            w = stack.pop()
            if w in seen:
                continue
            seen.add(w)
            if flags[w]:
                out.append(w)
            else:
                stack.extend(succs[w])
        return sorted(out)


def _improve(
    graph: TaskGraph, bound: float, flags: list[bool], *, budget: WorkBudget, floor: int = 0
) -> list[bool]:
    """Local search: drop redundant backups, then add one to drop two, until stuck.

    Spends ``budget`` (one step per task a move touches, plus one per backup next to
    a task tried), so where it stops does not depend on the machine; dropping
    backups is budgeted too, since on wide shuffles one drop can touch most of the
    graph. Stops as soon as the plan has ``floor`` backups (a lower bound: no move
    can do better).
    """
    state = _State(graph, bound, flags)
    forced = _forced(graph, bound)
    sinks = _sinks(graph)
    for u in sorted((u for u in range(len(graph)) if state.flags[u]), reverse=True):
        if budget.exhausted:
            break
        if not forced[u]:
            state.set_flag(u, False)
            budget.spend(state.touched)
            state.touched = 0
    count = sum(state.flags)
    improved = True
    while improved and not budget.exhausted and count > floor:
        improved = False
        for c in range(len(graph)):
            if state.flags[c] or sinks[c]:
                continue
            if budget.exhausted or count <= floor:
                break
            state.set_flag(c, True)
            cover = state.cover(c)
            dropped = [b for b in cover if not forced[b] and state.set_flag(b, False)]
            if len(dropped) >= 2:
                improved = True
                count += 1 - len(dropped)
            else:
                for b in dropped:
                    state.set_flag(b, True)
                state.set_flag(c, False)
            budget.spend(1 + len(cover) + state.touched)
            state.touched = 0
    return state.flags
