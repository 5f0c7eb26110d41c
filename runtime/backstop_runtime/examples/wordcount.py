"""Word count per 10-second tumbling event-time window (``examples/wordcount.yaml``).

``Tokenize`` splits each line's ``text`` into lowercase words on every non-letter and keys
each word by itself; ``WindowedCount`` counts them per window in keyed state and, when the
watermark passes a window's end, emits one final ``{"window", "word", "count"}`` per word,
sorted, so the output is the same in every run. Records older than a window that was
already emitted are *late*: counted and kept aside in the dead-letter file, not dropped.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Mapping
from itertools import chain, repeat
from typing import Any

from backstop_runtime.api import Columns, Combiner, Context, Operator, Record
from backstop_runtime.config import ConfigError

WORD = re.compile(r"[^\W\d_]+")  # runs of letters (any alphabet): digits, _ and the rest split


def words(text: str) -> list[str]:
    """The lowercase words of ``text``.

    >>> words("It's 2 o'clock -- Déjà vu!")
    ['it', 's', 'o', 'clock', 'déjà', 'vu']
    """
    return WORD.findall(text.lower())


class Tokenize(Operator):
    """``{"text", "ts"}`` → one record per word: the word, keyed by itself (a string,
    not an object around it: a word count sends millions of them)."""

    def process(self, record: Record, ctx: Context) -> None:
        text = record.value.get("text") if isinstance(record.value, dict) else None
        if not isinstance(text, str):
            ctx.dead_letter("no text field", record.value)
            return
        for w in words(text):
            ctx.emit(w, key=w)

    def process_batch(self, batch: Columns, ctx: Context) -> None:
        """The words of every line of the round at once, each with its line's time."""
        values, ts = batch.values, batch.ts
        texts: list[Any] = [v.get("text") if type(v) is dict else None for v in values]
        bad = [i for i, t in enumerate(texts) if type(t) is not str]
        if bad:
            for i in bad:
                ctx.dead_letter("no text field", values[i])
            skip = set(bad)
            texts = [t for i, t in enumerate(texts) if i not in skip]
            ts = [t for i, t in enumerate(ts) if i not in skip]
        found = list(map(WORD.findall, map(str.lower, texts)))
        keys: list[str | None] = list(chain.from_iterable(found))
        times = list(chain.from_iterable(map(repeat, ts, map(len, found))))
        ctx.emit_many(keys, keys, times)


def window_of(ts: float, size: float) -> int:
    """The start of the tumbling window of ``size`` seconds that holds ``ts``.

    >>> window_of(19.99, 10.0), window_of(-0.5, 10.0)
    (10, -10)
    """
    return int(math.floor(ts / size) * size)


def window_size(config: Mapping[str, Any]) -> float:
    """``config.windowSeconds`` (default 10), checked."""
    size = config.get("windowSeconds", 10)
    if isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
        raise ConfigError(f"config.windowSeconds must be a positive number, got {size!r}")
    return float(size)


class SumWords(Combiner):
    """Tokenize's combiner: one ``{"word", "n"}`` per word and window of a round.

    Counts the records of each (key, tumbling window of ``config.windowSeconds``) in the
    round, in the order each first appears, with the event time of the first record of its
    window in the round; records without a key or time are passed on as they are, after
    the sums (the counter keeps them aside). The tokenizer's ``windowSeconds`` must be the
    counter's, so that no sum spans two of its windows.

    >>> keys, values, ts = SumWords({}).combine(["a", "b", "a", "a"], [{}] * 4, [1, 2, 3, 12])
    >>> keys, ts
    (['a', 'b', 'a'], [1, 1, 12])
    >>> values
    [{'word': 'a', 'n': 2}, {'word': 'b', 'n': 1}, {'word': 'a', 'n': 1}]
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.size = window_size(config)

    def combine(
        self, keys: list[str | None], values: list[Any], ts: list[float | None]
    ) -> tuple[list[str | None], list[Any], list[float | None]]:
        size = self.size
        distinct: dict[Any, None] = dict.fromkeys(ts)  # in the order of first appearance
        if None in keys or None in distinct:
            return self._apart(keys, values, ts)
        window: dict[Any, int] = {}
        first: dict[int, Any] = {}  # window -> the first time in it
        for t in distinct:
            w = window[t] = int(math.floor(t / size) * size)
            first.setdefault(w, t)
        sums = Counter(zip(keys, map(window.__getitem__, ts), strict=True))
        return (
            [k for k, _ in sums],
            [{"word": k, "n": n} for (k, _), n in sums.items()],
            [first[w] for _, w in sums],
        )

    def _apart(
        self, keys: list[str | None], values: list[Any], ts: list[float | None]
    ) -> tuple[list[str | None], list[Any], list[float | None]]:
        """:meth:`combine` the records with a key and a time; pass the rest on after."""
        whole = [
            i
            for i, (k, t) in enumerate(zip(keys, ts, strict=True))
            if k is not None and t is not None
        ]
        rest = sorted(set(range(len(keys))).difference(whole))
        k, v, t = self.combine(
            [keys[i] for i in whole], [values[i] for i in whole], [ts[i] for i in whole]
        )
        return (
            k + [keys[i] for i in rest],
            v + [values[i] for i in rest],
            t + [ts[i] for i in rest],
        )


class WindowedCount(Operator):
    """Counts words per tumbling window of ``config.windowSeconds`` (default 10); a
    record's ``n`` (a combined record, :class:`SumWords`) counts as that many words."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.size = window_size(config)
        self._starts: list[float] = []
        """The open windows' starts, a heap: the watermark closes the earliest first, and
        with many windows open (a source whose event time lags another's) sorting them
        all at every watermark would cost more than the counting."""
        self._of: dict[str, Any] | None = None
        """The state ``_starts`` lists (a restore replaces the state: list it again)."""

    def _window(self, ts: float) -> int:
        return window_of(ts, self.size)

    def process(self, record: Record, ctx: Context) -> None:
        self._count(record.value, record.key, record.ts, ctx)

    def process_batch(self, batch: Columns, ctx: Context) -> None:
        for v, k, ts in zip(batch.values, batch.keys, batch.ts, strict=True):
            self._count(v, k, ts, ctx)

    def _count(self, value: Any, key: str | None, ts: float | None, ctx: Context) -> None:
        if ts is None or key is None:
            ctx.dead_letter("no event time or key", value)
            return
        start = self._window(ts)
        if start + self.size <= ctx.watermark:
            ctx.dead_letter("late", {"ts": ts, "value": value})
            return
        state = self._open(ctx)
        counts = state.get(str(start))
        if counts is None:
            counts = state[str(start)] = {}
            heapq.heappush(self._starts, float(start))
        n = value.get("n", 1) if isinstance(value, dict) else 1
        counts[key] = counts.get(key, 0) + n

    def _open(self, ctx: Context) -> dict[str, Any]:
        """The state, its windows' starts in ``_starts``."""
        if self._of is not ctx.state:
            self._starts = sorted(map(float, ctx.state))  # a sorted list is a heap
            self._of = ctx.state
        return ctx.state

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        state, starts = self._open(ctx), self._starts
        while starts and starts[0] + self.size <= watermark:
            start = heapq.heappop(starts)
            end = start + self.size
            for word, n in sorted(state.pop(str(int(start))).items()):
                ctx.emit({"window": int(start), "word": word, "count": n}, key=word, ts=end)
