"""Hashtag frequency over two sliding windows: the topology of Fig. 17 of *Incremental
Recovery in Distributed Stream Processing Systems* (Appendix C).

``source -> parser -> win1, win2``: ``Parser`` emits each hashtag of a tweet keyed by the
tag; ``SlidingCount`` counts the tags over a sliding event-time window of
``config.windowSeconds`` every ``config.slideSeconds`` (panes of one slide kept in keyed
state) and, as the watermark passes a window's end, emits its ``top`` tags. The seed uses
this topology to measure what checkpointing and order-preserving processing cost in normal
processing (``bench/bench_runtime_overheads.py``).

``TopMerge`` builds the seed's Fig. 9 on top (``bench/bench_runtime_fig9.py``): fifteen
queries, each an operator that keeps the newest ``top`` of every window stream it
subscribes to and emits their merged ``top`` on each update. A window or merge named by
``config.label`` says so in its output (``src``), which is how a merge downstream tells
its inputs apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from backstop_runtime.api import Context, Operator, Record, Sink
from backstop_runtime.config import ConfigError

TAG = re.compile(r"#(\w+)")


def _seconds(config: Mapping[str, Any], name: str, default: float) -> float:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"config.{name} must be a positive number, got {value!r}")
    return float(value)


class Parser(Operator):
    """``{"text"}`` → one ``{"tag"}`` record per hashtag, keyed by the tag."""

    def process(self, record: Record, ctx: Context) -> None:
        text = record.value.get("text") if isinstance(record.value, dict) else None
        if not isinstance(text, str):
            ctx.dead_letter("no text field", record.value)
            return
        for tag in TAG.findall(text.lower()):
            ctx.emit({"tag": tag}, key=tag)


def window_ends(last: float, watermark: float, slide: float) -> list[float]:
    """The ends of the windows closed after ``last`` and by ``watermark`` (multiples of
    ``slide``).

    >>> window_ends(10.0, 17.5, 2.0)
    [12.0, 14.0, 16.0]
    """
    first = math.floor(last / slide) * slide + slide
    ends = []
    end = first
    while end <= watermark:
        ends.append(end)
        end += slide
    return ends


class SlidingCount(Operator):
    """Counts per tag over ``windowSeconds`` (default 10) every ``slideSeconds`` (default 2);
    emits ``{"end", "top": [[tag, count], …]}`` per closed window, the ``top`` (default 3)
    tags by count, then by name."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.size = _seconds(config, "windowSeconds", 10.0)
        self.slide = _seconds(config, "slideSeconds", 2.0)
        if self.size % self.slide:
            raise ConfigError("config.windowSeconds must be a multiple of config.slideSeconds")
        self.top = int(config.get("top", 3))
        self.label = config.get("label")
        self.last = -math.inf  # the end of the newest window emitted

    def process(self, record: Record, ctx: Context) -> None:
        if record.ts is None or record.key is None:
            ctx.dead_letter("no event time or key", record.value)
            return
        pane = math.floor(record.ts / self.slide) * self.slide
        if pane + self.size <= self.last:
            ctx.dead_letter("late", {"ts": record.ts, "value": record.value})
            return
        counts = ctx.state.setdefault(str(pane), {})
        counts[record.key] = counts.get(record.key, 0) + 1

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        if not ctx.state:
            return
        panes = sorted(float(p) for p in ctx.state)
        last = self.last if self.last > -math.inf else panes[0]
        limit = min(watermark, panes[-1] + self.size)  # nothing after the last pane's windows
        for end in window_ends(last, limit, self.slide):
            total: dict[str, int] = {}
            for p in panes:
                if end - self.size <= p < end:
                    for tag, n in ctx.state[_key(p)].items():
                        total[tag] = total.get(tag, 0) + n
            best = _top(total, self.top)
            out: dict[str, Any] = {"end": end, "top": best}
            if self.label is not None:
                out["src"] = self.label
            ctx.emit(out, ts=end)
            self.last = end
        for p in panes:  # panes no open window needs
            if p + self.size <= self.last:
                del ctx.state[_key(p)]

    def snapshot(self) -> Any:
        return self.last

    def restore(self, state: Any) -> None:
        self.last = -math.inf if state is None else float(state)


class TopMerge(Operator):
    """The seed's Fig. 9 queries: the newest ``top`` (a list of ``[tag, count]``) of each
    input stream, by its ``src``, kept in state; on each update, ``{"end", "src": label,
    "top"}`` of their merged counts, the ``top`` (default 3) tags by count, then by name.

    >>> from backstop_runtime.api import Context
    >>> out = []
    >>> ctx = Context("q-0", 0, 1, lambda r: out.append(r.value), lambda r, p: None)
    >>> op = TopMerge({"label": "q", "top": 2})
    >>> op.process(Record({"end": 4.0, "src": "a", "top": [["x", 3], ["y", 1]]}, None, 4.0), ctx)
    >>> op.process(Record({"end": 4.0, "src": "b", "top": [["y", 5]]}, None, 4.0), ctx)
    >>> out[-1]
    {'end': 4.0, 'src': 'q', 'top': [['y', 6], ['x', 3]]}
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.label = str(config.get("label", ""))
        self.top = int(config.get("top", 3))

    def process(self, record: Record, ctx: Context) -> None:
        value = record.value
        if not isinstance(value, dict) or not isinstance(value.get("top"), list):
            ctx.dead_letter("no top list", value)
            return
        ctx.state[str(value.get("src", ""))] = value["top"]
        total: dict[str, int] = {}
        for top in ctx.state.values():
            for tag, n in top:
                total[tag] = total.get(tag, 0) + int(n)
        best = _top(total, self.top)
        out = {"end": value.get("end"), "src": self.label, "top": [list(kv) for kv in best]}
        ctx.emit(out, ts=record.ts)


class TopMergeSink(TopMerge, Sink):
    """A :class:`TopMerge` at the end of the topology: its output leaves it as JSON lines
    under ``config.path`` (the runtime needs a sink where nothing consumes)."""


def _top(counts: Mapping[str, int], n: int) -> list[tuple[str, int]]:
    """The ``n`` tags with the highest counts, then by name (a fixed order: a replay emits
    the same lists).

    >>> _top({"b": 2, "a": 2, "c": 5}, 2)
    [('c', 5), ('a', 2)]
    """
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def _key(pane: float) -> str:
    """The state key of a pane (as :meth:`SlidingCount.process` wrote it)."""
    return str(pane)
