"""Input for a JSONL source, written as segments into a location.

A source whose ``config.path`` is ``s3://bucket/prefix`` reads the ``*.jsonl`` objects under
it, each an immutable segment (:mod:`backstop_runtime.segments`); input grows by new
segments, never by appending to one. This module writes them:

* ``python -m backstop_runtime.input put LOCATION FILE... [--prefix P]`` uploads each file
  as the segment ``P<file name>``;
* :func:`put_segment` and :func:`segment_name` serve generators that write a segment at
  a time (``python -m backstop_runtime.examples.tweets s3://... --follow``).

A segment is written with :meth:`~backstop_runtime.blobs.Blobs.create`: a name that exists
already keeps its content, so a segment the sources may have read never changes (an equal
content, from a retried upload, is accepted). A directory location works the same way,
each segment a whole file that appears at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from backstop_runtime.blobs import Blobs, open_blobs
from backstop_runtime.segments import SUFFIX


class SegmentExists(Exception):
    """A segment of that name exists with other content: segments never change."""


def segment_name(seq: int, part: int | None = None, prefix: str = "") -> str:
    """The name of segment ``seq`` (of partition ``part``): zero-padded, so names sort
    in the order they are written.

    >>> segment_name(42), segment_name(42, 1, "in/")
    ('seg-000000000042.jsonl', 'in/seg-000000000042-p01.jsonl')
    """
    tail = "" if part is None else f"-p{part:02d}"
    return f"{prefix}seg-{seq:012d}{tail}{SUFFIX}"


def put_segment(blobs: Blobs, name: str, data: bytes) -> bool:
    """Write segment ``name`` if it is absent; ``True`` if this call wrote it, ``False``
    if an equal segment was there. Raises :class:`SegmentExists` for a different one."""
    if not name.endswith(SUFFIX):
        raise ValueError(f"segment {name!r}: a source reads *{SUFFIX} names only")
    if blobs.create(name, data):
        return True
    if blobs.get(name) == data:
        return False
    raise SegmentExists(f"segment {name} exists in {blobs!r} with other content")


def put_files(
    location: str, files: Iterable[Path], prefix: str = "", env: Mapping[str, str] | None = None
) -> list[str]:
    """Upload ``files`` as segments ``<prefix><file name>`` at ``location``; return the
    names written (those present with the same content already are left out)."""
    blobs = open_blobs(location, env)
    written = []
    for path in files:
        name = prefix + Path(path).name
        if put_segment(blobs, name, Path(path).read_bytes()):
            written.append(name)
    return written


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m backstop_runtime.input put LOCATION FILE... [--prefix P]``."""
    parser = argparse.ArgumentParser(
        prog="python -m backstop_runtime.input",
        description="Write input segments for a JSONL source into a location.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    put = sub.add_parser("put", help="upload files as segments")
    put.add_argument("location", help="the source's config.path: s3://bucket/prefix or a directory")
    put.add_argument("files", nargs="+", type=Path, help="*.jsonl files")
    put.add_argument("--prefix", default="", help="put before each file name (a folder: 'a/')")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        written = put_files(args.location, args.files, args.prefix)
    except (SegmentExists, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name in written:
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
