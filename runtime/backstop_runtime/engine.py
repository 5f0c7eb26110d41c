"""The deterministic core: one mini-batch in, the outputs per consumer out.

Both the live task and a replay (a task regenerating output it did not buffer) run
this code, so a replayed batch is identical to the original, record for record
and in order. That is what lets a consumer drop duplicates by batch number alone
(order-preserving processing: Su, Zhou, *Incremental Recovery in Distributed Stream
Processing Systems*, Section 4.3, Algorithm 1): inputs of one batch are merged in a
fixed round-robin order over the upstream tasks, and partitioning hashes with CRC-32,
never Python's per-process salted ``hash``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backstop_runtime.api import Columns, Context, Operator, Sink, Source
from backstop_runtime.batches import INF, Batch, merged_pieces
from backstop_runtime.batchlog import BatchLog, ReplayGone
from backstop_runtime.blobs import open_blobs
from backstop_runtime.config import ConfigError, TaskConfig, require
from backstop_runtime.output import OutputLog
from backstop_runtime.routing import Partitioner, combined, load_combiner, stable_hash
from backstop_runtime.store import Store

_LINE = json.JSONEncoder(separators=(",", ":")).encode
_log = logging.getLogger(__name__)


@dataclass
class Counters:
    """Totals since start; the metrics writer reports differences per interval."""

    tuples_in: int = 0
    tuples_out: int = 0
    dead_letters: int = 0
    late: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class DeadLetters:
    """Malformed input, counted and kept aside (never dropped) as JSON Lines objects
    ``tasks/<task>/dead-letters/<epoch>-<seq>.jsonl``.

    Rows gather in memory and :meth:`flush` stores them as one object; the task flushes
    before each checkpoint (a source: before it logs a round), so the rows of the input a
    checkpoint or log entry covers are stored before it, and rows lost with a crash are
    found again when the input after it is read again.
    """

    def __init__(self, store: Store | None, counters: Counters, task: str) -> None:
        self.store = store
        self.counters = counters
        self.task = task
        self.rows: list[str] = []
        self.seq = 0

    def __call__(self, reason: str, payload: Any) -> None:
        self.counters.dead_letters += 1
        if self.store is None:  # a replay: the live task already kept these aside
            return
        self.rows.append(json.dumps({"task": self.task, "reason": reason, "payload": payload}))

    def flush(self) -> None:
        """Store the rows gathered since the last flush as one object (none if none).

        The live task flushes on its writer thread (:mod:`backstop_runtime.offloop`):
        the rows are taken before the write, so a row added meanwhile goes with the next
        flush."""
        if self.store is None or not self.rows:
            return
        rows, self.rows = self.rows, []
        self.seq += 1
        key = f"{self.store.key}/dead-letters/{self.store.epoch}-{self.seq:08d}.jsonl"
        self.store.blobs.put(key, "".join(r + "\n" for r in rows).encode())


class SinkWriter:
    """A sink task's output: the lines of each checkpoint interval, committed as one object
    per checkpoint round under ``config.path`` (:mod:`backstop_runtime.output`).

    Lines stay in memory until the checkpoint of their round, which writes them (after
    checking the fence) before it saves the checkpoint, so a saved checkpoint always
    covers output that is durable. A restore deletes the objects after the restored round;
    the replay writes them again, with the same content.
    """

    def __init__(self, cfg: TaskConfig, store: Store) -> None:
        self.location = str(require(cfg.config, "path"))
        self.out = OutputLog(open_blobs(self.location), cfg.task)
        self.task = cfg.task
        self.store = store
        self.pending = bytearray()
        """The lines since the last checkpoint, encoded (a line as a ``str`` would take
        its bytes again in object overhead, and the commit a joined copy of them all)."""

    def open(self, r: int) -> None:
        """Start after checkpoint round ``r``: drop the objects no checkpoint covers."""
        self.store.check_fence()
        dropped = self.out.discard_after(r)
        if dropped:
            _log.info("%s: deleted output of rounds %s after round %d", self.task, dropped, r)
        self.pending.clear()

    def add(self, value: Any) -> None:
        self.pending += (_LINE(value) + "\n").encode()

    def add_many(self, values: list[Any]) -> None:
        """One line per value, in order."""
        line = _LINE
        self.pending += "".join([line(v) + "\n" for v in values]).encode()

    def commit(self, r: int) -> int:
        """Write the lines since the previous checkpoint as round ``r``'s object (none if
        there are no lines) and return ``r``, the round the checkpoint records."""
        if self.pending:
            self.store.check_fence()
            how = self.out.commit(r, bytes(self.pending))
            if how == "replaced":
                _log.warning("%s: replaced another copy's other output of round %d", self.task, r)
            self.pending.clear()
        return r


def instantiate(cfg: TaskConfig, base: type) -> Any:
    """The user's class from ``config.function``, checked to be a ``base``."""
    from backstop_runtime.api import load_class

    cls = load_class(require(cfg.config, "function"))
    if not issubclass(cls, base):
        kind = "a source (it has no inputs)" if base is Source else "an operator"
        raise ConfigError(f"config.function {cls.__name__} is not {kind}: subclass {base.__name__}")
    factory: Any = cls
    return factory(cfg.config)


