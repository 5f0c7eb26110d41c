"""Relieving overloaded hosts with replicas: the planning half of the seed's dynamic replication.

*Adaptive Selective Replication for Complex Event Processing Systems*, Section 5: when loads
change, "(i) overloaded hosts might be relieved by automatically migrating operators from one
host to another, (ii) overload situations that cannot be resolved by moving operators from one
host to another are resolved by splitting the operator into several operator instances that
handle only a portion of the overall load", and with replicas "all replicas have to be split
too in order to maintain a consistent system state". The seed gives no procedure; this is the
direct one: move copies off an overloaded host while some host can take one (never beside
another copy of the same instance, the placement rule of Section 3.3.1), else split the
largest operator there, primary and replicas alike, into more instances. What carrying a split
out needs from the runtime is argued in ``docs/replication.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Rebalance", "plan_rebalance"]

_EPS = 1e-9


@dataclass(frozen=True)
class Rebalance:
    """Where every copy of every operator runs after relieving the overloaded hosts.

    Attributes
    ----------
    placement:
        ``{task: ((host per instance of the primary), (… of replica 1), …)}``; an
        unsplit task has one instance per copy.
    moves:
        ``(task, copy, instance, from host, to host)`` per migration, in order
        (copy 0 is the primary).
    splits:
        ``{task: instances}`` for every split task.
    overloaded:
        Hosts still over capacity (no move nor split up to ``max_split`` relieves them).
    """

    placement: dict[str, tuple[tuple[str, ...], ...]]
    moves: tuple[tuple[str, int, int, str, str], ...]
    splits: dict[str, int]
    overloaded: tuple[str, ...]


class _State:
    def __init__(
        self,
        load: Mapping[str, float],
        capacity: Mapping[str, float],
        assignment: Mapping[str, str],
        replicas: Mapping[str, tuple[str, ...]],
    ) -> None:
        self.load = load
        self.cap = capacity
        self.hosts = sorted(capacity)
        self.copies: dict[str, list[list[str]]] = {
            t: [[h] for h in (assignment[t], *replicas.get(t, ()))] for t in sorted(assignment)
        }
        self.used = dict.fromkeys(self.hosts, 0.0)
        for t, cs in self.copies.items():
            for c in cs:
                for h in c:
                    self.used[h] += self.unit(t)

    def unit(self, t: str) -> float:
        return float(self.load[t]) / len(self.copies[t][0])

    def free(self, h: str) -> float:
        return self.cap[h] - self.used[h]

    def holds(self, t: str, i: int, h: str) -> bool:
        return any(c[i] == h for c in self.copies[t] if len(c) > i)

    def target(self, t: str, i: int, avoid: str) -> str | None:
        """The host with the most free capacity that may take instance ``i`` of ``t``."""
        fits = [
            h
            for h in self.hosts
            if h != avoid and not self.holds(t, i, h) and self.free(h) + _EPS >= self.unit(t)
        ]
        return max(fits, key=lambda h: (self.free(h), h), default=None)

    def split(self, t: str, k: int) -> bool:
        """Re-place every copy of ``t`` as ``k`` instances; keep the old state if impossible."""
        old = [list(c) for c in self.copies[t]]
        old_unit = self.unit(t)
        for c in old:
            for h in c:
                self.used[h] -= old_unit
        self.copies[t] = [[] for _ in old]
        unit = float(self.load[t]) / k
        for i in range(k):
            for n, c in enumerate(self.copies[t]):
                home = old[n][min(i, len(old[n]) - 1)]
                ok = [
                    h
                    for h in self.hosts
                    if not any(len(d) > i and d[i] == h for d in self.copies[t])
                ]
                ok = [h for h in ok if self.free(h) + _EPS >= unit]
                if not ok:
                    for d in self.copies[t]:
                        for h in d:
                            self.used[h] -= unit
                    self.copies[t] = old
                    for d in old:
                        for h in d:
                            self.used[h] += old_unit
                    return False
                h = home if home in ok else max(ok, key=lambda x: (self.free(x), x))
                c.append(h)
                self.used[h] += unit
        return True


def plan_rebalance(
    load: Mapping[str, float],
    capacity: Mapping[str, float],
    assignment: Mapping[str, str],
    replicas: Mapping[str, tuple[str, ...]] | None = None,
    *,
    max_split: int = 8,
) -> Rebalance:
    """Which copies to migrate and which operators to split, and where, to end overload.

    Every copy (primary or active replica) of a task costs its load on its host
    (``load``, e.g. from :func:`planners.replication.load_model`). Hosts in name
    order: while one is over ``capacity``, move one copy off it (the smallest
    that ends the overload, else the largest that can move) to the host with the
    most free capacity holding no copy of that instance; when no copy can move,
    split the task with the largest copy there into the fewest more instances
    (at most ``max_split``) whose copies can all be placed, every copy alike, each
    instance on its copy's old host where it fits, else on the freest host
    holding no copy of that instance.

    Parameters
    ----------
    load:
        Load of each task (one copy).
    capacity:
        CPU capacity of each host.
    assignment, replicas:
        Hosts of each task's primary and replicas.
    max_split:
        Most instances a task is split into.

    Returns
    -------
    Rebalance

    Raises
    ------
    ValueError
        If ``max_split < 1`` or a task has no load.

    Examples
    --------
    ``x`` (load 3) overloads ``a`` (capacity 2); its replica is on ``b``, and ``c``
    has only 2 free, so nothing can move: ``x`` is split in two, its primary
    into ``a`` and ``b`` and its replica into ``b`` and ``c``.

    >>> r = plan_rebalance({"x": 3.0}, {"a": 2.0, "b": 4.0, "c": 2.0}, {"x": "a"},
    ...     {"x": ("b",)})
    >>> r.splits, r.placement["x"], r.overloaded
    ({'x': 2}, (('a', 'b'), ('b', 'c')), ())

    References
    ----------
    Grüneberger, Heinze, Felber. *Adaptive Selective Replication for Complex
    Event Processing Systems*, Section 5 (and Section 3.3.1 for the rule that
    two copies never share a host).
    """
    if max_split < 1:
        raise ValueError(f"max_split {max_split} must be >= 1")
    for t in assignment:
        if t not in load:
            raise ValueError(f"task {t!r} has no load")
    s = _State(load, capacity, assignment, replicas or {})
    moves: list[tuple[str, int, int, str, str]] = []
    stuck: list[str] = []
    for h in s.hosts:
        while s.free(h) < -_EPS:
            if not _move_one(s, h, moves) and not _split_one(s, h, max_split):
                stuck.append(h)
                break
    splits = {t: len(cs[0]) for t, cs in s.copies.items() if len(cs[0]) > 1}
    placement = {t: tuple(tuple(c) for c in cs) for t, cs in s.copies.items()}
    over = tuple(sorted({h for h in s.hosts if s.free(h) < -_EPS} | set(stuck)))
    return Rebalance(placement, tuple(moves), splits, over)


def _move_one(s: _State, h: str, moves: list[tuple[str, int, int, str, str]]) -> bool:
    """Move one copy off ``h``: the smallest that ends its overload, else the largest."""
    excess = -s.free(h)
    here = [
        (t, n, i)
        for t, cs in s.copies.items()
        for n, c in enumerate(cs)
        for i, x in enumerate(c)
        if x == h and s.unit(t) > _EPS
    ]
    here.sort(
        key=lambda e: (
            s.unit(e[0]) + _EPS < excess,
            s.unit(e[0]) if s.unit(e[0]) + _EPS >= excess else -s.unit(e[0]),
            e,
        )
    )
    for t, n, i in here:
        dest = s.target(t, i, h)
        if dest is not None:
            s.copies[t][n][i] = dest
            s.used[h] -= s.unit(t)
            s.used[dest] += s.unit(t)
            moves.append((t, n, i, h, dest))
            return True
    return False


def _split_one(s: _State, h: str, max_split: int) -> bool:
    """Split the task with the largest copy on ``h`` into the fewest more instances that fit."""
    here = sorted(
        {t for t, cs in s.copies.items() for c in cs if h in c and s.unit(t) > _EPS},
        key=lambda t: (-s.unit(t), t),
    )
    for t in here:
        for k in range(len(s.copies[t][0]) + 1, max_split + 1):
            if s.split(t, k):
                return True
    return False
