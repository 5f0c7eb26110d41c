"""The user API: sources, processing functions with keyed state, and sinks.

A topology's operators name a class with ``config.function: "module:Class"``; the
task instantiates it with the operator's ``config`` map. Processing is
deterministic by construction (the runtime feeds every task its input in mini-batches,
merged in a fixed order, as order-preserving processing in *Incremental Recovery in
Distributed Stream Processing Systems*, Section 4.3, Algorithm 1 does), so a task that
has no output buffer can *regenerate* its output by replaying its input. User code must
keep that promise: no wall clock, no randomness without a seed kept in state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backstop_runtime.config import ConfigError


@dataclass(frozen=True)
class Record:
    """One tuple: an optional partitioning key, a JSON value and its event time."""

    value: Any
    key: str | None = None
    ts: float | None = None


class Columns:
    """A batch of records as three lists of one length: ``keys``, ``values``, ``ts``.

    What :meth:`Operator.process_batch` is handed: code that works on whole columns
    (a regex over every value, say) never makes a :class:`Record`; :meth:`records` makes
    them, once, for code that wants them one at a time.
    """

    __slots__ = ("_recs", "keys", "ts", "values")

    def __init__(
        self,
        keys: list[str | None] | None = None,
        values: list[Any] | None = None,
        ts: list[float | None] | None = None,
    ) -> None:
        self.keys: list[str | None] = [] if keys is None else keys
        self.values: list[Any] = [] if values is None else values
        self.ts: list[float | None] = [] if ts is None else ts
        self._recs: list[Record] | None = None

    @staticmethod
    def of(recs: Iterable[Record]) -> Columns:
        """The columns of ``recs``, in their order."""
        recs = list(recs)
        return Columns([r.key for r in recs], [r.value for r in recs], [r.ts for r in recs])

    def __len__(self) -> int:
        return len(self.values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Columns):
            return NotImplemented
        return (self.keys, self.values, self.ts) == (other.keys, other.values, other.ts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Columns(keys={self.keys!r}, values={self.values!r}, ts={self.ts!r})"

    def records(self) -> list[Record]:
        """The records, in order (made on the first call, then kept)."""
        if self._recs is None or len(self._recs) != len(self.values):
            self._recs = list(map(Record, self.values, self.keys, self.ts))
        return self._recs

    def append(self, value: Any, key: str | None, ts: float | None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.ts.append(ts)


class Context:
    """What an operator may do while processing: emit, keep keyed state, set aside input."""

    def __init__(
        self,
        task: str,
        index: int,
        parallelism: int,
        emit: Callable[[Record], None],
        dead_letter: Callable[[str, Any], None],
    ) -> None:
        self.task = task
        self.index = index
        self.parallelism = parallelism
        self.watermark = float("-inf")
        self.state: dict[str, Any] = {}
        """Keyed state: snapshotted and restored by the runtime with every checkpoint."""
        self._emit = emit
        self._dead_letter = dead_letter
        self._current_ts: float | None = None
        self.out: Columns | None = None
        """Where the engine gathers the round's output (else each record goes to ``emit``)."""

    def emit(self, value: Any, key: str | None = None, ts: float | None = None) -> None:
        """Send ``value`` downstream; ``ts`` defaults to the event time of the input."""
        if ts is None:
            ts = self._current_ts
        if self.out is None:
            self._emit(Record(value, key, ts))
        else:
            self.out.append(value, key, ts)

    def emit_many(
        self,
        values: Sequence[Any],
        keys: Sequence[str | None] | None = None,
        ts: Sequence[float | None] | None = None,
    ) -> None:
        """Send ``values`` downstream in order, with ``keys`` and event times ``ts`` (lists
        of the same length; no keys by default, and the input's event time as
        :meth:`emit` has it)."""
        n = len(values)
        keys = [None] * n if keys is None else keys
        ts = [self._current_ts] * n if ts is None else ts
        if not len(keys) == len(ts) == n:
            raise ValueError(f"emit_many: {n} values, {len(keys)} keys, {len(ts)} times")
        if self.out is None:
            for v, k, t in zip(values, keys, ts, strict=True):
                self._emit(Record(v, k, t))
        else:
            self.out.values.extend(values)
            self.out.keys.extend(keys)
            self.out.ts.extend(ts)

    def dead_letter(self, reason: str, payload: Any) -> None:
        """Keep a record aside (counted, written to the task's dead-letter file)."""
        self._dead_letter(reason, payload)


