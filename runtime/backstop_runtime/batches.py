"""Mini-batches as columns: the keys, values and event times of a round's records.

A batch crosses the task once per round, so its cost is paid per batch, not per record:
it is decoded from a frame into three lists (:class:`Columns`), merged with the round's
other inputs, handed to the operator whole (:meth:`backstop_runtime.api.Operator.process_batch`)
and routed a column at a time (:mod:`backstop_runtime.routing`). :class:`Record` objects
are made only when per-record code asks for them (:meth:`Columns.records`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from backstop_runtime.api import Columns, Record

INF = float("inf")


def merged(streams: Sequence[Columns]) -> Columns:
    """The records of one round's input streams in the fixed round-robin order of Alg. 1
    (*Incremental Recovery in Distributed Stream Processing Systems*, Section 4.3): the
    first record of every stream in stream order, then the second of each, and so on.

    >>> a, b = Columns(["a1", "a2", "a3"], [1, 2, 3], [0, 0, 0]), Columns(["b1"], [9], [1])
    >>> merged([a, b]).keys
    ['a1', 'b1', 'a2', 'a3']
    """
    live = [s for s in streams if len(s)]
    if len(live) <= 1:
        return live[0] if live else Columns()
    longest = max(len(s) for s in live)
    order = [(s, i) for i in range(longest) for s in live if i < len(s)]
    return Columns(
        [s.keys[i] for s, i in order],
        [s.values[i] for s, i in order],
        [s.ts[i] for s, i in order],
    )


class Batch:
    """Mini-batch ``r`` of one input stream (or of one output channel)."""

    __slots__ = ("at", "cols", "eos", "r", "via", "wm")

    def __init__(
        self,
        r: int,
        recs: Columns | Iterable[Record] = (),
        wm: float = -INF,
        eos: bool = False,
        at: float = 0.0,
        via: tuple[str, ...] = (),
    ) -> None:
        self.r = r
        self.cols = recs if isinstance(recs, Columns) else Columns.of(recs)
        self.wm = wm
        self.eos = eos
        self.at = at
        """Wall time up to which the sources had read all their input when they produced
        this round: ``now - at`` is how far behind its input a task processing it is."""
        self.via = via
        """For a regenerated batch: where the replay came from, the upstream buffers
        (task ids) and source logs (``log:<source>``) it was recomputed from."""

    @property
    def recs(self) -> list[Record]:
        """The records, made from the columns on first use."""
        return self.cols.records()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        mine = (self.r, self.cols, self.wm, self.eos, self.at, self.via)
        return mine == (other.r, other.cols, other.wm, other.eos, other.at, other.via)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Batch(r={self.r}, n={len(self.cols)}, wm={self.wm}, eos={self.eos})"

    @staticmethod
    def ended(r: int) -> Batch:
        """Round ``r`` of a stream that has ended: no records, and all of its input read as
        of now, so it never holds a consumer's lag back (its round's ``at`` is its live
        inputs' oldest)."""
        return Batch(r, Columns(), INF, True, time.time())

    def to_msg(self) -> dict[str, Any]:
        """The ``batch`` message (:mod:`backstop_runtime.wire`): the columns as lists."""
        c = self.cols
        msg = {"t": "batch", "r": self.r, "wm": self.wm, "eos": self.eos, "at": self.at}
        if self.via:
            msg["via"] = list(self.via)
        return {**msg, "k": c.keys, "v": c.values, "ts": c.ts}

    @staticmethod
    def from_msg(msg: dict[str, Any]) -> Batch:
        """The batch of a ``batch`` message; ``ValueError`` if its fields are malformed."""
        keys, values, ts = msg.get("k"), msg.get("v"), msg.get("ts")
        if not (isinstance(keys, list) and isinstance(values, list) and isinstance(ts, list)):
            raise ValueError("malformed batch: k, v and ts must be lists")
        if not len(keys) == len(values) == len(ts):
            raise ValueError("malformed batch: k, v and ts differ in length")
        try:
            r, wm, eos, at = int(msg["r"]), float(msg["wm"]), bool(msg["eos"]), float(msg["at"])
            via = tuple(str(x) for x in msg.get("via", ()))
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed batch: {err!r}") from None
        return Batch(r, Columns(keys, values, ts), wm, eos, at, via)
