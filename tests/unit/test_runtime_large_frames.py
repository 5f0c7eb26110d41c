"""Large rounds: a frame of ``wire.LARGE`` bytes or more is checked whole when it arrives,
kept encoded, and taken a piece at a time.

A counter flushes every word of a window in one round (tens of thousands of records);
decoded into Python objects that round takes several times its frame's bytes. The
expectations here come from the definitions (Alg. 1's record-by-record merge, the records
as they were sent), never from the runtime's own piece code.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from typing import Any

import msgpack
import pytest

from backstop_runtime import wire
from backstop_runtime.api import Context, Operator, Record, Sink
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.engine import Batch, Counters, Processor


def config(sink: bool = False) -> TaskConfig:
    down = [] if sink else [{"operator": "next", "parallelism": 1, "grouping": "global"}]
    return from_env({
        "BACKSTOP_TOPOLOGY": "t", "BACKSTOP_TASK_ID": "p-0", "BACKSTOP_OPERATOR": "p",
        "BACKSTOP_TASK_INDEX": "0", "BACKSTOP_PARALLELISM": "1",
        "BACKSTOP_UPSTREAM": json.dumps(["a-0", "b-0", "c-0"]), "BACKSTOP_STORE": "/nowhere",
        "BACKSTOP_DOWNSTREAM": json.dumps(down), "BACKSTOP_CONFIG": "{}",
    })  # fmt: skip


def window_results(n: int, tag: str) -> list[Record]:
    """What a counter sends when a window closes: one result per word."""
    return [
        Record({"window": 1000, "word": f"{tag}{i:06d}", "count": i * 7}, f"{tag}{i:06d}", 1010.0)
        for i in range(n)
    ]


async def _read(frame: bytes) -> tuple[dict[str, Any], int]:
    reader = asyncio.StreamReader()
    reader.feed_data(frame)
    reader.feed_eof()
    return await wire.read_sized(reader)


def received(batch: Batch) -> Batch:
    """``batch`` as a consumer gets it: encoded, sent, read back from a stream."""
    msg, _ = asyncio.run(_read(wire.encode(batch.to_msg())))
    return Batch.from_msg(msg)


class Running(Operator):
    """Per record: emits the value with a running count of the records seen so far."""

    def process(self, record: Record, ctx: Context) -> None:
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        ctx.emit([record.value, ctx.state["n"]], key=record.key)


def test_a_large_frame_arrives_encoded_and_decodes_to_what_was_sent() -> None:
    sent = Batch(9, window_results(30_000, "w"), wm=12.0, eos=True, at=3.5, via=("x-0",))
    frame = wire.encode(sent.to_msg())
    assert len(frame) >= wire.LARGE
    msg, size = asyncio.run(_read(frame))
    assert size == len(frame)
    assert all(isinstance(msg[c], wire.Encoded) for c in ("k", "v", "ts"))
    got = Batch.from_msg(msg)
    assert len(got) == 30_000 and got.r == 9 and got.via == ("x-0",)
    assert (got.wm, got.eos, got.at) == (12.0, True, 3.5)
    pieces = list(got.pieces(wire.PIECE))
    assert [len(p) for p in pieces] == [4096] * 7 + [30_000 - 7 * 4096]
    assert [r for p in pieces for r in p.records()] == sent.recs
    assert got == sent  # whole, as the columns were sent


def test_a_large_round_is_processed_as_the_records_merge_one_by_one() -> None:
    """Alg. 1's order over inputs longer and shorter than a piece, some large frames."""
    inputs = [window_results(9_000, "a"), window_results(5, "b"), window_results(30_000, "c")]
    batches = [received(Batch(1, recs, wm=0.0)) for recs in inputs]
    assert [b._encoded is not None for b in batches] == [False, False, True]
    seen: list[int] = []

    class Watching(Running):
        def process_batch(self, batch: Any, ctx: Context) -> None:
            seen.append(len(batch))
            super().process_batch(batch, ctx)

    proc = Processor(config(), Watching({}), Counters(), lambda why, x: None)
    out = proc.step(1, batches)["next-0"].recs
    order = [s[i] for i in range(30_000) for s in inputs if i < len(s)]
    assert out == [Record([r.value, n], r.key, r.ts) for n, r in enumerate(order, 1)]
    assert proc.counters.tuples_in == len(order) and len(seen) > 1
    assert max(seen) <= 3 * wire.PIECE


class Lines:
    """A sink's writer that keeps how many lines it was given, not the lines."""

    def __init__(self) -> None:
        self.n = 0

    def add_many(self, values: list[Any]) -> None:
        self.n += len(values)


def test_a_sink_never_holds_a_large_round_decoded_at_once() -> None:
    """Two counters' window flushes in one round: the sink writes them piece by piece, and
    its memory while it does stays a fraction of the round's decoded size."""
    batches = [received(Batch(1, window_results(40_000, t), wm=0.0)) for t in "ab"]
    writer = Lines()
    proc = Processor(config(sink=True), Sink({}), Counters(), lambda w, x: None, sink=writer)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        held = [msgpack.unpackb(c.body[c.start : c.end]) for b in batches for c in b._encoded]  # type: ignore[union-attr]
        decoded, _ = tracemalloc.get_traced_memory()
        del held
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        proc.step(1, batches)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert writer.n == 80_000
    assert decoded - base > 20 * 2**20  # the round decoded whole: tens of MiB
    assert peak - base < (decoded - base) / 4


def _large(value: Any) -> bytes:
    """The body of a large batch frame whose record 5,000 holds ``value``."""
    recs = window_results(25_000, "w")
    recs[5_000] = Record("@@@@", "k", 1.0)
    body = wire.encode(Batch(1, recs).to_msg())[4:]
    assert len(body) >= wire.LARGE
    return body.replace(msgpack.packb("@@@@"), value, 1)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_large(b"\xa4\xff\xfe\xfd\xfc"), "malformed frame"),  # not UTF-8
        (_large(b"\xd6\x05@@@@"), "malformed frame"),  # an extension type
        (_large(b"\xa4@@@@")[:-100_000], "malformed frame"),  # truncated
        (_large(b"\xa4@@@@") + b"\x01", "malformed frame"),  # extra data
    ],
    ids=["not-utf8", "extension", "truncated", "extra-data"],
)
def test_a_bad_large_frame_is_refused_when_it_arrives(body: bytes, error: str) -> None:
    """Not when the task takes it: a bad frame drops the connection, the task goes on."""
    with pytest.raises(ValueError, match=error):
        wire.decode(body, wire.LARGE)


def test_a_large_batch_whose_columns_disagree_is_refused() -> None:
    msg = Batch(1, window_results(25_000, "w")).to_msg()
    msg["ts"] = msg["ts"][:-1]
    with pytest.raises(ValueError, match="differ in length"):
        Batch.from_msg(wire.decode(wire.encode(msg)[4:], wire.LARGE))
    msg["ts"] = 5
    with pytest.raises(ValueError, match="malformed"):
        Batch.from_msg(wire.decode(wire.encode(msg)[4:], wire.LARGE))
