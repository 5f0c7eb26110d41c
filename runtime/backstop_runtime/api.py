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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backstop_runtime.config import ConfigError


@dataclass(frozen=True)
class Record:
    """One tuple: an optional partitioning key, a JSON value and its event time."""

    value: Any
    key: str | None = None
    ts: float | None = None


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

    def emit(self, value: Any, key: str | None = None, ts: float | None = None) -> None:
        """Send ``value`` downstream; ``ts`` defaults to the event time of the input."""
        self._emit(Record(value, key, self._current_ts if ts is None else ts))

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
