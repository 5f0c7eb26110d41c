"""Mini-batches as columns: the keys, values and event times of a round's records.

A batch crosses the task once per round, so its cost is paid per batch, not per record:
it is decoded from a frame into three lists (:class:`Columns`), merged with the round's
other inputs, handed to the operator (:meth:`backstop_runtime.api.Operator.process_batch`)
and routed a column at a time (:mod:`backstop_runtime.routing`). :class:`Record` objects
are made only when per-record code asks for them (:meth:`Columns.records`).

A large round is handed over in pieces of at most :data:`PIECE` records of each input
(:func:`merged_pieces`), and a large frame's columns stay encoded until their piece is
taken (:class:`backstop_runtime.wire.Encoded`): a task holds a piece of a large round
decoded, never all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import zip_longest
from typing import Any

from backstop_runtime.api import Columns, Record
from backstop_runtime.wire import PIECE, Encoded

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


def merged_pieces(batches: Sequence[Batch], size: int = PIECE) -> Iterator[Columns]:
    """The :func:`merged` records of ``batches`` in consecutive pieces: piece ``j`` merges
    records ``j·size`` to ``(j+1)·size - 1`` of each batch, so the pieces in turn are the
    merged order itself. A round of at most ``size`` records per batch is one piece.

    >>> a = Batch(1, Columns(list("abcde"), [0] * 5, [0] * 5))
    >>> b = Batch(1, Columns(["x"], [1], [0]))
    >>> [p.keys for p in merged_pieces([a, b], 2)]
    [['a', 'x', 'b'], ['c', 'd'], ['e']]
    """
    if all(len(b) <= size for b in batches):
        yield merged([b.cols for b in batches])
        return
    for parts in zip_longest(*(b.pieces(size) for b in batches)):
        live = [p for p in parts if p is not None]
        del parts  # one piece decoded at a time: this one goes before the next decodes
        yield merged(live)
        del live


class Batch:
    """Mini-batch ``r`` of one input stream (or of one output channel)."""

    __slots__ = ("_cols", "_encoded", "at", "eos", "r", "via", "wm")

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
        self._cols: Columns | None = recs if isinstance(recs, Columns) else Columns.of(recs)
        self._encoded: tuple[Encoded, Encoded, Encoded] | None = None
        self.wm = wm
        self.eos = eos
        self.at = at
        """Wall time up to which the sources had read all their input when they produced
        this round: ``now - at`` is how far behind its input a task processing it is."""
        self.via = via
        """For a regenerated batch: where the replay came from, the upstream buffers
        (task ids) and source logs (``log:<source>``) it was recomputed from."""

    @staticmethod
    def encoded(r: int, columns: tuple[Encoded, Encoded, Encoded], **fields: Any) -> Batch:
        """A batch whose columns (keys, values, times) are still encoded: decoded by
        :meth:`pieces` a piece at a time, or whole by :attr:`cols`."""
        batch = Batch(r, **fields)
        batch._cols, batch._encoded = None, columns
        return batch

    @property
    def cols(self) -> Columns:
        """The records as columns (decoded now, and kept, if they were encoded)."""
        if self._cols is None:
            assert self._encoded is not None
            keys, values, ts = (c.decode() for c in self._encoded)
            self._cols, self._encoded = Columns(keys, values, ts), None
        return self._cols

    def __bool__(self) -> bool:
        return True  # a batch without records is still a round's barrier

    def __len__(self) -> int:
        return len(self._cols if self._cols is not None else self._encoded[0])  # type: ignore[index]

    def pieces(self, size: int) -> Iterator[Columns]:
        """The records in consecutive :class:`Columns` of ``size`` (the last may be
        shorter), decoded a piece at a time if they are encoded."""
        if self._encoded is None:
            c = self.cols
            for i in range(0, len(c), size):
                yield Columns(c.keys[i : i + size], c.values[i : i + size], c.ts[i : i + size])
            return
        keys, values, ts = (e.pieces(size) for e in self._encoded)
        for k, v, t in zip(keys, values, ts, strict=True):
            yield Columns(k, v, t)

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
        return f"Batch(r={self.r}, n={len(self)}, wm={self.wm}, eos={self.eos})"

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
        kind = {type(c) for c in (keys, values, ts)}  # all lists, or all still encoded
        if kind != {list} and kind != {Encoded}:
            raise ValueError("malformed batch: k, v and ts must all be lists")
        if not len(keys) == len(values) == len(ts):  # type: ignore[arg-type]
            raise ValueError("malformed batch: k, v and ts differ in length")
        try:
            r, wm, eos, at = int(msg["r"]), float(msg["wm"]), bool(msg["eos"]), float(msg["at"])
            via = tuple(str(x) for x in msg.get("via", ()))
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed batch: {err!r}") from None
        if kind == {Encoded}:
            return Batch.encoded(r, (keys, values, ts), wm=wm, eos=eos, at=at, via=via)  # type: ignore[arg-type]
        return Batch(r, Columns(keys, values, ts), wm, eos, at, via)
