"""The batch data path: the batch operator API, columnar routing, frames and the combiner.

Every expectation is computed here, a record at a time and from the definitions (Alg. 1's
round-robin merge, CRC-32 of the key, ``(index + r + n) mod p``), never by the runtime's
own batch code.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import struct
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from backstop_runtime import serving, wire
from backstop_runtime.api import Columns, Context, Operator, Record
from backstop_runtime.config import GROUPINGS, TaskConfig, from_env
from backstop_runtime.engine import Batch, Counters, Processor
from backstop_runtime.examples.wordcount import SumWords, Tokenize, WindowedCount, words
from backstop_runtime.routing import Partitioner
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology


def config(
    grouping: str = "key", parallelism: int = 3, index: int = 0, conf: dict[str, str] | None = None
) -> TaskConfig:
    down = [{"operator": "next", "parallelism": parallelism, "grouping": grouping}]
    return from_env({
        "BACKSTOP_TOPOLOGY": "t", "BACKSTOP_TASK_ID": f"p-{index}", "BACKSTOP_OPERATOR": "p",
        "BACKSTOP_TASK_INDEX": str(index), "BACKSTOP_PARALLELISM": str(index + 1),
        "BACKSTOP_UPSTREAM": json.dumps(["a-0", "b-0", "c-0"]), "BACKSTOP_STORE": "/nowhere",
        "BACKSTOP_DOWNSTREAM": json.dumps(down), "BACKSTOP_CONFIG": json.dumps(conf or {}),
    })  # fmt: skip


keys = st.one_of(st.none(), st.text(max_size=6))
times = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=32))
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False),
        st.text(max_size=8),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
records = st.lists(st.builds(Record, json_values, keys, times), max_size=12)


# ---- the batch API ---------------------------------------------------------------------


class Echo(Operator):
    """A per-record operator: emits each word of a text twice (the second with its own
    key and time), keeps a running total in state, and sets aside what is no text."""

    def process(self, record: Record, ctx: Context) -> None:
        if not isinstance(record.value, str):
            ctx.dead_letter("not text", record.value)
            return
        ctx.state["seen"] = ctx.state.get("seen", 0) + 1
        for w in record.value.split():
            ctx.emit(w, key=w)
            ctx.emit({"w": w, "n": ctx.state["seen"]}, key=record.key, ts=1.5)

    def on_watermark(self, watermark: float, ctx: Context) -> None:
        ctx.emit(f"wm {watermark}", key="wm")


def by_hand(
    inputs: list[list[Record]], wm: float
) -> tuple[list[Record], list[Any], dict[str, Any]]:
    """Echo over the inputs merged record by record in Alg. 1's order (the i-th record
    of every input in input order, for i = 0, 1, ...), as a per-record runtime runs it."""
    out: list[Record] = []
    dead: list[Any] = []
    ctx = Context("p-0", 0, 1, out.append, lambda why, x: dead.append(x))
    op = Echo({})
    for i in range(max((len(s) for s in inputs), default=0)):
        for s in inputs:
            if i < len(s):
                ctx._current_ts = s[i].ts
                op.process(s[i], ctx)
    ctx._current_ts = None
    op.on_watermark(wm, ctx)
    return out, dead, ctx.state


texts = st.lists(
    st.builds(Record, st.one_of(st.text("ab ", max_size=6), st.integers()), keys, times),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=1, max_size=3))
def test_the_default_batch_api_is_per_record_processing(inputs: list[list[Record]]) -> None:
    dead: list[Any] = []
    proc = Processor(config("global", 1), Echo({}), Counters(), lambda why, x: dead.append(x))
    r = 1
    outs = proc.step(r, [Batch(r, recs, wm=5.0) for recs in inputs])
    want, want_dead, want_state = by_hand(inputs, 5.0)
    assert outs["next-0"].recs == want
    assert dead == want_dead and proc.ctx.state == want_state
    assert proc.counters.tuples_in == sum(map(len, inputs))
    assert proc.counters.tuples_out == len(want)


def test_emit_many_emits_as_emit_does() -> None:
    out: list[Record] = []
    ctx = Context("p-0", 0, 1, out.append, lambda why, x: None)
    ctx._current_ts = 7.0
    ctx.emit_many(["a", "b"], ["k", None])
    ctx.emit_many(["c"], ts=[1.0])
    assert out == [Record("a", "k", 7.0), Record("b", None, 7.0), Record("c", None, 1.0)]
    with pytest.raises(ValueError, match="2 values, 1 keys"):
        ctx.emit_many(["a", "b"], ["k"])


# ---- routing ------------------------------------------------------------------------


def reference_route(cfg: TaskConfig, r: int, recs: list[Record]) -> dict[str, list[Record]]:
    """Where each record goes, one at a time, from the groupings' definitions."""
    (d,) = cfg.downstream
    p = d.parallelism
    out: dict[str, list[Record]] = {t: [] for t, _ in cfg.consumers()}
    for n, rec in enumerate(recs):
        if d.grouping == "forward":
            targets = [cfg.index]
        elif d.grouping == "global":
            targets = [0]
        elif d.grouping == "broadcast":
            targets = list(range(p))
        elif d.grouping == "rebalance":
            targets = [(cfg.index + r + n) % p]
        else:
            text = rec.key if rec.key is not None else json.dumps(rec.value, sort_keys=True)
            targets = [zlib.crc32(text.encode("utf-8")) % p]
        for t in targets:
            out[f"next-{t}"].append(rec)
    return out


