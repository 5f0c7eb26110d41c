"""The operator's recovery session, as the ``<topology>-recovery`` ConfigMap mounts it.

``session.json`` (README, "Runtime contract") tells a task what the operator planned for
the current recovery: which checkpoint a recovered task restores (``checkpoint.before``:
the latest taken before the loss was detected), where each recovered task's replay comes
from (``replay``: upstream buffers by task id, source logs as ``log:<source>``), and
whether tasks buffer adaptively. A missing or unreadable file means no session.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("backstop_runtime.session")


@dataclass(frozen=True)
class Session:
    """What the runtime uses of ``session.json``."""

    active: bool = False
    adaptive: bool = False
    before: float | None = None
    """``checkpoint.before`` as a Unix time: restore a checkpoint taken before it."""
    replay: dict[str, list[str]] = field(default_factory=dict)

    def recovering(self, task: str) -> bool:
        """Whether ``task`` is one the current session recovers."""
        return self.active and task in self.replay


def parse_time(raw: Any) -> float | None:
    """An RFC 3339 time (``2026-11-25T22:34:36Z``) or a Unix time, as a Unix time.

    >>> parse_time("1970-01-01T00:01:40Z"), parse_time(5), parse_time("soon")
    (100.0, 5.0, None)
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw).timestamp()
        except ValueError:
            return None
    return None


def parse(doc: Any) -> Session:
    """The session in a ``session.json`` document (fields that are not as documented are
    ignored: the operator writes this file, a hand-edited one must not stop a task).

    >>> s = parse({"phase": "Recovering", "step": 1, "adaptiveBuffering": True,
    ...     "checkpoint": {"before": "1970-01-01T00:00:10Z"}, "replay": {"b-0": ["a-0"]}})
    >>> s.recovering("b-0"), s.recovering("a-0"), s.before, s.adaptive
    (True, False, 10.0, True)
    """
    if not isinstance(doc, dict):
        return Session()
    active = doc.get("phase") != "Completed"
    ckpt = doc.get("checkpoint")
    before = parse_time(ckpt.get("before")) if isinstance(ckpt, dict) else None
    raw = doc.get("replay")
    replay = {
        str(t): [str(x) for x in srcs]
        for t, srcs in (raw.items() if isinstance(raw, dict) else [])
        if isinstance(srcs, list)
    }
    return Session(active, active and bool(doc.get("adaptiveBuffering")), before, replay)


def read(recovery_dir: Path | None) -> Session:
    """The session mounted under ``recovery_dir``, or no session."""
    if recovery_dir is None:
        return Session()
    try:
        return parse(json.loads((recovery_dir / "session.json").read_text()))
    except (OSError, ValueError):
        return Session()
