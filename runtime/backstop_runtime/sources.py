"""The replayable partitioned log source: JSONL segments under ``config.path``.

``config.path`` is a directory of ``*.jsonl`` files, which may grow while they are read, or
``s3://bucket/prefix``, whose ``*.jsonl`` objects are immutable segments: new input comes
as new objects (:mod:`backstop_runtime.segments`). Below, a file is either.

Each file (a split) belongs to exactly one source task, chosen by a hash of its path
relative to ``config.path`` modulo the number of source tasks (:func:`owner`): every task
computes the same owner without coordination, a file that appears or disappears moves no
other file, and a new file is read once, by its owner, from its start. A task's position
is the byte offset of every file it owns, which is all a replay needs and what its
snapshot (the batch log entry) records, so a restart resumes exactly where it stopped. A
file deleted after it was fully read leaves its owner's state and watermark; one deleted
before that is read to its end through the handle still open on it, or, with no handle
left (after a restart), kept aside as a dead letter with the offset this task had reached.

Lines that are not JSON objects, or lack a field the config requires, or whose event time
is not a number, are counted and kept aside in the task's dead-letter file with the
reason, file and offset; they are never dropped.

Config: ``path`` (required), ``bounded`` (stop at the end of the files, default false),
``timestampField`` (default ``ts``), ``keyField``, ``requiredFields`` (list),
``maxDelaySeconds`` (allowed disorder of event time within a file, default 0),
``listIntervalSeconds`` (how often an ``s3://`` location is listed for new objects,
default 1).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from backstop_runtime.api import Context, Record, Source
from backstop_runtime.config import ConfigError, require
from backstop_runtime.segments import open_segments

INF = float("inf")


def owner(name: str, parallelism: int) -> int:
    """The index of the source task that reads the file ``name`` (relative to
    ``config.path``): a hash of the name alone, the same in every process, so it does not
    depend on which other files exist (SHA-256 spreads similar names evenly).

    >>> [owner(f"part-{k:02d}.jsonl", 2) for k in range(6)]
    [1, 0, 0, 1, 1, 0]
    >>> owner("part-01.jsonl", 1)
    0
    """
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % parallelism


class JsonlSource(Source):
    """Reads ``*.jsonl`` under ``config.path``; position = byte offset per file."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.location = str(require(config, "path"))
        every = float(config.get("listIntervalSeconds", 1.0))
        self.segs = open_segments(self.location, list_seconds=every)
        self.bounded = bool(config.get("bounded", False))
        self.ts_field = str(config.get("timestampField", "ts"))
        self.key_field = config.get("keyField")
        required = config.get("requiredFields", [])
        if not isinstance(required, list):
            raise ConfigError("config.requiredFields must be a list of field names")
        self.required = [str(f) for f in required]
        self.max_delay = float(config.get("maxDelaySeconds", 0.0))
        self.offsets: dict[str, int] = {}
        self.max_ts: dict[str, float] = {}
        self.gone: set[str] = set()  # deleted files still read through what is held
        self.ctx: Context | None = None

    def open(self, ctx: Context) -> None:
        self.ctx = ctx
        try:
            self.segs.check()
        except OSError as err:
            raise ConfigError(str(err)) from err

    def _files(self) -> list[str]:
        """The files this task owns and still reads, in name order: the listed ones it
        owns (a new one starts at offset 0) and deleted ones it has not read to the end."""
        assert self.ctx is not None
        listed = self.segs.names()
        for n in listed:
            if n not in self.offsets and owner(n, self.ctx.parallelism) == self.ctx.index:
                self.offsets[n] = 0
        self.gone = {n for n in self.offsets if n not in listed}
        for n in sorted(self.gone):
            self._deleted(n)
        return sorted(self.offsets)

    def _deleted(self, name: str) -> None:
        """``name`` was deleted: keep reading it through what is held of it (an open
        handle, a fetched object) until its end, then forget it. With nothing held (a
        restart since) nobody can read on, so the offset this task had reached is kept
        aside as a dead letter: any rest after it is lost."""
        held = self.segs.held(name)
        if held and self.offsets[name] < self.segs.size(name):
            return
        if not held:
            assert self.ctx is not None
            where = {"file": name, "offset": self.offsets[name]}
            self.ctx.dead_letter("file deleted: nothing after this offset can be read", where)
        self.segs.close(name)
        del self.offsets[name]
        self.max_ts.pop(name, None)

    def _size(self, name: str) -> int:
        return self.segs.size(name, self.offsets.get(name, 0))

    def read(self, max_records: int, until: Any = None) -> list[Record]:
        files = self._files() if until is None else sorted(until["offsets"])
        limits = None if until is None else {k: int(v) for k, v in until["offsets"].items()}
        share = max(1, math.ceil(max_records / max(1, len(files))))
        out: list[Record] = []
        for name in files:
            self.offsets.setdefault(name, 0)
            stop = None if limits is None else limits[name]
            taken = 0
            for line in self.segs.lines(name, self.offsets[name]):
                if taken >= share or (stop is not None and self.offsets[name] >= stop):
                    break
                if not line.endswith(b"\n") and not self._final(name, line):
                    break  # a line still being written: read it next time
                offset = self.offsets[name]
                self.offsets[name] += len(line)
                rec = self._parse(name, offset, line)
                if rec is not None:
                    out.append(rec)
                    taken += 1
        return out

    def _final(self, name: str, line: bytes) -> bool:
        """In a bounded log, a deleted file or an object (never appended to), an
        unterminated last line is complete."""
        done = self.bounded or name in self.gone or self.segs.complete
        return done and self.offsets[name] + len(line) == self._size(name)

    def _parse(self, name: str, offset: int, line: bytes) -> Record | None:
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        if not text.strip():
            return None
        reason = None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            obj, reason = None, f"not JSON: {err.msg}"
        if reason is None and not isinstance(obj, dict):
            reason = "not a JSON object"
        if reason is None:
            missing = [f for f in self.required if f not in obj]
            if missing:
                reason = "missing field(s) " + ", ".join(missing)
        ts: float | None = None
        if reason is None and self.ts_field in obj:
            raw = obj[self.ts_field]
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
                reason = f"{self.ts_field} is not a finite number"
            else:
                ts = float(raw)
        if reason is not None:
            assert self.ctx is not None
            self.ctx.dead_letter(reason, {"file": name, "offset": offset, "line": text})
            return None
        if ts is not None:
            self.max_ts[name] = max(self.max_ts.get(name, -INF), ts)
        key = obj.get(self.key_field) if self.key_field else None
        return Record(obj, None if key is None else str(key), ts)

    def watermark(self) -> float:
        """The least of the files' newest event times, less ``maxDelaySeconds``. A file
        may grow, so each holds the watermark back; an object never does, so of the
        objects read to their end only the newest event time among them counts (the
        segments of one stream follow one another in time)."""
        files = list(self.offsets)
        if not files:
            return -INF
        done = [n for n in files if self.segs.complete and self._read_out(n)]
        marks = [self.max_ts.get(n, -INF) for n in files if n not in done]
        if done:
            marks.append(max(self.max_ts.get(n, -INF) for n in done))
        return min(marks) - self.max_delay

    def _read_out(self, name: str) -> bool:
        """Whether ``name``, held, is read to its end (no fetch for one not held)."""
        return self.segs.held(name) and self.offsets[name] >= self._size(name)

    def idle(self) -> bool:
        return not self.offsets

    def at_end(self) -> bool:
        return self.bounded and self.caught_up()

    def caught_up(self) -> bool:
        return all(self.offsets[n] >= self._size(n) for n in self._files())

    def snapshot(self) -> Any:
        return {"offsets": dict(self.offsets), "maxTs": dict(self.max_ts)}

    def restore(self, state: Any) -> None:
        self.offsets = {k: int(v) for k, v in state["offsets"].items()}
        self.max_ts = {k: float(v) for k, v in state["maxTs"].items()}
