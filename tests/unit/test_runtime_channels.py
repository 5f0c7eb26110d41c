"""A producer's buffer for one consumer (``backstop_runtime.channels.OutChannel``).

What it keeps decides what a restarted consumer must have regenerated: the backlog that
arrived while the consumer was down is kept (bounded) even without a backup, so only the
state since the consumer's checkpoint is regenerated, as the failure-effect model prices
it; and a consumer that is down never stalls a producer that keeps no backup for it. The
buffer is bounded in the bytes of its frames as well as in batches.
"""

from __future__ import annotations

import asyncio

import pytest

from backstop_runtime.buffers import Caps
from backstop_runtime.channels import OutChannel


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_consumer_that_is_down_gets_what_it_was_not_sent_when_back() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=10))
        token = await ch.attach(1)
        for r in (1, 2, 3):
            await ch.append(r, b"%d" % r, backup=False)
        await ch.trim(2)  # the live sender trims what it sent (no backup)
        assert token is not None
        await ch.detach(token, backup=False)  # the consumer's node is lost
        for r in (4, 5, 6):
            await ch.append(r, b"%d" % r, backup=False)
        assert (ch.first(), ch.last()) == (3, 6)  # 3 was never sent, 4-6 came meanwhile
        assert await ch.attach(2) is not None
        assert ch.frames(3) == [b"3", b"4", b"5", b"6"]

    run(go())


def test_a_consumer_that_is_down_never_stalls_a_producer_without_a_backup() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=3))
        for r in range(1, 8):  # it never attached; each append returns at once
            await asyncio.wait_for(ch.append(r, b"x", backup=False), 1)
        assert ch.first() is None and ch.dropped  # over the bound: all dropped, no gap kept
        assert await ch.attach(1) is not None and not ch.dropped
        await ch.append(8, b"8", backup=False)
        assert ch.frames(8) == [b"8"]

    run(go())


@pytest.mark.parametrize("connected", [True, False])
def test_a_full_buffer_stops_the_producer_when_it_is_a_backup_or_the_consumer_is_slow(
    connected: bool,
) -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=2))
        token = await ch.attach(1) if connected else None
        backup = not connected  # a backup waits for the consumer's checkpoint, up or down
        for r in (1, 2):
            await ch.append(r, b"x", backup=backup)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ch.append(3, b"x", backup=backup), 0.2)
        if token is not None:  # a slow consumer that goes down releases the producer
            await ch.detach(token, backup=False)
            await asyncio.wait_for(ch.append(3, b"x", backup=False), 1)
            assert ch.frames(1) == [b"x"] * 3 or ch.dropped

    run(go())


async def _stalled(pending: asyncio.Future[None]) -> bool:
    """Whether ``pending`` is still waiting after the loop has run everything ready."""
    for _ in range(10):
        await asyncio.sleep(0)
    return not pending.done()


@pytest.mark.parametrize("backup", [False, True])
def test_a_producer_stalls_once_the_bytes_are_reached_and_resumes_as_they_drain(
    backup: bool,
) -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=1000, nbytes=100))
        await ch.attach(1)  # a slow consumer (or a backup, kept until it checkpoints)
        for r in (1, 2, 3):
            await ch.append(r, b"x" * 30, backup=backup)  # 90 bytes held
        fourth = asyncio.ensure_future(ch.append(4, b"y" * 30, backup=backup))
        assert await _stalled(fourth)  # 120 bytes would exceed 100: far below 1000 rounds
        assert ch.nbytes == 90 and ch.last() == 3
        await ch.trim(1)  # sent (or checkpointed past): 60 bytes left
        await asyncio.wait_for(fourth, 5)
        assert ch.frames(2) == [b"x" * 30, b"x" * 30, b"y" * 30] and ch.nbytes == 90

    run(go())


def test_a_backup_that_cannot_fit_stops_the_producer_while_the_consumer_is_down() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=1000, nbytes=100))
        await ch.append(1, b"x" * 60, backup=True)  # the consumer never attached
        second = asyncio.ensure_future(ch.append(2, b"x" * 60, backup=True))
        assert await _stalled(second) and not ch.dropped  # a backup is never dropped
        await ch.trim(1)  # the consumer's checkpoint covers round 1
        await asyncio.wait_for(second, 5)
        assert (ch.first(), ch.last()) == (2, 2)

    run(go())


def test_a_single_frame_larger_than_the_bound_passes_an_empty_buffer() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=1000, nbytes=100))
        await ch.attach(1)
        await asyncio.wait_for(ch.append(1, b"z" * 1000, backup=True), 5)
        assert ch.frames(1) == [b"z" * 1000]
        nxt = asyncio.ensure_future(ch.append(2, b"z", backup=True))
        assert await _stalled(nxt)  # nothing more fits beside it
        await ch.trim(1)
        await asyncio.wait_for(nxt, 5)
        assert ch.frames(2) == [b"z"]

    run(go())


def test_a_down_consumer_without_a_backup_loses_its_buffer_once_the_bytes_are_full() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", Caps(rounds=1000, nbytes=100))
        for r in (1, 2, 3):
            await asyncio.wait_for(ch.append(r, b"x" * 40, backup=False), 5)
        assert ch.dropped and ch.first() is None and ch.nbytes == 0  # the third did not fit

    run(go())