@settings(max_examples=300, deadline=None)
@example("rebalance", 3, 1, 4, [Record(i, None) for i in range(5)], 1)  # dealt across calls
@example("key", 2, 0, 1, [Record({"b": 1, "a": [2]}), Record(0, "é")], 0)  # no key: the value
@given(
    st.sampled_from(GROUPINGS),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(1, 50),
    records,
    st.integers(0, 12),
)
def test_columnar_routing_is_per_record_routing(
    grouping: str, p: int, index: int, r: int, recs: list[Record], cut: int
) -> None:
    cfg = config(grouping, p, index)
    part = Partitioner(cfg)
    part.begin(r)
    first, rest = part.route_batch(Columns.of(recs[:cut])), part.route_batch(Columns.of(recs[cut:]))
    got = {t: first[t].records() + rest[t].records() for t in first}
    assert got == reference_route(cfg, r, recs)


# ---- frames -------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    records,
    st.sampled_from([-math.inf, math.inf, 0.0, 12.25]),
    st.booleans(),
    st.lists(st.text(max_size=5), max_size=2),
)
def test_a_batch_frame_round_trips(
    recs: list[Record], wm: float, eos: bool, via: list[str]
) -> None:
    batch = Batch(7, recs, wm, eos, 1234.5, tuple(via))
    frame = wire.encode(batch.to_msg())
    (n,) = struct.unpack(">I", frame[:4])
    assert n == len(frame) - 4
    back = Batch.from_msg(wire.decode(frame[4:]))
    assert back == batch and back.recs == recs


def test_control_messages_round_trip() -> None:
    for msg in (
        {"t": "sub", "consumer": "count-0", "epoch": 3, "from": 5, "to": None},
        {"t": "end"},
        {"t": "hb"},
        {"t": "err", "msg": "epoch 2 of count-0 is superseded", "fenced": True},
        {"t": "replay", "upto": 9, "via": ["tokenize-0"]},
    ):
        assert wire.decode(wire.encode(msg)[4:]) == msg


