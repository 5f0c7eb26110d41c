"""The segments a JSONL source reads: named byte streams, read line by line from an offset.

A source's ``config.path`` is a location (:func:`backstop_runtime.blobs.open_blobs`):

* a directory (:class:`FileSegments`): the ``*.jsonl`` files under it, which may grow while
  they are read (a writer appends lines), and which a reader keeps open, so a file deleted
  before its end is still read to its end;
* ``s3://bucket/prefix`` (:class:`BlobSegments`): the ``*.jsonl`` objects under the prefix.
  An object is written whole and never appended to, so a listed object is complete: new
  input arrives as new objects (segments). A reader fetches an object once, from the
  offset it had reached (:meth:`~backstop_runtime.blobs.Blobs.get_range`), and keeps the
  unread rest until it has read it.

Names are keys relative to the location (``part-00.jsonl``, ``2026/11/27/0001.jsonl``):
the same for every source task, whatever its host, which is what ownership hashes.
"""

from __future__ import annotations

import abc
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from backstop_runtime.blobs import Blobs, open_blobs

SUFFIX = ".jsonl"


class Segments(abc.ABC):
    """Where a source's segments are, and the segments it holds open."""

    complete: bool = False
    """Whether a listed segment is complete (it never grows): then its unterminated last
    line is a whole line."""

    @abc.abstractmethod
    def names(self) -> set[str]:
        """The names of the segments present now."""

    def sizes(self) -> dict[str, int]:
        """The length in bytes of each segment present now (what a store lists)."""
        return {n: self.size(n) for n in self.names()}

    @abc.abstractmethod
    def size(self, name: str, offset: int = 0) -> int:
        """The length of ``name`` in bytes (through the held copy if there is one);
        ``offset`` is where its reader is, which is all a store needs to send of it."""

    @abc.abstractmethod
    def lines(self, name: str, offset: int) -> Iterator[bytes]:
        """The lines of ``name`` from byte ``offset`` (the last may lack its line end)."""

    @abc.abstractmethod
    def held(self, name: str) -> bool:
        """Whether ``name`` can still be read although it is no longer present."""

    @abc.abstractmethod
    def close(self, name: str) -> None:
        """Let go of ``name`` (read to its end, or gone)."""

    def check(self) -> None:
        """Raise :class:`OSError` if the location cannot hold segments (a bucket is
        checked by its first listing, which raises its own errors)."""
        return None


class FileSegments(Segments):
    """The ``*.jsonl`` files under the directory ``root``, read through open handles."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.handles: dict[str, BinaryIO] = {}

    def check(self) -> None:
        if not self.root.is_dir():
            raise NotADirectoryError(f"config.path {self.root} is not a directory")

    def names(self) -> set[str]:
        return {p.relative_to(self.root).as_posix() for p in self.root.rglob("*" + SUFFIX)}

    def size(self, name: str, offset: int = 0) -> int:
        f = self.handles.get(name)
        return os.fstat(f.fileno()).st_size if f is not None else (self.root / name).stat().st_size

    def lines(self, name: str, offset: int) -> Iterator[bytes]:
        if name not in self.handles:
            self.handles[name] = (self.root / name).open("rb")
        f = self.handles[name]
        f.seek(offset)
        while line := f.readline():
            yield line

    def held(self, name: str) -> bool:
        return name in self.handles

    def close(self, name: str) -> None:
        f = self.handles.pop(name, None)
        if f is not None:
            f.close()


class BlobSegments(Segments):
    """The ``*.jsonl`` objects of ``blobs``, each fetched once from the offset reached.

    The store is listed at most once every ``list_seconds`` (a source asks for the names
    at every mini-batch, and a listing is a paid request on a public cloud): a new
    segment is seen that much later at most."""

    complete = True

    def __init__(self, blobs: Blobs, list_seconds: float = 0.0) -> None:
        self.blobs = blobs
        self.list_seconds = list_seconds
        self.listed: tuple[float, dict[str, int]] = (-math.inf, {})
        """When the store was last listed, and the segments and their sizes it listed."""
        self.rest: dict[str, tuple[int, bytes]] = {}
        """Per fetched object: the offset the held bytes start at, and those bytes."""

    def names(self) -> set[str]:
        return set(self.sizes())

    def sizes(self) -> dict[str, int]:
        at, sizes = self.listed
        now = time.monotonic()
        if now - at >= self.list_seconds:
            sizes = {k: n for k, n in self.blobs.sizes().items() if k.endswith(SUFFIX)}
            self.listed = (now, sizes)
        return dict(sizes)

    def _fetch(self, name: str, offset: int) -> tuple[int, bytes]:
        """The held bytes of ``name`` from ``offset`` on (fetched if not held yet)."""
        base, data = self.rest.get(name, (-1, b""))
        if not base <= offset <= base + len(data):
            got = self.blobs.get_range(name, offset)
            if got is None:
                raise FileNotFoundError(f"segment {name} is gone from {self.blobs!r}")
            base, data = offset, got
        self.rest[name] = (offset, data[offset - base :])
        return self.rest[name]

    def size(self, name: str, offset: int = 0) -> int:
        base, data = self.rest.get(name) or self._fetch(name, offset)
        return base + len(data)

    def lines(self, name: str, offset: int) -> Iterator[bytes]:
        _, data = self._fetch(name, offset)
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end + 1
            yield data[start:end]
            start = end

    def held(self, name: str) -> bool:
        return name in self.rest

    def close(self, name: str) -> None:
        self.rest.pop(name, None)


def open_segments(
    location: str, env: Mapping[str, str] | None = None, list_seconds: float = 0.0
) -> Segments:
    """The segments at ``location``: ``s3://bucket/prefix`` (listed at most once every
    ``list_seconds``) or a directory.

    >>> open_segments("/data/in").__class__.__name__
    'FileSegments'
    """
    if location.startswith("s3://"):
        return BlobSegments(open_blobs(location, env), list_seconds)
    return FileSegments(Path(location))
