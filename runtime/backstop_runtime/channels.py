"""The producer side of a channel: the output buffer of one consumer, and how it is served.

What a channel retains is the failure-effect model's ``M(v)``:

* a task with an upstream backup (``BACKSTOP_UPSTREAM_BACKUP=true``), or any task while
  the recovery session asks for adaptive buffering, keeps every batch until the consumer
  has checkpointed past it (the consumer's checkpoints in the shared store are the ack);
* any other task keeps only what its connected consumer has not received yet, and keeps
  nothing for a consumer that is down. A consumer that comes back then asks for batches
  nobody has, and the task *regenerates* them by replaying its own input (``replay``).

The buffer is bounded (``BACKSTOP_BUFFER_ROUNDS`` batches); when it is full the task stops
producing until the consumer catches up or checkpoints (back-pressure), so a consumer
that is down never makes a producer's memory grow without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque


class OutChannel:
    """Batches for one consumer task, contiguous by round."""

    def __init__(self, consumer: str, cap: int) -> None:
        self.consumer = consumer
        self.cap = cap
        self.rounds: deque[tuple[int, bytes]] = deque()
        self.cond = asyncio.Condition()
        self.sub_epoch = -1
        self.sub_token: object | None = None
        self.acked = 0

    @property
    def connected(self) -> bool:
        return self.sub_token is not None

    def retains(self, backup: bool) -> bool:
        return backup or self.connected

    async def append(self, r: int, frame: bytes, backup: bool) -> None:
        """Add round ``r``; wait while the buffer is full (back-pressure)."""
        async with self.cond:
            if not self.retains(backup):
                return
            await self.cond.wait_for(
                lambda: len(self.rounds) < self.cap or not self.retains(backup)
            )
            if not self.retains(backup):
                return
            if self.rounds and self.rounds[-1][0] != r - 1:
                self.rounds.clear()  # never keep a gap: what is missing is regenerated
            self.rounds.append((r, frame))
            self.cond.notify_all()

    async def trim(self, upto: int) -> None:
        """Drop rounds ``<= upto``."""
        async with self.cond:
            n = len(self.rounds)
            while self.rounds and self.rounds[0][0] <= upto:
                self.rounds.popleft()
            if len(self.rounds) != n:
                self.cond.notify_all()

    def first(self) -> int | None:
        return self.rounds[0][0] if self.rounds else None

    def last(self) -> int | None:
        return self.rounds[-1][0] if self.rounds else None

    def frames(self, lo: int, hi: int | None = None) -> list[bytes]:
        """Frames of rounds ``lo..hi`` (to the newest if ``hi`` is None) that are held."""
        first = self.first()
        if first is None:
            return []
        start = max(0, lo - first)
        stop = len(self.rounds) if hi is None else max(0, min(len(self.rounds), hi - first + 1))
        return [self.rounds[i][1] for i in range(start, stop)]

    def holds(self, lo: int, hi: int) -> bool:
        first, last = self.first(), self.last()
        return first is not None and last is not None and first <= lo and hi <= last

    async def attach(self, epoch: int) -> object | None:
        """Make ``epoch`` the live subscriber; ``None`` if a newer copy is already attached."""
        async with self.cond:
            if epoch < self.sub_epoch:
                return None
            self.sub_epoch = epoch
            self.sub_token = object()
            self.cond.notify_all()  # an older sender sees the new token and stops
            return self.sub_token

    async def detach(self, token: object, backup: bool) -> None:
        async with self.cond:
            if self.sub_token is token:
                self.sub_token = None
                if not backup:
                    self.rounds.clear()
                self.cond.notify_all()
