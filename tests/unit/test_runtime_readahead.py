"""A consumer's read-ahead: decoded batches per upstream, bounded by their frames' bytes.

A fast producer must not fill a slow consumer's memory: the pump that reads an upstream
stops once the batches waiting in its queue add up to ``BACKSTOP_BUFFER_BYTES`` of frames
(counted by the frame each batch came in), and goes on as the task takes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from backstop_runtime import inputs, wire
from backstop_runtime.buffers import ByteQueue, Caps
from backstop_runtime.engine import Batch
from backstop_runtime.task import Task


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def _settle() -> None:
    """Let every task that is ready run until it waits."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_queue_admits_by_bytes_and_resumes_as_it_drains() -> None:
    async def go() -> None:
        q: ByteQueue[str] = ByteQueue(Caps(rounds=1000, nbytes=100))
        await q.put("a", 50)
        await q.put("b", 50)
        third = asyncio.ensure_future(q.put("c", 1))
        await _settle()
        assert not third.done() and q.nbytes == 100  # full in bytes, far below 1000 items
        assert await q.get() == "a"
        await asyncio.wait_for(third, 5)
        assert [await q.get(), await q.get()] == ["b", "c"] and q.nbytes == 0

    run(go())


def test_a_single_item_larger_than_the_bound_passes_an_empty_queue() -> None:
    async def go() -> None:
        q: ByteQueue[str] = ByteQueue(Caps(rounds=1000, nbytes=100))
        await asyncio.wait_for(q.put("big", 10_000), 5)
        small = asyncio.ensure_future(q.put("small", 1))
        await _settle()
        assert not small.done()
        assert await q.get() == "big"
        await asyncio.wait_for(small, 5)

    run(go())


def test_the_rounds_still_cap_a_queue_of_small_items() -> None:
    async def go() -> None:
        q: ByteQueue[int] = ByteQueue(Caps(rounds=2, nbytes=1_000_000))
        await q.put(1, 1)
        await q.put(2, 1)
        third = asyncio.ensure_future(q.put(3, 1))
        await _settle()
        assert not third.done()
        await q.get()
        await asyncio.wait_for(third, 5)

    run(go())


def test_the_bounds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKSTOP_BUFFER_BYTES", "4096")
    monkeypatch.setenv("BACKSTOP_READAHEAD_BYTES", "512")
    monkeypatch.setenv("BACKSTOP_BUFFER_ROUNDS", "7")
    assert Caps.from_env() == Caps(rounds=7, nbytes=4096)
    assert Caps.from_env(readahead=True) == Caps(rounds=7, nbytes=512)
    monkeypatch.delenv("BACKSTOP_BUFFER_BYTES")
    monkeypatch.delenv("BACKSTOP_READAHEAD_BYTES")
    assert Caps.from_env().nbytes == 8 * 1024 * 1024  # the documented defaults
    assert Caps.from_env(readahead=True).nbytes == 1024 * 1024


def test_a_batch_is_counted_by_the_size_of_the_frame_it_came_in() -> None:
    async def go() -> None:
        frames = [wire.encode({"t": "hb"}), wire.encode(Batch(1, [], at=1.0).to_msg())]
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(frames))
        watch: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got = await anext(inputs._frames(reader, watch, "tokenize-0"))
        assert got[0]["t"] == "batch" and got[1] == len(frames[1])  # the heartbeat skipped
        watch.cancel()

    run(go())


def test_the_read_ahead_of_an_upstream_holds_at_most_the_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task's pump, fed by an upstream that always has more (each batch's frame
    1000 bytes), stops reading once 5000 bytes wait, far below the rounds' cap."""
    read: list[int] = []

    async def endless(*args: Any, start: int, **kwargs: Any) -> AsyncIterator[tuple[Batch, int]]:
        r = start
        while True:
            read.append(r)
            yield Batch(r, [], at=1.0), 1000
            r += 1

    monkeypatch.setattr(inputs, "stream_copies", endless)

    async def go() -> None:
        q: ByteQueue[Batch] = ByteQueue(Caps(rounds=2000, nbytes=5000))
        me = SimpleNamespace(round=0, subscription=0, store=None, epoch=1)
        me.cfg = SimpleNamespace(copy="count-0")
        pump = asyncio.ensure_future(Task._pump(me, "tokenize-0", q))  # type: ignore[arg-type]
        await _settle()
        assert len(q) == 5 and q.nbytes == 5000 and not pump.done()
        assert len(read) <= 6  # one more at most, waiting for room
        assert (await q.get()).r == 1
        await _settle()
        assert len(q) == 5 and q.nbytes == 5000  # took one more as one left, no more
        pump.cancel()

    run(go())
