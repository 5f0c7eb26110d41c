"""Sentiment per hot topic (``examples/twitter-sentiment.yaml``).

The topology is the Twitter Sentiment application of Li et al. *Minimum Backups for
Stream Processing With Recovery Latency Guarantees*, Sec. V-B, Fig. 8(d).

``source -> hot-topics -> merge -> trending`` finds the most used hashtags per window;
``source + merge -> filter -> sentiment -> sink`` scores the tweets about the hot topics with
VADER (``vaderSentiment``, which ships its lexicon) and averages the score per window and
topic. Every step is deterministic given its input order, as the runtime requires: a
window's hot topics reach the filter after the window closed, so the filter always uses the
newest hot set it has, the same in every replay.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from backstop_runtime.api import Context, Operator, Record, Sink
from backstop_runtime.config import ConfigError

TAG = re.compile(r"#(\w+)")


def _window_size(config: Mapping[str, Any]) -> float:
    size = config.get("windowSeconds", 10)
    if isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
        raise ConfigError(f"config.windowSeconds must be a positive number, got {size!r}")
    return float(size)


class _Windowed(Operator):
    """Keyed state per window start; windows are emitted in order once the watermark passes."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.size = _window_size(config)
        self.top = int(config.get("top", 3))

    def window(self, ts: float) -> int:
        return int(math.floor(ts / self.size) * self.size)

    def closed(self, watermark: float, ctx: Context) -> list[tuple[int, Any]]:
        out = []
        for start in sorted(ctx.state, key=float):
            if float(start) + self.size > watermark:
                break
            out.append((int(start), ctx.state.pop(start)))
        return out


class HotTopics(_Windowed):
    """Counts hashtags per window; emits this task's ``top`` (×3) candidates per window."""

    def process(self, record: Record, ctx: Context) -> None:
        text = record.value.get("text") if isinstance(record.value, dict) else None
        if not isinstance(text, str) or record.ts is None:
            ctx.dead_letter("no text or event time", record.value)
            return
        counts = ctx.state.setdefault(str(self.window(record.ts)), {})
        for tag in TAG.findall(text.lower()):
            counts[tag] = counts.get(tag, 0) + 1

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        for start, counts in self.closed(watermark, ctx):
            best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top * 3]
            ctx.emit({"window": start, "counts": best}, ts=start + self.size)


class MergeTopics(_Windowed):
    """Adds the partial counts of every hot-topics task; emits the ``top`` per window."""

    def process(self, record: Record, ctx: Context) -> None:
        counts = ctx.state.setdefault(str(record.value["window"]), {})
        for tag, n in record.value["counts"]:
            counts[tag] = counts.get(tag, 0) + n

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        for start, counts in self.closed(watermark, ctx):
            best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top]
            ctx.emit({"window": start, "top": [t for t, _ in best]}, ts=start + self.size)


class FilterHot(Operator):
    """Passes the tweets that mention a topic of the newest hot set, keyed by topic."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.hot: list[str] = []

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        if isinstance(value, dict) and "top" in value:  # from merge
            self.hot = list(value["top"])
            return
        text = value.get("text") if isinstance(value, dict) else None
        if not isinstance(text, str):
            ctx.dead_letter("no text", value)
            return
        tags = set(TAG.findall(text.lower()))
        for topic in self.hot:
            if topic in tags:
                ctx.emit({"id": value.get("id"), "topic": topic, "text": text}, key=topic)

    def snapshot(self) -> Any:
        return self.hot

    def restore(self, state: Any) -> None:
        self.hot = list(state or [])


class Score(Operator):
    """VADER's compound score of each tweet (-1 … 1)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        try:
            from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
        except ImportError:
            raise ConfigError(
                "config.function Score needs the package vaderSentiment (runtime/requirements.txt)"
            ) from None
        self.analyzer = SentimentIntensityAnalyzer()

    def process(self, record: Record, ctx: Context) -> None:
        score = self.analyzer.polarity_scores(record.value["text"])["compound"]
        ctx.emit({"topic": record.value["topic"], "score": score}, key=record.key)


class TopicSentiment(Sink):
    """Writes ``{"window", "topic", "tweets", "sentiment"}`` once per window and topic."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.size = _window_size(config)

    def process(self, record: Record, ctx: Context) -> None:
        if record.ts is None:
            ctx.dead_letter("no event time", record.value)
            return
        start = str(int(math.floor(record.ts / self.size) * self.size))
        n, total = ctx.state.setdefault(start, {}).get(record.value["topic"], (0, 0.0))
        ctx.state[start][record.value["topic"]] = (n + 1, total + record.value["score"])

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        for start in sorted(ctx.state, key=float):
            if float(start) + self.size > watermark:
                break
            for topic, (n, total) in sorted(ctx.state.pop(start).items()):
                ctx.emit(
                    {
                        "window": int(start),
                        "topic": topic,
                        "tweets": n,
                        "sentiment": round(total / n, 4),
                    }
                )
