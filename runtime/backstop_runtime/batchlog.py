"""A source's mini-batch log (``tasks/<task>/batches/<round>``): its position after every batch.

Together with the replayable input the log *is* the source's output buffer: batch ``r`` is
re-read as ``restore(position[r-1]); read(until=position[r])``. So an entry must be durable
before its batch leaves the task (a consumer holding batch ``r`` may ask for it again after
the source crashed): :meth:`BatchLog.append` writes it as an object of its own (a store has
no append) and returns once the store has it. An outage of the store raises from there, so
no batch is sent whose entry is not stored. And the log needs only what a replay may still
ask for, the entries from the lowest replay floor of the consumers on
(``Store.consumer_floor``): :meth:`BatchLog.forget_before` deletes the older objects, so a
restart lists and reads only the few kept ones.
"""

from __future__ import annotations

import json
import time
from typing import Any

from backstop_runtime.blobs import Blobs


class ReplayGone(Exception):
    """A replay asked for a batch whose position is no longer logged (a protocol error:
    the consumer asked for less than its published replay floor promised)."""


def entry_key(prefix: str, r: int) -> str:
    """The key of entry ``r`` under ``prefix``: zero-padded, so keys sort as rounds.

    >>> entry_key("t/batches", 7)
    't/batches/000000000007'
    """
    return f"{prefix}/{r:012d}"


def _round_of(key: str) -> int | None:
    name = key.rpartition("/")[2]
    return int(name) if name.isdigit() else None


def logged_rounds(blobs: Blobs, prefix: str) -> list[int]:
    """The rounds whose entries are stored under ``prefix``, in order."""
    rounds = (_round_of(k) for k in blobs.list(prefix + "/"))
    return sorted(r for r in rounds if r is not None)


def read_entry(blobs: Blobs, key: str) -> dict[str, Any] | None:
    """The entry at ``key``; ``None`` if it is gone or cannot be read."""
    data = blobs.get(key)
    if data is None:
        return None
    try:
        doc = json.loads(data)
        if isinstance(doc, dict):
            int(doc["r"])
            return doc
    except (ValueError, KeyError, TypeError):
        pass
    return None


def last_logged_entry(blobs: Blobs, prefix: str) -> dict[str, Any] | None:
    """The newest readable entry of the log under ``prefix`` (``None`` if none): one list
    and, usually, one read, since compaction keeps the log short."""
    for r in reversed(logged_rounds(blobs, prefix)):
        doc = read_entry(blobs, entry_key(prefix, r))
        if doc is not None:
            return doc
    return None


class BatchLog:
    """The log of one source task under the key ``prefix`` of ``blobs``; ``blobs=None``
    keeps it in memory only (a test, a replay)."""

    def __init__(self, blobs: Blobs | None, prefix: str = "batches") -> None:
        self.blobs = blobs
        self.prefix = prefix
        self.entries: dict[int, dict[str, Any]] = {}
        self._last = -1
        if blobs is not None:
            self._load(blobs)

    def _load(self, blobs: Blobs) -> None:
        """Read the kept entries; one that cannot be read (a store that lost it half) is
        left out, as a line cut by a kill was."""
        for r in logged_rounds(blobs, self.prefix):
            doc = read_entry(blobs, entry_key(self.prefix, r))
            if doc is not None and int(doc["r"]) == r:
                self.entries[r] = doc
                self._last = max(self._last, r)

    @property
    def last(self) -> int:
        return self._last

    @property
    def eos_round(self) -> int | None:
        """The round that ended a bounded stream, if it has ended."""
        last = self.last
        return last if last >= 0 and self.entries[last]["eos"] else None

    def forget_before(self, r: int) -> None:
        """Drop entries before round ``r``, in memory and in the store (the last one stays).

        A replay of round ``r`` needs entry ``r - 1``: to keep every round after a
        consumer's floor ``f`` replayable, call this with ``f``, not ``f + 1``. Objects
        go oldest first, so a crash midway leaves a log without holes.
        """
        old = sorted(k for k in self.entries if k < r and k != self.last)
        for k in old:
            if self.blobs is not None:
                self.blobs.delete(entry_key(self.prefix, k))
            del self.entries[k]

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
        """Log round ``r``, stored durably before this returns (and its batch is sent)."""
        e = {"r": r, "state": state, "wm": wm, "eos": eos, "at": time.time() if at is None else at}
        if idle:
            e["idle"] = True  # the source owned no input: ``wm`` is its peers'
        if self.blobs is not None:
            data = json.dumps(e, separators=(",", ":")).encode()
            self.blobs.put(entry_key(self.prefix, r), data)
        self.entries[r] = e
        self._last = max(self._last, r)