class Processor:
    """A non-source task's operator with its context: :meth:`step` runs one mini-batch."""

    def __init__(
        self,
        cfg: TaskConfig,
        op: Operator,
        counters: Counters,
        dead_letter: Callable[[str, Any], None],
        sink: SinkWriter | None = None,
        only: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.op = op
        self.counters = counters
        self.sink = sink
        self.only = only  # a replay regenerates one consumer's channel only
        self.part = Partitioner(cfg)
        self.combiner = None if sink is not None else load_combiner(cfg.config)
        self.ctx = Context(cfg.task, cfg.index, cfg.parallelism, self._emit, dead_letter)
        self.eos = False

    def _emit(self, rec: Any) -> None:
        raise RuntimeError("emit outside a round")  # the engine sets ctx.out while stepping

    def snapshot(self) -> dict[str, Any]:
        snap = {"op": self.op.snapshot(), "state": self.ctx.state, "wm": self.ctx.watermark}
        return {**snap, "eos": self.eos}

    def restore(self, ckpt: dict[str, Any] | None) -> None:
        if ckpt is None:
            return
        self.op.restore(ckpt.get("op"))
        self.ctx.state = dict(ckpt.get("state") or {})
        self.ctx.watermark = float(ckpt.get("wm", -INF))
        self.eos = bool(ckpt.get("eos", False))

    def step(self, r: int, inputs: list[Batch]) -> dict[str, Batch]:
        """Process round ``r`` (one batch per upstream, in the upstream order) and return
        the batch for every consumer, empty ones included: they carry the barrier.

        The inputs are merged in Alg. 1's predefined round-robin order and handed to the
        operator in pieces (:func:`~backstop_runtime.batches.merged_pieces`: one, unless
        the round is large); its output (watermark emissions included) is combined, then
        routed. A sink writes each piece's lines as it goes, so a large round's records
        are never all decoded at once."""
        out = self.ctx.out = Columns()
        try:
            for piece in merged_pieces(inputs):
                self.counters.tuples_in += len(piece)
                self.op.process_batch(piece, self.ctx)
                if self.sink is not None and len(out):
                    self._send(r, out)
                    out = self.ctx.out = Columns()
                del piece  # before the next piece decodes
            self.ctx._current_ts = None
            wm = min((b.wm for b in inputs), default=INF)
            eos = all(b.eos for b in inputs)
            if eos:
                wm = INF
            if wm > self.ctx.watermark:
                self.ctx.watermark = wm
                self.op.on_watermark(wm, self.ctx)
        finally:
            self.ctx.out = None
            self.ctx._current_ts = None
        self.eos = eos
        at = min((b.at for b in inputs), default=0.0)  # as far behind as the oldest input
        via = tuple(sorted({x for b in inputs for x in b.via}))  # a replay passes through
        routed = self._send(r, out)
        wm = self.ctx.watermark
        return {t: Batch(r, cols, wm, eos, at, via) for t, cols in routed.items()}

    def _send(self, r: int, out: Columns) -> dict[str, Columns]:
        """The round's output per consumer (none for a sink, which writes it)."""
        if self.sink is not None:
            self.counters.tuples_out += len(out)
            self.sink.add_many(out.values)
            return {}
        out = combined(self.combiner, out)
        self.counters.tuples_out += len(out)
        self.part.begin(r)
        routed = self.part.route_batch(out)
        return routed if self.only is None else {self.only: routed[self.only]}


class SourceProcessor:
    """A source task: live batches logged before they are sent, and replays from the log."""

    def __init__(
        self,
        cfg: TaskConfig,
        source: Source,
        log: BatchLog,
        counters: Counters,
        only: str | None = None,
        store: Store | None = None,
        before_log: Callable[[], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.source = source
        self.before_log = before_log
        """Called before a live round is logged (the task stores its dead letters there,
        so those of a logged round, which no restart reads again, are never lost)."""
        self.log = log
        self.counters = counters
        self.only = only
        self.store = store
        """Where the operator's other source tasks log their watermarks (a live task)."""
        self.part = Partitioner(cfg)
        self.combiner = load_combiner(cfg.config)

    def _read(self, max_records: int, until: Any = None) -> Columns:
        """The source's next records as columns (:meth:`Source.read_columns`)."""
        return self.source.read_columns(max_records, until)

    def _split(
        self, r: int, recs: Columns, wm: float, eos: bool, at: float, via: tuple[str, ...] = ()
    ) -> dict[str, Batch]:
        recs = combined(self.combiner, recs)
        self.part.begin(r)
        out = self.part.route_batch(recs)
        self.counters.tuples_out += len(recs)
        targets = self.part.consumers if self.only is None else [self.only]
        return {t: Batch(r, out[t], wm, eos, at, via) for t in targets}

    def step_live(
        self, r: int, max_records: int, behind_since: float, paced: bool = False
    ) -> dict[str, Batch]:
        """Read and log round ``r``. Its ``at`` is now if the read left no backlog, else
        ``behind_since``, the last time the source had none (so a backlog shows as lag).
        A ``paced`` source (``config.maxRecordsPerSecond``: a stored log replayed at a set
        rate, as tests and benchmarks do) has no backlog by definition."""
        recs = self._read(max_records)
        self.counters.tuples_in += len(recs)
        eos = self.source.at_end()
        idle = not eos and self.source.idle()
        wm = INF if eos else self._idle_watermark() if idle else self.source.watermark()
        caught_up = eos or paced or self.source.caught_up()
        at = time.time() if caught_up else behind_since
        if self.before_log is not None:
            self.before_log()
        self.log.append(r, self.source.snapshot(), wm, eos, at, idle)
        return self._split(r, recs, wm, eos, at)

    def _idle_watermark(self) -> float:
        """An idle source follows the other sources of its operator (the slowest one that
        reads input), so it never holds back event time; with none, it keeps its own."""
        cfg = self.cfg
        peers = [f"{cfg.operator}-{i}" for i in range(cfg.parallelism) if i != cfg.index]
        theirs = self.store.source_watermark(peers) if self.store is not None else None
        if theirs is not None:
            return theirs
        last = self.log.entries.get(self.log.last)
        return float(last["wm"]) if last is not None else -INF

    def step_replay(self, r: int) -> dict[str, Batch]:
        prev, cur = self.log.entry(r - 1), self.log.entry(r)
        self.source.restore(prev["state"])
        recs = self._read(2**62, until=cur["state"])
        wm, eos, at = float(cur["wm"]), bool(cur["eos"]), float(cur["at"])
        return self._split(r, recs, wm, eos, at, (f"log:{self.cfg.task}",))


__all__ = [
    "INF",
    "Batch",
    "BatchLog",
    "Columns",
    "Counters",
    "DeadLetters",
    "Partitioner",
    "Processor",
    "ReplayGone",
    "Sink",
    "SinkWriter",
    "SourceProcessor",
    "instantiate",
    "stable_hash",
]
