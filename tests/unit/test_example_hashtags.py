"""The sliding-window hashtag count of Fig. 17 against a count written out per window."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from backstop_runtime.api import Context, Record
from backstop_runtime.examples.hashtags import Parser, SlidingCount

TAGS = ["a", "b", "c", "d"]


def context(out: list[Any]) -> Context:
    return Context("t-0", 0, 1, lambda rec: out.append(rec), lambda *_: None)


def reference(events: list[tuple[float, str]], size: float, slide: float, top: int) -> list[Any]:
    """Every window ``[end - size, end)`` with an end on the slide grid, from the first one
    holding an event to the last, its top tags by count then name."""
    first = min(math.floor(ts / slide) * slide for ts, _ in events) + slide
    last = max(math.floor(ts / slide) * slide for ts, _ in events) + size
    out, end = [], first
    while end <= last:
        counts = Counter(tag for ts, tag in events if end - size <= ts < end)
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        out.append({"end": end, "top": [list(kv) for kv in best]})
        end += slide
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 400).map(lambda x: x / 10), st.sampled_from(TAGS)),
        min_size=1,
        max_size=60,
    ),
    st.lists(st.integers(0, 50), max_size=6),
    st.booleans(),
)
def test_windows_match_the_reference(
    events: list[tuple[float, str]], marks: list[int], as_they_go: bool
) -> None:
    events = sorted(events)
    op = SlidingCount({"windowSeconds": 10, "slideSeconds": 2, "top": 2})
    out: list[Any] = []
    ctx = context(out)
    marks = sorted(m for m in marks if m <= events[0][0])  # watermarks never pass an event
    for m in marks:
        op.on_watermark(float(m), ctx)
    for i, (ts, tag) in enumerate(events):
        op.process(Record({"tag": tag}, tag, ts), ctx)
        if as_they_go and i + 1 < len(events):  # no later event is older than the next
            op.on_watermark(events[i + 1][0], ctx)
    ctx.watermark = math.inf
    op.on_watermark(math.inf, ctx)
    got = [{"end": r.value["end"], "top": [list(kv) for kv in r.value["top"]]} for r in out]
    assert got == reference(events, 10, 2, 2)
    assert not ctx.state  # every pane dropped once its windows are out


def test_the_parser_keys_each_hashtag() -> None:
    out: list[Any] = []
    Parser({}).process(Record({"text": "Go #AI and #space #ai"}), context(out))
    assert [(r.key, r.value) for r in out] == [
        ("ai", {"tag": "ai"}),
        ("space", {"tag": "space"}),
        ("ai", {"tag": "ai"}),
    ]
