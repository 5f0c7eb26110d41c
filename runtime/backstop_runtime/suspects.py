"""Producers this task suspects to be lost, noticed on the data connections themselves.

A producer sends a heartbeat frame (``{"t": "hb"}``, :func:`beat`) on every connection it
serves while it has nothing else to send, every :data:`HEARTBEAT` seconds. A consumer that
reads nothing from a producer for :data:`SUSPECT_AFTER` seconds (``BACKSTOP_SUSPECT_AFTER``,
1 s by default) suspects it: a machine that vanished sends no FIN, and TCP alone notices it
only after its user timeout. A connection that breaks, or a producer that cannot be reached,
is suspected at once. Any frame from the producer clears the suspicion. A live subscriber
sends the same heartbeats to its producer, which suspects a consumer that goes silent in the
same way (a node whose tasks only read from tasks elsewhere is noticed too).

A suspicion is no verdict: the operator reads them at ``GET /suspects`` on the metrics port
(:mod:`backstop_runtime.httpmetrics`), no token needed, and confirms a loss itself before it
acts on one. The timer runs only while the consumer waits to read, so a consumer that stops
reading (back-pressure) suspects nobody for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from backstop_runtime import wire

SUSPECT_AFTER = float(os.environ.get("BACKSTOP_SUSPECT_AFTER", "1.0"))
"""Seconds of silence on a connection after which its producer is suspected."""
HEARTBEAT = max(0.05, SUSPECT_AFTER / 4)
"""Seconds between a producer's heartbeats on an idle connection."""
BEAT = wire.encode({"t": "hb"})
BACKLOG = 64 * 1024
"""Bytes a connection may hold unsent before heartbeats pause (its consumer stopped
reading: the frames already queued show it is alive once it reads again)."""

SUSPECTS: dict[str, tuple[float, str]] = {}
"""Suspected producers of this process: since when (epoch seconds) and why."""


def suspect(task: str, reason: str, since: float | None = None) -> None:
    """Suspect ``task`` (kept since the first time, with the newest reason)."""
    first, _ = SUSPECTS.get(task, (time.time() if since is None else since, reason))
    SUSPECTS[task] = (first, reason)


def clear(task: str) -> None:
    """``task`` answered: suspect it no more."""
    SUSPECTS.pop(task, None)


def snapshot() -> list[dict[str, Any]]:
    """What ``GET /suspects`` answers: ``[{task, since, reason}]`` by task.

    >>> SUSPECTS.clear(); suspect("src-0", "connection broken", since=5.0)
    >>> snapshot()
    [{'task': 'src-0', 'since': 5.0, 'reason': 'connection broken'}]
    >>> clear("src-0"); snapshot()
    []
    """
    return [
        {"task": t, "since": since, "reason": why} for t, (since, why) in sorted(SUSPECTS.items())
    ]


async def _beats(writer: asyncio.StreamWriter, every: float) -> None:
    while not writer.is_closing():
        await asyncio.sleep(every)
        transport = writer.transport
        if transport.get_write_buffer_size() < BACKLOG:
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(BEAT)  # one whole frame: never inside another one


def beat(writer: asyncio.StreamWriter, every: float = HEARTBEAT) -> asyncio.Future[None]:
    """Send heartbeats on ``writer`` until the returned future is cancelled (the
    connection's handler cancels it when it ends). Frames are written whole, so a
    heartbeat never splits a batch."""
    return asyncio.ensure_future(_beats(writer, every))


async def read(
    reader: asyncio.StreamReader,
    producer: str,
    watch: asyncio.Future[None],
    still: Callable[[], bool] = lambda: True,
    frame: Callable[[asyncio.StreamReader], Awaitable[Any]] = wire.read,
) -> Any:
    """The next frame from ``producer`` (heartbeats included) as ``frame`` reads it, or
    ``None`` when ``watch`` fired first; suspects the producer while nothing arrives for
    :data:`SUSPECT_AFTER` (and ``still()`` holds: a peer that no longer matters is not
    suspected)."""
    nxt: asyncio.Future[Any] = asyncio.ensure_future(frame(reader))
    nxt.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved
    began = time.time()
    waiting: set[asyncio.Future[Any]] = {nxt, watch}
    while True:
        done, _ = await asyncio.wait(
            waiting, timeout=SUSPECT_AFTER, return_when=asyncio.FIRST_COMPLETED
        )
        if done:
            break
        if not still():
            break
        silent = time.time() - began
        suspect(producer, f"silent for {silent:.1f}s", since=began)
    if nxt not in done:
        nxt.cancel()
        return None
    msg = nxt.result()  # raises what the read raised: the connection broke
    clear(producer)
    return msg
