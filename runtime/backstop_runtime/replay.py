"""Regenerating output that no buffer holds: the recursive replay of the model.

A consumer that restarts asks its producer for the batches after its checkpoint. If the
producer's channel does not hold them (it keeps no upstream backup, or it restarted too),
the producer runs a *second instance of its own operator*, restored from its newest
checkpoint at or before the first batch needed, fed by bounded replay requests to its own
producers, which answer from their buffers or, lacking them, in the same way: recursively
up to a buffer or the source's log. That is why a chain of tasks without backups costs
the sum of their reprocessing latencies, ``ℓ(v) = t_v + ℓ(u)``. Determinism (``engine``)
makes every regenerated batch identical to the one the consumer would have got.

A replay runs while the task serves live consumers, so what it reads from the store (a
checkpoint, a source's input segments) it reads in a thread (:mod:`backstop_runtime.offloop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from backstop_runtime import inputs
from backstop_runtime.api import Context, Operator, Source
from backstop_runtime.config import TaskConfig
from backstop_runtime.engine import (
    Batch,
    BatchLog,
    Counters,
    DeadLetters,
    Processor,
    SourceProcessor,
    instantiate,
)
from backstop_runtime.metrics import Metrics
from backstop_runtime.store import Store

log = logging.getLogger("backstop_runtime.replay")


class Producer(Protocol):
    """What a replay needs of the task that regenerates (:class:`backstop_runtime.task.Task`)."""

    cfg: TaskConfig
    store: Store
    epoch: int
    log: BatchLog
    """The source's batch log (a source replays from it)."""
    metrics: Metrics

    async def logged(self, r: int) -> None:
        """Wait until the (source) batch log holds round ``r``."""


async def regenerate(task: Producer, consumer: str, lo: int, hi: int) -> AsyncIterator[Batch]:
    """Batches ``lo..hi`` of ``consumer``'s channel, recomputed (the last may end early
    with ``eos``). Counted in the task's replay metrics."""
    start = time.monotonic()
    cfg = task.cfg
    log.info("%s: regenerating batches %d..%d for %s", cfg.task, lo, hi, consumer)
    counters = Counters()
    try:
        if cfg.is_source:
            batches = _from_log(task, consumer, lo, hi, counters)
        else:
            batches = _recompute(task, consumer, lo, hi, counters)
        async with contextlib.aclosing(batches):  # its streams close when the caller stops
            async for batch in batches:
                yield batch
    finally:
        task.metrics.replay_seconds += time.monotonic() - start
        task.metrics.replayed_batches += max(0, hi - lo + 1)


async def _from_log(
    task: Producer, consumer: str, lo: int, hi: int, counters: Counters
) -> AsyncGenerator[Batch, None]:
    """A source's batches ``lo..hi``, read again from its batch log."""
    proc = await asyncio.to_thread(_log_replayer, task, consumer, counters)
    for r in range(lo, hi + 1):
        if task.log.eos_round is not None and r > task.log.eos_round:
            yield Batch.ended(r)  # the stream ended before round r
            return
        await task.logged(r)
        batch = (await asyncio.to_thread(proc.step_replay, r))[consumer]
        yield batch
        if batch.eos:
            return


def _log_replayer(task: Producer, consumer: str, counters: Counters) -> SourceProcessor:
    """A second instance of the source, opened on its input (which may be a store), to
    read ``consumer``'s batches again from ``task``'s batch log."""
    cfg = task.cfg
    source: Source = instantiate(cfg, Source)
    ctx = Context(
        cfg.task,
        cfg.index,
        cfg.parallelism,
        lambda r: None,
        DeadLetters(None, counters, cfg.task),
    )
    source.open(ctx)
    return SourceProcessor(cfg, source, task.log, counters, only=consumer)


async def _recompute(
    task: Producer, consumer: str, lo: int, hi: int, counters: Counters
) -> AsyncGenerator[Batch, None]:
    """An operator's batches ``lo..hi``: a second instance from the checkpoint before ``lo``,
    fed by replays from its own producers."""
    cfg = task.cfg
    ckpt = await asyncio.to_thread(task.store.load_checkpoint, at_most=lo - 1)
    r0 = int(ckpt["round"]) if ckpt else 0
    op: Operator = instantiate(cfg, Operator)
    replayer = Processor(cfg, op, counters, DeadLetters(None, counters, cfg.task), only=consumer)
    replayer.restore(ckpt)
    if replayer.eos:  # the stream ended before round lo
        yield Batch.ended(lo)
        return
    streams = [
        inputs.stream(task.store, u, consumer=cfg.task, epoch=task.epoch, start=r0 + 1, end=hi)
        for u in cfg.upstream
    ]
    ended: dict[int, bool] = {}
    try:
        for r in range(r0 + 1, hi + 1):
            batches = []
            for i, st in enumerate(streams):
                if ended.get(i):
                    batches.append(Batch.ended(r))
                    continue
                b, _ = await anext(st)
                ended[i] = b.eos
                batches.append(b)
            out = replayer.step(r, batches)[consumer]
            if r >= lo:
                yield out
            if out.eos:
                return
    finally:
        for st in streams:
            await st.aclose()
