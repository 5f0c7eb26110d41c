"""The task's server: the subscriptions of its consumers, live or a bounded replay.

A consumer connects to the address its producer publishes and sends one ``sub``
message. Without ``to`` it is a live subscription from batch ``from`` on: what the
channel holds already is marked a replay, later batches are live, and what nobody holds
is regenerated (:mod:`backstop_runtime.replay`). A subscription of an older epoch than
the channel's current subscriber is refused as fenced; a newer one takes the channel
over and the older sender stops. With ``to`` it is a bounded replay request (from a
consumer that regenerates its own output), answered from the channel or regenerated,
then ended. An active replica of a consumer (``<task>#r<k>``) subscribes as the
consumer does and is served from a follower channel of its own
(:class:`~backstop_runtime.channels.OutChannel`). This module is apart from
:mod:`backstop_runtime.task` because it only reads the task's channels and progress,
through :class:`Publisher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from backstop_runtime import suspects, wire
from backstop_runtime.channels import OutChannel
from backstop_runtime.config import base_task
from backstop_runtime.engine import Batch, ReplayGone
from backstop_runtime.replay import Producer, regenerate

log = logging.getLogger("backstop_runtime.serving")


class Publisher(Producer, Protocol):
    """What serving needs of the task (:class:`backstop_runtime.task.Task`)."""

    channels: dict[str, OutChannel]
    """One output channel per consumer task."""
    followers: dict[str, OutChannel]
    """One follower channel per active replica of a consumer that subscribed, by its copy
    name (``<task>#r<k>``)."""
    round: int
    """The last round the task has published."""
    eos: bool
    """Whether the task's stream has ended."""

    @property
    def backup(self) -> bool:
        """Whether channels keep batches until the consumer's checkpoint (``M(v)=1``)."""


async def serve(
    task: Publisher, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer one connection of a consumer (the task's ``asyncio`` server callback): its
    ``sub`` message, then the batches it asks for, until it or the task goes."""
    beat = suspects.beat(writer)  # heartbeats while idle: the consumer sees us alive
    try:
        wire.tune(writer)
        msg = await wire.read(reader)
        ch = channel(task, str(msg.get("consumer")))
        if msg.get("t") != "sub" or ch is None:
            writer.write(
                wire.encode(
                    {
                        "t": "err",
                        "msg": f"{msg.get('consumer')} is not a consumer of {task.cfg.task}",
                        "fenced": False,
                    }
                )
            )
            return
        lo, hi = int(msg["from"]), msg.get("to")
        if hi is None:
            name = str(msg["consumer"])
            await _serve_live(task, ch, reader, writer, name, int(msg["epoch"]), lo)
        else:
            await _serve_range(task, ch, writer, lo, int(hi))
    except ReplayGone as err:
        # the consumer asked for less than its published floor promised: say so, to it
        # and in our log, instead of failing the connection without a word
        log.error("%s: cannot serve a replay: %s", task.cfg.task, err)
        with contextlib.suppress(ConnectionError):
            writer.write(wire.encode({"t": "err", "msg": str(err), "fenced": False}))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, KeyError, TypeError):
        pass  # it went, or sent what is not a subscription: drop the connection, serve on
    except asyncio.CancelledError:
        pass  # shutting down; a cancelled handler would be logged as an error by asyncio
    finally:
        beat.cancel()
        writer.close()


def channel(task: Publisher, consumer: str) -> OutChannel | None:
    """The channel of ``consumer``: a consumer task's own, or a follower channel for an
    active replica of one (made when it first subscribes); ``None`` for a stranger."""
    ch = task.channels.get(consumer) or task.followers.get(consumer)
    base = base_task(consumer)
    if ch is None and base != consumer and base in task.channels:
        ch = task.followers[consumer] = OutChannel(base, task.channels[base].caps, follower=True)
    return ch


SEND_CHUNK = 1024 * 1024
"""Bytes of frames written at once: a channel's whole backlog joined into one write would
be a second copy of it in memory."""


async def _send(writer: asyncio.StreamWriter, frames: list[bytes]) -> None:
    """Write ``frames`` in order, about :data:`SEND_CHUNK` bytes at a time, each written
    once the transport has taken the previous ones (a frame is never split)."""
    i = 0
    while i < len(frames):
        j, n = i + 1, len(frames[i])
        while j < len(frames) and n + len(frames[j]) <= SEND_CHUNK:
            n += len(frames[j])
            j += 1
        writer.write(b"".join(frames[i:j]))
        await writer.drain()
        i = j


def _replay_marker(task: Publisher, upto: int) -> bytes:
    """Tells the subscriber that batches up to ``upto`` are a replay from us (those
    sent from our buffer; regenerated ones say where they came from themselves)."""
    return wire.encode({"t": "replay", "upto": upto, "via": [task.cfg.task]})


async def _serve_range(
    task: Publisher, ch: OutChannel, writer: asyncio.StreamWriter, lo: int, hi: int
) -> None:
    await _send(writer, [_replay_marker(task, hi)])
    if ch.holds(lo, hi):
        await _send(writer, ch.frames(lo, hi))
    else:
        async for b in regenerate(task, ch.consumer, lo, hi):
            await _send(writer, [wire.encode(b.to_msg())])
    await _send(writer, [wire.encode({"t": "end"})])


async def _hear(reader: asyncio.StreamReader, consumer: str, stale: Callable[[], bool]) -> None:
    """Read a live subscriber's heartbeats: suspect it while it is silent for
    :data:`~backstop_runtime.suspects.SUSPECT_AFTER` (its machine vanished without a FIN),
    until the connection ends or a newer copy of it took the channel over. A consumer is
    watched as its producers are, so a node whose tasks only read from others is noticed
    too."""
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    try:
        while not stale():
            await suspects.read(reader, consumer, never, still=lambda: not stale())
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass  # it closed: its kernel answered, so its machine is up
    finally:
        never.cancel()
        suspects.clear(consumer)


async def _serve_live(
    task: Publisher,
    ch: OutChannel,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    name: str,
    epoch: int,
    nxt: int,
) -> None:
    token = await ch.attach(epoch)
    if token is None:
        writer.write(
            wire.encode(
                {
                    "t": "err",
                    "fenced": True,
                    "msg": f"epoch {epoch} of {ch.consumer} is superseded",
                }
            )
        )
        return
    heard = asyncio.ensure_future(_hear(reader, name, lambda: ch.sub_token is not token))
    try:
        await _send_live(task, ch, writer, token, nxt)
    finally:
        heard.cancel()
        await ch.detach(token, task.backup)


async def _send_live(
    task: Publisher, ch: OutChannel, writer: asyncio.StreamWriter, token: object, nxt: int
) -> None:
    """Send the live subscription ``token`` batches from ``nxt`` on, from the channel or
    regenerated, until a newer subscriber takes the channel over or the stream ends."""
    # what exists already is a replay to this subscriber, later batches are live; a
    # task without a backup holds only what it could not send yet (the consumer's
    # backlog, not a replay: see ``channels``), so only what comes before is replayed
    keeps = task.backup and not ch.follower  # the channel holds a backup
    first = ch.first()
    upto = max(task.round, ch.last() or 0) if keeps or first is None else first - 1
    await _send(writer, [_replay_marker(task, upto)])
    while True:
        async with ch.cond:
            await ch.cond.wait_for(
                lambda nxt=nxt: (
                    ch.sub_token is not token  # type: ignore[misc]
                    or (ch.last() or task.round) >= nxt
                    or (task.eos and nxt > task.round)
                )
            )
            if ch.sub_token is not token:
                return
            past_end = task.eos and nxt > task.round and (ch.last() or 0) < nxt
            first = ch.first()
            frames = ch.frames(nxt) if first is not None and first <= nxt else []
            hi = (first - 1) if first is not None else task.round
        if past_end:
            # the consumer restored past the end of our stream: tell it so (the
            # channel's lock is released: a newer subscriber must be able to attach)
            await _send(writer, [wire.encode(Batch.ended(nxt).to_msg())])
            async with ch.cond:
                await ch.cond.wait_for(lambda: ch.sub_token is not token)
            return
        if frames:
            await _send(writer, frames)
            nxt += len(frames)
            if not keeps:
                await ch.trim(nxt - 1)
            continue
        # not held (no backup, or a restart lost it): recompute what is missing
        async for b in regenerate(task, ch.consumer, nxt, hi):
            await _send(writer, [wire.encode(b.to_msg())])
            nxt = b.r + 1
        ch.dropped = False  # a follower that fell behind is sent live batches again
        if hi >= nxt:  # the stream ended while regenerating
            async with ch.cond:
                await ch.cond.wait_for(lambda: ch.sub_token is not token)
            return
