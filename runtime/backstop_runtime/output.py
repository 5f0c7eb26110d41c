"""Sink output as objects committed per checkpoint, and the reader of that output.

A sink task writes, at each checkpoint round ``r``, one object ``<task>/<r:012d>.jsonl``
under its ``config.path`` location (``s3://bucket/prefix`` or a directory, see
:func:`backstop_runtime.blobs.open_blobs`) holding the lines it produced since its
previous checkpoint, before it saves the checkpoint that covers them. The key is fixed by
(task, round) and the content by the deterministic replay, so every copy of the task that
reaches round ``r`` from the same checkpoint writes the same bytes under the same key.

The object is written with :meth:`~backstop_runtime.blobs.Blobs.create`: a second copy (a
superseded copy's late write, or the replay after a restart) that finds the key present
compares the content and leaves an equal object alone, so a late write can neither
duplicate nor tear a committed line (an object is written whole or not at all). A
different content can only come from a copy that checkpointed at other rounds (a stop at
an arbitrary round, another checkpoint interval): this copy's content, that of the
checkpoint it is about to save, replaces it.

On restore from checkpoint round ``R`` the task deletes its objects of rounds after ``R``:
no checkpoint covers them, the replay produces their lines again, and an object left from
a copy with another checkpoint schedule would otherwise repeat lines that this copy
commits under other rounds.

``python -m backstop_runtime.output cat LOCATION [--task T]...`` prints the committed lines
in (task, round) order; the tests and the docs read the sink's output through
:func:`read_lines`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from backstop_runtime.blobs import Blobs, open_blobs

ROUND_DIGITS = 12
_KEY = re.compile(r"^(?P<task>[^/]+)/(?P<round>\d{" + str(ROUND_DIGITS) + r"})\.jsonl$")


def round_key(task: str, r: int) -> str:
    """The key of ``task``'s output object for checkpoint round ``r``.

    >>> round_key("sink-0", 40)
    'sink-0/000000000040.jsonl'
    """
    return f"{task}/{r:0{ROUND_DIGITS}d}.jsonl"


def parse_key(key: str) -> tuple[str, int] | None:
    """(task, round) of an output object's key; ``None`` for any other key.

    >>> parse_key("sink-0/000000000040.jsonl"), parse_key("sink-0/notes.txt")
    (('sink-0', 40), None)
    """
    m = _KEY.match(key)
    return (m["task"], int(m["round"])) if m else None


def task_order(task: str) -> tuple[str, int, str]:
    """Sort key for task ids: by operator, then by index as a number (``sink-2`` before
    ``sink-10``).

    >>> sorted(["sink-10", "sink-2", "other"], key=task_order)
    ['other', 'sink-2', 'sink-10']
    """
    op, _, index = task.rpartition("-")
    return (op, int(index), "") if op and index.isdigit() else (task, -1, task)


class OutputLog:
    """One sink task's output objects in ``blobs``."""

    def __init__(self, blobs: Blobs, task: str) -> None:
        self.blobs, self.task = blobs, task

    def rounds(self) -> list[int]:
        """The rounds of the objects present, ascending."""
        found = (parse_key(k) for k in self.blobs.list(f"{self.task}/"))
        return sorted(p[1] for p in found if p is not None and p[0] == self.task)

    def discard_after(self, r: int) -> list[int]:
        """Delete the objects of rounds after ``r`` (no checkpoint covers them) and return
        their rounds."""
        later = [x for x in self.rounds() if x > r]
        for x in later:
            self.blobs.delete(round_key(self.task, x))
        return later

    def commit(self, r: int, data: bytes) -> str:
        """Write round ``r``'s object if it is absent.

        Returns ``"created"``, ``"present"`` (an equal object was there: written by
        another copy, which produced the same lines) or ``"replaced"`` (a different
        object was there, from a copy that checkpointed at other rounds; it is
        overwritten with ``data``, which the checkpoint about to be saved covers).
        """
        key = round_key(self.task, r)
        if self.blobs.create(key, data):
            return "created"
        if self.blobs.get(key) == data:
            return "present"
        self.blobs.put(key, data)
        return "replaced"


def _selected(task: str, wanted: Sequence[str]) -> bool:
    """Whether ``task`` is one of ``wanted`` (task ids or operator names)."""
    return not wanted or task in wanted or task.rpartition("-")[0] in wanted


def committed(blobs: Blobs, tasks: Sequence[str] = ()) -> list[tuple[str, int]]:
    """(task, round) of every output object in ``blobs``, in (task, round) order;
    ``tasks`` (task ids such as ``sink-0`` or operator names such as ``sink``) keeps
    only those tasks' objects."""
    found = [p for p in map(parse_key, blobs.list()) if p is not None]
    picked = [p for p in found if _selected(p[0], tasks)]
    return sorted(picked, key=lambda p: (task_order(p[0]), p[1]))


def read_lines(
    location: str | Path, tasks: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> list[str]:
    """The committed output lines at ``location`` (a sink's ``config.path``), in (task,
    round) order, without their line ends; ``tasks`` as for :func:`committed`."""
    blobs = open_blobs(location, env)
    lines: list[str] = []
    for task, r in committed(blobs, tasks):
        data = blobs.get(round_key(task, r))
        if data is not None:  # deleted since the listing (a restore after it)
            lines.extend(data.decode("utf-8").splitlines())
    return lines


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m backstop_runtime.output cat LOCATION [--task T]...``."""
    parser = argparse.ArgumentParser(
        prog="python -m backstop_runtime.output",
        description="Print a sink's committed output lines in (task, round) order.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cat = sub.add_parser("cat", help="print the committed lines")
    cat.add_argument("location", help="the sink's config.path: s3://bucket/prefix or a directory")
    cat.add_argument(
        "--task",
        action="append",
        default=[],
        help="only this task (sink-0) or operator (sink); repeatable",
    )
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        sys.stdout.writelines(line + "\n" for line in read_lines(args.location, args.task))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (``| head``): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing more is written
    return 0


if __name__ == "__main__":
    sys.exit(main())