async def read_frame(data: bytes) -> dict[str, Any]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await wire.read(reader)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (struct.pack(">I", wire.MAX_FRAME + 1), "exceeds"),
        (struct.pack(">I", 3) + b"\xc1\x00\x00", "malformed frame"),  # 0xc1: never used
        (struct.pack(">I", 2) + b"\x92\x01", "malformed frame"),  # a truncated list
        (struct.pack(">I", 1) + b"\x07", "malformed frame"),  # not a map
        (struct.pack(">I", 3) + b"\xd4\x05\x00", "malformed frame"),  # an extension type
        (struct.pack(">I", 5) + b"\xdd\xff\xff\xff\xff", "malformed frame"),  # 4G items
    ],
    ids=["too-long", "bad-byte", "truncated", "not-a-map", "extension", "huge-list"],
)
def test_a_bad_frame_is_refused_with_a_clear_error(data: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        asyncio.run(read_frame(data))


def test_a_batch_whose_columns_disagree_is_refused() -> None:
    msg = {**Batch(1, [Record(1, "a", 0.0)]).to_msg(), "ts": []}
    with pytest.raises(ValueError, match="differ in length"):
        Batch.from_msg(wire.decode(wire.encode(msg)[4:]))


def test_a_task_serves_on_after_a_bad_frame() -> None:
    """A connection that sends garbage is dropped; the next one is answered."""
    stub = SimpleNamespace(channels={}, followers={}, cfg=SimpleNamespace(task="p-0"))

    async def main() -> list[dict[str, Any]]:
        server = await asyncio.start_server(functools.partial(serving.serve, stub), "127.0.0.1")
        port = server.sockets[0].getsockname()[1]
        answers = []
        try:
            for frame in (struct.pack(">I", 4) + b"\xc1\xc1\xc1\xc1", None):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                sub = {"t": "sub", "consumer": "x-0", "epoch": 0, "from": 1, "to": None}
                writer.write(frame or wire.encode(sub))
                try:
                    answers.append(await asyncio.wait_for(wire.read(reader), 5))
                except asyncio.IncompleteReadError:
                    answers.append({"t": "closed"})
                writer.close()
        finally:
            server.close()
        return answers

    closed, answer = asyncio.run(main())
    assert closed == {"t": "closed"}
    assert answer["t"] == "err" and "x-0 is not a consumer of p-0" in answer["msg"]


# ---- the combiner -------------------------------------------------------------------


def test_the_combined_word_count_counts_as_the_plain_one() -> None:
    """Tokenize with and without SumWords, then WindowedCount: the same final counts, and
    the combined round carries fewer records."""
    lines = ["Alpha beta alpha", "beta", "x1y alpha", "", 3, "GAMMA gamma"]
    recs = [
        Record({"text": t} if isinstance(t, str) else t, None, 10.0 + i * 4)
        for i, t in enumerate(lines)
    ]
    finals = []
    sent = []
    for conf in ({}, {"combiner": "backstop_runtime.examples.wordcount:SumWords"}):
        tok = Processor(config("key", 2, conf=conf), Tokenize({}), Counters(), lambda w, x: None)
        mid = tok.step(1, [Batch(1, recs, wm=0.0)])
        sent.append(sum(len(b.cols) for b in mid.values()))
        emitted: list[Record] = []
        for _, b in sorted(mid.items()):
            count = Processor(config("global", 1), WindowedCount({}), Counters(), lambda w, x: None)
            emitted += count.step(1, [b])["next-0"].recs
            emitted += count.step(2, [Batch.ended(2)])["next-0"].recs
        finals.append(
            sorted((r.value["window"], r.value["word"], r.value["count"]) for r in emitted)
        )
    want: Counter[tuple[int, str]] = Counter()
    for i, t in enumerate(lines):
        if isinstance(t, str):
            want.update((10 * math.floor((10.0 + i * 4) / 10), w) for w in words(t))
    assert finals[0] == finals[1] == sorted((w, k, n) for (w, k), n in want.items())
    assert sent[1] < sent[0]


def test_sum_words_passes_records_without_key_or_time_on() -> None:
    keys, values, ts = SumWords({}).combine(
        ["a", None, "a", "a"], [{}, {"x": 1}, {}, {}], [1.0, 2.0, None, 3.0]
    )
    assert keys == ["a", None, "a"] and ts == [1.0, 2.0, None]
    assert values == [{"word": "a", "n": 2}, {"x": 1}, {}]  # the last two as they were


@pytest.mark.timeout(240)
def test_a_combined_round_replayed_after_a_kill_is_exact(tmp_path: Path) -> None:
    """The word count as processes, with its combiner: the tokenizer and the counter it
    feeds are SIGKILLed mid-stream, after the tokenizer sent rounds the counter had not
    checkpointed (the tokenizer, without a backup, regenerates them through its
    combiner). The output is the input's counts, each line once, and the tokenizers sent
    fewer records than there are words."""
    inp = tmp_path / "in"
    write_input(inp, files=2, per_file=4000, seed=11)  # about 100 rounds per source
    spec = wordcount_spec(inp, tmp_path / "out", rate=1500.0, batch=40)
    topo = LocalTopology("wc", spec, tmp_path / "store")
    topo.start_all()
    try:
        # round 30: after count's checkpoint of round 20 (every 2 s: 20 rounds), so the
        # rounds since were sent and not checkpointed; tokenize's newest is round 30 or less
        topo.wait("progress", lambda: topo.status("count-0").get("round", 0) >= 30, 120)
        assert not topo.status("sink-0").get("eos"), "the kill came too late"
        for t in ("tokenize-0", "count-0"):
            topo.kill(t)
        for t in ("tokenize-0", "count-0"):
            topo.start(t)
        topo.wait("the end", lambda: topo.status("sink-0").get("eos") is True, 180)
        assert topo.crashed() == {}
        # the counter's lost rounds were recomputed from the sources' logs, so through
        # the tokenizers' combiner again (no task keeps a backup here)
        replayed = topo.status("count-0").get("replaySources") or []
        assert replayed and all(s.startswith("log:source-") for s in replayed), replayed
    finally:
        topo.stop_all()
    lines = output_lines(tmp_path / "out")
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(inp))
    total = sum(expected_counts(inp).values())
    sent = sum(row["tuples_out"] for t in ("tokenize-0", "tokenize-1") for row in topo.metrics(t))
    assert 0 < sent < total / 2


