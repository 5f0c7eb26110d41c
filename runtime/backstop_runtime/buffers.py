"""How much a buffer between two tasks may hold: bytes first, batches second.

Every buffer that holds a stream's batches is bounded in the bytes of their frames (the
encoded batch as it travels on the wire):

* a producer's output channel per consumer (:class:`~backstop_runtime.channels.OutChannel`:
  its backup, or what is not sent yet) holds frames, at most ``BACKSTOP_BUFFER_BYTES``
  (default 8 MiB) of them;
* a consumer's read-ahead per upstream (:class:`ByteQueue`) holds decoded batches, counted
  by the size of the frame each came in (never by encoding it again), at most
  ``BACKSTOP_READAHEAD_BYTES`` (default 1 MiB) of frames. Decoded into Python objects, a
  batch of small records takes several times its frame's bytes, and a read-ahead only has
  to keep the task busy while the next batches arrive, so its bound is smaller (a
  channel's must hold a backup's output for a checkpoint interval, or the producer waits
  for each checkpoint: 8 MiB are a hundred frames of 1,000 records of 80 bytes, and the
  defaults checkpoint every 40 rounds). A frame of :data:`~backstop_runtime.wire.LARGE`
  bytes or more stays encoded in the read-ahead, as the bytes it is counted by
  (:class:`~backstop_runtime.wire.Encoded`).

``BACKSTOP_BUFFER_ROUNDS`` (default 2000 batches) caps both as well; whichever bound is
reached first makes the buffer full, and a full buffer stops whoever fills it
(back-pressure). An empty buffer always takes one item, however large, so a batch bigger
than the bound still passes and nothing deadlocks.

The bound is per buffer (one per consumer channel, one per upstream read-ahead), not one
pool per task: whether a buffer is full decides, per consumer, whether the producer waits
or (for a consumer that is down and no backup) drops it, and that decision must not depend
on how much the task's other consumers hold. A task therefore holds at most about
``(consumers + active replicas of them) × BACKSTOP_BUFFER_BYTES`` of frames and
``upstreams × BACKSTOP_READAHEAD_BYTES`` of frames' worth of decoded batches, plus what its
own operator keeps.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
DEFAULT_BYTES = 8 * 1024 * 1024
DEFAULT_READAHEAD = 1024 * 1024
DEFAULT_ROUNDS = 2000


@dataclass(frozen=True)
class Caps:
    """The bound of one buffer: at most ``rounds`` items and ``nbytes`` bytes."""

    rounds: int = DEFAULT_ROUNDS
    nbytes: int = DEFAULT_BYTES

    @classmethod
    def from_env(cls, readahead: bool = False) -> Caps:
        """An output channel's bound (``BACKSTOP_BUFFER_BYTES``), or with ``readahead`` a
        read-ahead's (``BACKSTOP_READAHEAD_BYTES``); ``BACKSTOP_BUFFER_ROUNDS`` for both."""
        name, default = (
            ("BACKSTOP_READAHEAD_BYTES", DEFAULT_READAHEAD)
            if readahead
            else ("BACKSTOP_BUFFER_BYTES", DEFAULT_BYTES)
        )
        rounds = int(os.environ.get("BACKSTOP_BUFFER_ROUNDS") or DEFAULT_ROUNDS)
        nbytes = int(os.environ.get(name) or default)
        return cls(max(1, rounds), max(1, nbytes))

    def full(self, items: int, held: int, size: int) -> bool:
        """Whether a buffer of ``items`` items and ``held`` bytes has no room for one more
        of ``size`` bytes (an empty buffer always has room).

        >>> caps = Caps(rounds=3, nbytes=100)
        >>> caps.full(0, 0, 500), caps.full(1, 60, 40), caps.full(1, 60, 41), caps.full(3, 3, 1)
        (False, False, True, True)
        """
        return items > 0 and (items >= self.rounds or held + size > self.nbytes)


class ByteQueue(Generic[T]):
    """A FIFO of items, each with its size in bytes, bounded by :class:`Caps`: :meth:`put`
    waits while the queue is full (back-pressure on whoever fills it)."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self.items: deque[tuple[T, int]] = deque()
        self.nbytes = 0
        """The bytes the queued items account for."""
        self.cond = asyncio.Condition()

    def __len__(self) -> int:
        return len(self.items)

    def empty(self) -> bool:
        return not self.items

    async def put(self, item: T, size: int) -> None:
        """Queue ``item`` of ``size`` bytes once it fits (at once into an empty queue)."""
        async with self.cond:
            await self.cond.wait_for(lambda: not self.caps.full(len(self.items), self.nbytes, size))
            self.items.append((item, size))
            self.nbytes += size
            self.cond.notify_all()

    async def get(self) -> T:
        """The oldest item, once there is one."""
        async with self.cond:
            await self.cond.wait_for(lambda: bool(self.items))
            item, size = self.items.popleft()
            self.nbytes -= size
            self.cond.notify_all()
            return item
