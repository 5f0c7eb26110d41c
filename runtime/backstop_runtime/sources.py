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

A bounded input may instead be cut into balanced, line-aligned byte ranges
(``splits: ranges``, :mod:`backstop_runtime.splits`): the plan is made once, from the files
listed first and their sizes, and the end of each of this task's ranges (``ends``) is part
of its position beside the offsets, so a restart reads on exactly as before.

Lines that are not JSON objects, or lack a field the config requires, or whose event time
is not a number, are counted and kept aside in the task's dead-letter file with the
reason, file and offset; they are never dropped.

Config: ``path`` (required), ``bounded`` (stop at the end of the files, default false),
``timestampField`` (default ``ts``), ``keyField``, ``requiredFields`` (list),
``maxDelaySeconds`` (allowed disorder of event time within a file, default 0),
``listIntervalSeconds`` (how often an ``s3://`` location is listed for new objects,
default 1), ``splits`` (``files``, the default: whole files by hash; ``ranges``: balanced
byte ranges, for a bounded input only).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from backstop_runtime.api import Columns, Context, Record, Source
from backstop_runtime.config import ConfigError, require
from backstop_runtime.segments import open_segments
from backstop_runtime.splits import first_line, plan

INF = float("inf")
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The parser of one JSON value at an index, which :func:`json.loads` calls after
skipping leading blanks and before refusing any trailing text but blanks."""


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
        self.ranges = str(config.get("splits", "files")) == "ranges"
        if str(config.get("splits", "files")) not in ("files", "ranges"):
            raise ConfigError('config.splits must be "files" or "ranges"')
        if self.ranges and not self.bounded:
            raise ConfigError('config.splits "ranges" needs a bounded input (bounded: true)')
        self.ends: dict[str, int] | None = None  # per file, the end of this task's range
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
        if self.ranges:
            return self._planned()
        listed = self.segs.names()
        for n in listed:
            if n not in self.offsets and owner(n, self.ctx.parallelism) == self.ctx.index:
                self.offsets[n] = 0
        self.gone = {n for n in self.offsets if n not in listed}
        for n in sorted(self.gone):
            self._deleted(n)
        return sorted(self.offsets)

    def _planned(self) -> list[str]:
        """The files of this task's balanced splits (:mod:`backstop_runtime.splits`),
        planned once over the files listed first (a bounded input does not change), each
        started at its first whole line; a restored task keeps the plan it restored."""
        assert self.ctx is not None
        if self.ends is None:
            sizes = self.segs.sizes()  # from the listing: no object is fetched for it
            mine = plan(sizes.items(), self.ctx.parallelism)[self.ctx.index]
            self.ends = {s.name: s.end for s in mine}
            for s in mine:
                if s.name not in self.offsets:
                    self.offsets[s.name] = first_line(s.start, self.segs.lines(s.name, s.start))
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
        return self.read_columns(max_records, until).records()

    def read_columns(self, max_records: int, until: Any = None) -> Columns:
        """Up to ``max_records`` new records as columns, the lines' objects as values
        (each line is parsed once, and no record object is made)."""
        if until is not None and self.ranges and self.ends is None:
            self._files()  # a replay from the start begins where the plan starts
        files = self._files() if until is None else sorted(until["offsets"])
        limits = None if until is None else {k: int(v) for k, v in until["offsets"].items()}
        out = Columns()
        left, more = max_records, files
        while more and left > 0:
            # an equal share of what is left for each file that may have more: a file at
            # its end leaves its share to the others, so a round is short only when the
            # task has no backlog (a short round paces the source, runtime.task)
            share = max(1, math.ceil(left / len(more)))
            full = []
            for name in more:
                self.offsets.setdefault(name, 0)
                if self.ends is not None and self.offsets[name] > self.ends.get(name, -1):
                    continue  # its split is read: what follows is another task's to fetch
                stop = None if limits is None else limits[name]
                taken = self._read_file(name, stop, share, out)
                left -= taken
                if taken >= share:
                    full.append(name)
            more = full
        return out

    def _read_file(self, name: str, stop: int | None, share: int, out: Columns) -> int:
        """Up to ``share`` records of ``name`` into ``out``, from its offset, never from
        ``stop`` on (a replay) nor past the end of its split; how many it took."""
        pos = self.offsets[name]
        end = None if self.ends is None else self.ends[name]
        taken = 0
        parse = self._parse
        for line in self.segs.lines(name, pos):
            if taken >= share or (stop is not None and pos >= stop):
                break
            if end is not None and pos > end:
                break  # the rest belongs to the next split
            if line[-1:] != b"\n":
                self.offsets[name] = pos
                if not self._final(name, line):
                    break  # a line still being written: read it next time
            offset = pos
            pos += len(line)
            if parse(name, offset, line, out):
                taken += 1
        self.offsets[name] = pos
        return taken

    def _final(self, name: str, line: bytes) -> bool:
        """In a bounded log, a deleted file or an object (never appended to), an
        unterminated last line is complete."""
        done = self.bounded or name in self.gone or self.segs.complete
        return done and self.offsets[name] + len(line) == self._size(name)

    def _parse(self, name: str, offset: int, line: bytes, out: Columns) -> bool:
        """Add the record of ``line`` to ``out`` (``True``), or keep the line aside as a
        dead letter or skip a blank one (``False``)."""
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        try:
            obj, end = _scan(text, 0)  # what json.loads does, without its wrapping
            if end != len(text):
                raise StopIteration(end)
        except (StopIteration, json.JSONDecodeError):
            if not text or text.isspace():
                return False
            try:  # leading or trailing blanks, or not JSON: as json.loads says
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                return self._reject(f"not JSON: {err.msg}", name, offset, text)
        if type(obj) is not dict:
            return self._reject("not a JSON object", name, offset, text)
        for f in self.required:
            if f not in obj:
                missing = [f for f in self.required if f not in obj]
                return self._reject("missing field(s) " + ", ".join(missing), name, offset, text)
        ts: float | None = None
        if self.ts_field in obj:
            raw = obj[self.ts_field]
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
                return self._reject(f"{self.ts_field} is not a finite number", name, offset, text)
            ts = float(raw)
            if ts > self.max_ts.get(name, -INF):
                self.max_ts[name] = ts
        key = obj.get(self.key_field) if self.key_field else None
        out.append(obj, None if key is None else str(key), ts)
        return True

    def _reject(self, reason: str, name: str, offset: int, text: str) -> bool:
        assert self.ctx is not None
        self.ctx.dead_letter(reason, {"file": name, "offset": offset, "line": text})
        return False

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
        return self.segs.held(name) and self._done(name)

    def _done(self, name: str) -> bool:
        """Whether this task has read all it reads of ``name``: to the file's end, or
        past the end of its split."""
        past = self.ends is not None and self.offsets[name] > self.ends.get(name, -1)
        return past or self.offsets[name] >= self._size(name)

    def idle(self) -> bool:
        return not self.offsets

    def at_end(self) -> bool:
        return self.bounded and self.caught_up()

    def caught_up(self) -> bool:
        return all(self._done(n) for n in self._files())

    def snapshot(self) -> Any:
        state = {"offsets": dict(self.offsets), "maxTs": dict(self.max_ts)}
        if self.ends is not None:
            state["ends"] = dict(self.ends)
        return state

    def restore(self, state: Any) -> None:
        self.offsets = {k: int(v) for k, v in state["offsets"].items()}
        ends = state.get("ends")
        self.ends = None if ends is None else {k: int(v) for k, v in ends.items()}
        self.max_ts = {k: float(v) for k, v in state["maxTs"].items()}
