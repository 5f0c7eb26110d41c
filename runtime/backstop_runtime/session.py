"""The operator's recovery session, as the ``<topology>-recovery`` ConfigMap mounts it.

``session.json`` (README, "Runtime contract") tells a task what the operator planned for
the current recovery: which checkpoint a recovered task restores (``checkpoint.before``:
the latest taken before the loss was detected), where each recovered task's replay comes
from (``replay``: upstream buffers by task id, source logs as ``log:<source>``), and
whether tasks buffer adaptively. A missing or unreadable file means no session.

The replay sources come in one of two forms. Format 2 (what the operator writes now,
``docs/scale.md``) groups the recovered tasks that replay from the same places:
``"replayGroups": [{"tasks": "reduce:0-299", "from": "map:0-299", "logs": ""}]``, task
lists as runs of indices per operator (:mod:`backstop_runtime.tasksets`), a run ``@``
meaning the recovering task's own index. The first form, ``"replay": {task: [sources]}``,
is still read (a ConfigMap written by an older operator).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from backstop_runtime import tasksets

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


def parse(doc: Any, task: str | None = None) -> Session:
    """The session in a ``session.json`` document (fields that are not as documented are
    ignored: the operator writes this file, a hand-edited one must not stop a task).
    With ``task``, only that task's replay sources are read.

    >>> s = parse({"phase": "Recovering", "step": 1, "adaptiveBuffering": True,
    ...     "checkpoint": {"before": "1970-01-01T00:00:10Z"}, "replay": {"b-0": ["a-0"]}})
    >>> s.recovering("b-0"), s.recovering("a-0"), s.before, s.adaptive
    (True, False, 10.0, True)
    >>> s = parse({"phase": "Recovering", "replayGroups": [
    ...     {"tasks": "b:0-1", "from": "a:@", "logs": "src:0"}]})
    >>> s.replay
    {'b-0': ['a-0', 'log:src-0'], 'b-1': ['a-1', 'log:src-0']}
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
        if isinstance(srcs, list) and (task is None or t == task)
    }
    groups = doc.get("replayGroups")
    for group in groups if isinstance(groups, list) else []:
        try:
            replay.update(_group(group, task))
        except (ValueError, TypeError, AttributeError):
            log.warning("session.json: ignoring a replay group that is not as documented")
    return Session(active, active and bool(doc.get("adaptiveBuffering")), before, replay)


def _group(group: Any, task: str | None) -> dict[str, list[str]]:
    """``{task: sources}`` of one ``replayGroups`` entry (only ``task``'s, if given).

    The sources are sorted, as the operator's model lists them.
    """
    text = str(group["tasks"])
    if task is not None and not tasksets.contains(text, task):
        return {}
    out = {}
    for t in tasksets.decode(text) if task is None else [task]:
        own = tasksets.index_of(t)
        ups = tasksets.decode(str(group.get("from") or ""), own)
        logs = ["log:" + s for s in tasksets.decode(str(group.get("logs") or ""), own)]
        out[t] = sorted(ups + logs)
    return out


def read(recovery_dir: Path | None, task: str | None = None) -> Session:
    """The session mounted under ``recovery_dir``, or no session."""
    if recovery_dir is None:
        return Session()
    try:
        return parse(json.loads((recovery_dir / "session.json").read_text()), task)
    except (OSError, ValueError):
        return Session()