class TokenizeByRecord(Tokenize):
    """Tokenize with the default batch API: its ``process`` called per record."""

    process_batch = Operator.process_batch


lines_in = st.lists(
    st.builds(
        Record,
        st.one_of(st.builds(dict, text=st.text(max_size=12)), st.integers(), st.just({"x": 1})),
        st.none(),
        times,
    ),
    max_size=8,
)


def keep(into: list[Any], why: str, payload: Any) -> None:
    into.append((why, payload))


@settings(max_examples=100, deadline=None)
@given(lines_in)
def test_tokenize_by_batch_is_tokenize_by_record(recs: list[Record]) -> None:
    got = []
    for op in (Tokenize({}), TokenizeByRecord({})):
        dead: list[Any] = []
        proc = Processor(config("global", 1), op, Counters(), functools.partial(keep, dead))
        got.append((proc.step(1, [Batch(1, recs)])["next-0"].recs, dead))
    assert got[0] == got[1]


# ---- the counter's windows ------------------------------------------------------------

count_rounds = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 200)), max_size=8),
        st.floats(0, 220),
    ),
    min_size=1,
    max_size=12,
)


def windows_by_hand(rounds: list[tuple[list[tuple[str, float]], float]]) -> list[tuple[Any, ...]]:
    """What a 10 s tumbling count emits, round by round: the windows the watermark
    passed, oldest first and words sorted; records of a window already passed are late."""
    wm, open_, out = -math.inf, Counter[tuple[int, str]](), []
    for recs, mark in rounds:
        for word, ts in recs:
            w = int(ts // 10) * 10
            if w + 10 > wm:
                open_[(w, word)] += 1
        wm = max(wm, mark)
        for w, word in sorted(k for k in open_ if k[0] + 10 <= wm):
            out.append((w, word, open_.pop((w, word))))
    return out


@settings(max_examples=80, deadline=None)
@given(count_rounds, st.integers(0, 12), st.integers(0, 12), st.booleans())
def test_the_counter_closes_windows_in_order_across_a_restore(
    rounds: list[tuple[list[tuple[str, float]], float]], at: int, gone: int, fresh: bool
) -> None:
    """Many windows open at once, the watermark closing several per round; after round
    ``at + gone`` the state goes back to round ``at``'s checkpoint (as JSON), in a new
    copy or in the same one (a replay), and the rounds after ``at`` run again: their
    first output is discarded, as the runtime discards output after a restored round."""

    def proc() -> Processor:
        return Processor(config("global", 1), WindowedCount({}), Counters(), lambda w, x: None)

    def step(p: Processor, r: int) -> list[tuple[Any, ...]]:
        recs, mark = rounds[r - 1]
        out = p.step(r, [Batch(r, [Record(w, w, ts) for w, ts in recs], wm=mark)])
        return [(x.value["window"], x.value["word"], x.value["count"]) for x in out["next-0"].recs]

    p, got, ckpt = proc(), [], json.loads(json.dumps(proc().snapshot()))
    at = min(at, len(rounds))
    for r in range(1, min(at + gone, len(rounds)) + 1):
        out = step(p, r)
        if r <= at:
            got += out
        if r == at:
            ckpt = json.loads(json.dumps(p.snapshot()))
    p = proc() if fresh else p
    p.restore(ckpt)
    for r in range(at + 1, len(rounds) + 1):
        got += step(p, r)
    assert got == windows_by_hand(rounds)
