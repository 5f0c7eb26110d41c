"""Balanced input splits: byte ranges of files spread evenly over a source's tasks.

The files, sorted by name, are laid end to end and the whole cut into ``parallelism``
contiguous byte ranges of equal length (within one byte); each task reads its range,
which is one or more :class:`Split` (a range of one file each). The plan is a pure
function of the sorted names, their sizes and the parallelism, so every task computes the
same plan without coordination, and a restarted or promoted task reads exactly the same
records in the same order.

A range is read line by line with the rule of Hadoop's ``TextInputFormat`` (*Hadoop: The
Definitive Guide*, "Input Formats", "TextInputFormat"): a split that does not start at
byte 0 starts after the first newline at or after its start, and a split reads every
line that starts at or before its end, so its last line may cross the end. A line
starting at byte ``p`` is thus read by the one split with ``start < p <= end`` (the line
at byte 0 by the split starting there): every line exactly once over all the splits, and
each task reads within one line's length of its share.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Split:
    """The bytes ``[start, end)`` of the file ``name`` (before line alignment)."""

    name: str
    start: int
    end: int


def plan(files: Iterable[tuple[str, int]], parallelism: int) -> list[list[Split]]:
    """Per task index, its splits in file name order: the files (``(name, size)``) laid
    end to end in name order, cut at ``total * i // parallelism``.

    >>> [[(s.name, s.start, s.end) for s in t] for t in plan([("b", 4), ("a", 6)], 2)]
    [[('a', 0, 5)], [('a', 5, 6), ('b', 0, 4)]]
    """
    if parallelism < 1:
        raise ValueError("parallelism must be at least 1")
    ordered = sorted(files)
    total = sum(size for _, size in ordered)
    cuts = [total * i // parallelism for i in range(parallelism + 1)]
    tasks: list[list[Split]] = [[] for _ in range(parallelism)]
    base = 0
    for name, size in ordered:
        for i in range(parallelism):
            lo, hi = max(cuts[i], base), min(cuts[i + 1], base + size)
            if lo < hi:
                tasks[i].append(Split(name, lo - base, hi - base))
        base += size
    return tasks


def first_line(start: int, lines: Iterator[bytes]) -> int:
    """The offset a split starting at ``start`` reads from, given the file's ``lines``
    from ``start`` on: ``start`` itself at 0, else just after the first newline at or
    after ``start`` (the end of the data if there is none)."""
    if start == 0:
        return 0
    for line in lines:
        return start + len(line)
    return start


def read_split(data: bytes, split: Split) -> list[bytes]:
    """The lines of ``data`` (one whole file) that ``split`` reads: what the source does
    through its segments, here over bytes in memory."""
    pos = first_line(split.start, _lines(data, split.start))
    out: list[bytes] = []
    for line in _lines(data, pos):
        if pos > split.end:
            break
        out.append(line)
        pos += len(line)
    return out


def _lines(data: bytes, pos: int) -> Iterator[bytes]:
    """The lines of ``data`` from ``pos`` on, each with its newline (the last may lack it)."""
    while pos < len(data):
        nl = data.find(b"\n", pos)
        nxt = len(data) if nl < 0 else nl + 1
        yield data[pos:nxt]
        pos = nxt
