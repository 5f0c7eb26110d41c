"""Writing one benchmark's section of the shared ``docs/benchmarks.md``.

Every benchmark owns one ``## `` section of that file; this replaces the
section in place (or appends it) and leaves the other sections alone, so the
benchmarks can be re-run one at a time.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace (or append) the ``heading`` section of ``path``, leaving the rest alone.

    ``section`` is the whole section, starting with the ``heading`` line.
    """
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    path.write_text(text.rstrip("\n") + "\n")


def emit(
    section: str, out: Path | None, heading: str, log: Callable[[str], object] | None = None
) -> int:
    """Print a benchmark's section and, with ``--out``, write it into that file (and
    ``log`` that it did); the exit code, 0."""
    sys.stdout.write(section)
    if out:
        write_section(out, heading, section)
        if log is not None:
            log(f"wrote {out}")
    return 0
