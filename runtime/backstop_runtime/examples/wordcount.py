"""Word count per 10-second tumbling event-time window (``examples/wordcount.yaml``).

``Tokenize`` splits each line's ``text`` into lowercase words on every non-letter and keys
each word by itself; ``WindowedCount`` counts them per window in keyed state and, when the
watermark passes a window's end, emits one final ``{"window", "word", "count"}`` per word,
sorted, so the output is the same in every run. Records older than a window that was
already emitted are *late*: counted and kept aside in the dead-letter file, not dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from backstop_runtime.api import Context, Operator, Record
from backstop_runtime.config import ConfigError

WORD = re.compile(r"[^\W\d_]+")  # runs of letters (any alphabet): digits, _ and the rest split


def words(text: str) -> list[str]:
    """The lowercase words of ``text``.

    >>> words("It's 2 o'clock -- Déjà vu!")
    ['it', 's', 'o', 'clock', 'déjà', 'vu']
    """
    return WORD.findall(text.lower())


class Tokenize(Operator):
    """``{"text", "ts"}`` → one ``{"word"}`` record per word, keyed by the word."""

    def process(self, record: Record, ctx: Context) -> None:
        text = record.value.get("text") if isinstance(record.value, dict) else None
        if not isinstance(text, str):
            ctx.dead_letter("no text field", record.value)
            return
        for w in words(text):
            ctx.emit({"word": w}, key=w)


class WindowedCount(Operator):
    """Counts words per tumbling window of ``config.windowSeconds`` (default 10)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        size = config.get("windowSeconds", 10)
        if isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
            raise ConfigError(f"config.windowSeconds must be a positive number, got {size!r}")
        self.size = float(size)

    def _window(self, ts: float) -> int:
        return int(math.floor(ts / self.size) * self.size)

    def process(self, record: Record, ctx: Context) -> None:
        if record.ts is None or record.key is None:
            ctx.dead_letter("no event time or key", record.value)
            return
        start = self._window(record.ts)
        if start + self.size <= ctx.watermark:
            ctx.dead_letter("late", {"ts": record.ts, "value": record.value})
            return
        counts = ctx.state.setdefault(str(start), {})
        counts[record.key] = counts.get(record.key, 0) + 1

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        for start in sorted(ctx.state, key=float):
            end = float(start) + self.size
            if end > watermark:
                break
            for word, n in sorted(ctx.state.pop(start).items()):
                ctx.emit({"window": int(start), "word": word, "count": n}, key=word, ts=end)
