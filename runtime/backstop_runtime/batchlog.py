"""A source's mini-batch log (``tasks/<task>/batches.jsonl``): its position after every batch.

Together with the replayable input the log *is* the source's output buffer: batch ``r`` is
re-read as ``restore(position[r-1]); read(until=position[r])``. So an entry must be on
disk before its batch leaves the task (a consumer holding batch ``r`` may ask for it again
after the source crashed): :meth:`BatchLog.append` writes and fsyncs it first. And the log
needs only what a replay may still ask for, the entries from the lowest replay floor of
the consumers on (``Store.consumer_floor``): :meth:`BatchLog.forget_before` drops the
older ones from memory and from the file, which it rewrites whole into a temporary file of
a name no other copy uses and renames over the log, so a crash leaves one of the two
complete logs and a restart reads only the kept entries.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO


class ReplayGone(Exception):
    """A replay asked for a batch whose position is no longer logged (a protocol error:
    the consumer asked for less than its published replay floor promised)."""


def _line(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


class BatchLog:
    """The log of one source task; ``path=None`` keeps it in memory only (a test)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[int, dict[str, Any]] = {}
        self._last = -1
        self._file: BinaryIO | None = None
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        """Read the kept entries; cut a last line that a kill left unfinished, so the
        next entry starts on a line of its own."""
        committed = 0
        with path.open("rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a line cut by a kill is not committed
                e = json.loads(line)
                self.entries[int(e["r"])] = e
                self._last = max(self._last, int(e["r"]))
                committed += len(line)
        if path.stat().st_size > committed:
            os.truncate(path, committed)

    @property
    def last(self) -> int:
        return self._last

    @property
    def eos_round(self) -> int | None:
        """The round that ended a bounded stream, if it has ended."""
        last = self.last
        return last if last >= 0 and self.entries[last]["eos"] else None

    def forget_before(self, r: int) -> None:
        """Drop entries before round ``r``, in memory and on disk (the last one stays).

        A replay of round ``r`` needs entry ``r - 1``: to keep every round after a
        consumer's floor ``f`` replayable, call this with ``f``, not ``f + 1``.
        """
        old = [k for k in self.entries if k < r and k != self.last]
        for k in old:
            del self.entries[k]
        if old and self.path is not None:
            self._rewrite(self.path)

    def _rewrite(self, path: Path) -> None:
        """Replace the file by the entries memory keeps: written and synced under a name
        of this copy's own (two copies of a task may briefly run at once), then renamed."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("wb") as f:
                f.write(b"".join(_line(self.entries[k]) for k in sorted(self.entries)))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        if self._file is not None:  # it appends to the old file, which is gone now
            self._file.close()
            self._file = None
        _sync_dir(path.parent)

    def entry(self, r: int) -> dict[str, Any]:
        """Entry ``r``; :class:`ReplayGone` if the log does not keep it (any more)."""
        e = self.entries.get(r)
        if e is None:
            raise ReplayGone(f"batch {r} of the source is not in its batch log any more")
        return e

    def append(
        self,
        r: int,
        state: Any,
        wm: float,
        eos: bool,
        at: float | None = None,
        idle: bool = False,
    ) -> None:
        """Log round ``r``, synced to disk before this returns (and its batch is sent)."""
        e = {"r": r, "state": state, "wm": wm, "eos": eos, "at": time.time() if at is None else at}
        if idle:
            e["idle"] = True  # the source owned no input: ``wm`` is its peers'
        if self.path is not None:
            if self._file is None:
                self._file = self.path.open("ab")
            self._file.write(_line(e))
            self._file.flush()
            os.fsync(self._file.fileno())
        self.entries[r] = e
        self._last = max(self._last, r)


def _sync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
