"""A producer's buffer for one consumer (``backstop_runtime.channels.OutChannel``).

What it keeps decides what a restarted consumer must have regenerated: the backlog that
arrived while the consumer was down is kept (bounded) even without a backup, so only the
state since the consumer's checkpoint is regenerated, as the failure-effect model prices
it; and a consumer that is down never stalls a producer that keeps no backup for it.
"""

from __future__ import annotations

import asyncio

import pytest

from backstop_runtime.channels import OutChannel


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_consumer_that_is_down_gets_what_it_was_not_sent_when_back() -> None:
    async def go() -> None:
        ch = OutChannel("sink-0", cap=10)
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
        ch = OutChannel("sink-0", cap=3)
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
        ch = OutChannel("sink-0", cap=2)
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
