"""The producer side of a channel: the output buffer of one consumer, and how it is served.

What a channel retains is the failure-effect model's ``M(v)``:

* a task with an upstream backup (``BACKSTOP_UPSTREAM_BACKUP=true``), or any task while
  the recovery session asks for adaptive buffering, keeps every batch until the consumer
  has checkpointed past it (the consumer's checkpoints in the shared store are the ack);
* any other task keeps only what its consumer has not been sent yet. A consumer that
  comes back after a failure restores its checkpoint and asks again from there; what it
  had been sent since (the model's state since the checkpoint) nobody has, and the task
  *regenerates* it by replaying its own input (``replay``).

The buffer is bounded in the bytes of the frames it holds (``BACKSTOP_BUFFER_BYTES``) and
in batches (``BACKSTOP_BUFFER_ROUNDS``): :mod:`backstop_runtime.buffers`. For a connected
consumer, or a backup, a full buffer stops the producer until the consumer catches up or
checkpoints (back-pressure): a backup that does not fit stops the producer until the
consumer's checkpoint lets it trim. An empty buffer always takes one frame, however large.
For a consumer that is down, a task without a backup keeps what it could not send while it
fits, and never stalls for it: when the next frame does not fit it drops it all, and the
consumer's next copy regenerates the whole gap. Keeping it is beyond the model
(``M(v)`` of a task without a backup is empty): it spares the regeneration of the input
that arrived while the consumer was down (failure detection plus pod start, which the
model does not count), leaving only the regeneration the model prices in ``ℓ(v)``.

A *follower* channel feeds an active replica of the consumer (``<task>#r<k>``): it carries
the consumer's batches, never holds a backup (the primary's checkpoints are the ack) and
never stops the producer: a replica that falls behind by a full buffer loses it and is
sent the gap regenerated, as a consumer that is down would be.
"""

from __future__ import annotations

import asyncio
from collections import deque

from backstop_runtime.buffers import Caps


class OutChannel:
    """Batches for one consumer task, contiguous by round."""

    def __init__(self, consumer: str, caps: Caps, *, follower: bool = False) -> None:
        self.consumer = consumer
        """The consumer task whose batches the channel carries (a replica's task)."""
        self.caps = caps
        self.follower = follower
        """Whether the channel feeds an active replica of ``consumer`` (see above)."""
        self.rounds: deque[tuple[int, bytes]] = deque()
        self.nbytes = 0
        """The bytes of the frames in :attr:`rounds`."""
        self.cond = asyncio.Condition()
        self.sub_epoch = -1
        self.sub_token: object | None = None
        self.acked = 0
        self.dropped = False
        """A down consumer's buffer overflowed: keep nothing for it until it is back."""

    @property
    def connected(self) -> bool:
        return self.sub_token is not None

    def retains(self, backup: bool) -> bool:
        return not self.follower and (backup or self.connected)

    def full(self, size: int) -> bool:
        """Whether a frame of ``size`` bytes does not fit (:class:`Caps`)."""
        return self.caps.full(len(self.rounds), self.nbytes, size)

    def _clear(self) -> None:
        self.rounds.clear()
        self.nbytes = 0

    async def append(self, r: int, frame: bytes, backup: bool) -> None:
        """Add round ``r``; wait while the buffer is full (back-pressure), except for a
        consumer that is down when there is no backup (see the module docstring)."""
        async with self.cond:
            await self.cond.wait_for(lambda: not self.full(len(frame)) or not self.retains(backup))
            if not self.retains(backup):
                if self.dropped:
                    return
                if self.full(len(frame)):
                    self._clear()  # its next copy regenerates the whole gap
                    self.dropped = True
                    self.cond.notify_all()
                    return
            if self.rounds and self.rounds[-1][0] != r - 1:
                self._clear()  # never keep a gap: what is missing is regenerated
            self.rounds.append((r, frame))
            self.nbytes += len(frame)
            self.cond.notify_all()

    async def trim(self, upto: int) -> None:
        """Drop rounds ``<= upto``."""
        async with self.cond:
            n = len(self.rounds)
            while self.rounds and self.rounds[0][0] <= upto:
                self.nbytes -= len(self.rounds.popleft()[1])
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
            self.dropped = False
            self.cond.notify_all()  # an older sender sees the new token and stops
            return self.sub_token

    async def detach(self, token: object, backup: bool) -> None:
        async with self.cond:
            if self.sub_token is token:
                self.sub_token = None  # what it was not sent stays, while it fits
                self.cond.notify_all()