class Operator:
    """A processing function. Override :meth:`process`; the rest is optional."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def process(self, record: Record, ctx: Context) -> None:
        """Handle one input record; call ``ctx.emit`` for each output."""
        raise NotImplementedError

    def process_batch(self, batch: Columns, ctx: Context) -> None:
        """Handle a round's input, merged in the runtime's fixed order; call
        ``ctx.emit_many`` (or ``ctx.emit``) for the outputs. A large round (more than
        4,096 records from one input) comes in consecutive pieces, one call each, so the
        task never holds all of it decoded. By default :meth:`process` each record in
        order, with the record's event time as ``ctx.emit``'s default."""
        for rec in batch.records():
            ctx._current_ts = rec.ts
            self.process(rec, ctx)

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        """Event time has reached ``watermark``: no later record will be older."""

    def snapshot(self) -> Any:
        """JSON-serialisable state besides ``ctx.state`` (taken at checkpoints)."""
        return None

    def restore(self, state: Any) -> None:
        """Set the state returned by :meth:`snapshot` back after a failure."""


class Sink(Operator):
    """An operator whose output leaves the topology (``ctx.emit`` writes it).

    The runtime writes each emitted value as one JSON line to ``<config.path>/<task>.jsonl``
    and truncates that file back to its checkpointed length on restore, so with
    deterministic replay every line is in the file exactly once.
    """

    def process(self, record: Record, ctx: Context) -> None:
        ctx.emit(record.value)

    def process_batch(self, batch: Columns, ctx: Context) -> None:
        if type(self).process is not Sink.process:  # a subclass writes its own lines
            super().process_batch(batch, ctx)
            return
        ctx.emit_many(batch.values, None, batch.ts)


class Combiner:
    """Pre-aggregation of an operator's output, named by its ``config.combiner``.

    The runtime calls :meth:`combine` on each round's output of every task of the
    operator before it routes and sends it, and on the regenerated round in a replay,
    so a replayed round is combined exactly as the original was. ``combine`` must be
    a deterministic function of its input (keys, values, event times, in order), and
    what it returns must mean to the consumer what the input meant (as a sum of partial
    counts means the count): a combiner as in MapReduce, or Flink's local aggregation.
    The class is built with the operator's ``config``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def combine(
        self, keys: list[str | None], values: list[Any], ts: list[float | None]
    ) -> tuple[list[str | None], list[Any], list[float | None]]:
        """The combined records, as three lists of one length."""
        raise NotImplementedError


class Source:
    """A replayable source. ``snapshot()`` must capture the read position exactly.

    The runtime logs the snapshot after every mini-batch, so a replay of batch ``k``
    is ``restore(snapshot_{k-1})`` then ``read(until=snapshot_k)``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def open(self, ctx: Context) -> None:
        """Called once before the first read, with the task's context."""

    def read(self, max_records: int, until: Any = None) -> list[Record]:
        """Up to ``max_records`` new records; never past position ``until`` if given."""
        raise NotImplementedError

    def read_columns(self, max_records: int, until: Any = None) -> Columns:
        """What :meth:`read` returns, as columns (the runtime calls this one: a source
        that makes columns directly overrides it and spares the records)."""
        return Columns.of(self.read(max_records, until))

    def watermark(self) -> float:
        """No record read later will have an event time below this."""
        return float("-inf")

    def at_end(self) -> bool:
        """A bounded source has read everything (the stream ends)."""
        return False

    def idle(self) -> bool:
        """This task has no input to read now (it owns no split), so its
        :meth:`watermark` says nothing about event time: the runtime then logs the lowest
        watermark of the operator's other source tasks instead, so that an idle task does
        not hold back the windows of the whole topology."""
        return False

    def caught_up(self) -> bool:
        """Everything written to the input so far has been read (no backlog).

        A task's lag, and so when a recovered task has caught up, is measured from the
        last time its source had no backlog; a source that cannot tell says ``True``.
        """
        return True

    def snapshot(self) -> Any:
        raise NotImplementedError

    def restore(self, state: Any) -> None:
        raise NotImplementedError


def load_class(spec: str) -> type:
    """The class named ``"package.module:Class"`` (``config.function``)."""
    import importlib

    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"config.function must be 'module:Class', got {spec!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"config.function: cannot import {module!r}: {err}") from None
    cls = getattr(mod, name, None)
    if not isinstance(cls, type):
        raise ConfigError(f"config.function: {module!r} has no class {name!r}")
    return cls
