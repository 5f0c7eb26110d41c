"""The running task's periodic duties beside its work: the fence check, the replay
floors and buffer trimming, the metrics rows and ``status.json``, and the operator's
recovery session.

Each is a loop the task runs next to its main loop until it stops; one that raises (the
fence check's :class:`~backstop_runtime.config.Fenced`, a store error) ends the task.
Store calls run on the task's writer thread where they must be ordered with its other
writes, and in a thread of their own where they only read
(:mod:`backstop_runtime.offloop`), so the loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from backstop_runtime import session as sessions
from backstop_runtime.channels import OutChannel
from backstop_runtime.config import TaskConfig
from backstop_runtime.engine import BatchLog
from backstop_runtime.metrics import Metrics, MetricsWriter
from backstop_runtime.offloop import StoreWriter
from backstop_runtime.store import Store

log = logging.getLogger("backstop_runtime.task")


class Trimmed(Protocol):
    """What trimming needs of the task (:class:`backstop_runtime.task.Task`)."""

    cfg: TaskConfig
    store: Store
    writes: StoreWriter
    channels: dict[str, OutChannel]
    log: BatchLog
    """The source's batch log."""

    @property
    def backup(self) -> bool:
        """Whether channels keep batches until the consumer's checkpoint (``M(v)=1``)."""


async def fence_watch(store: Store) -> None:
    """Check the fence five times a second: raises ``Fenced`` once a newer copy started."""
    while True:
        await asyncio.sleep(0.2)
        await asyncio.to_thread(store.check_fence)


async def trim_loop(task: Trimmed) -> None:
    """Publish our replay floor, and trim what no consumer can ask for any more: each
    backup buffer up to its consumer's floor, a source's batch log (in memory and on
    disk) before the lowest one (a replay of batch ``f + 1`` needs the log entry of
    ``f``). See
    :meth:`Store.replay_floor` for why this is exactly what a replay may still need."""
    consumers = list(task.channels)
    store = task.store
    while True:
        if not task.cfg.is_source:  # beside the checkpoints, which delete below it
            await task.writes(lambda: store.publish_floor(store.replay_floor(consumers)))
        if task.cfg.is_source:  # between two appends: the writer changes the log
            floor = await asyncio.to_thread(store.consumer_floor, consumers)
            await task.writes(task.log.forget_before, floor)
        if task.backup:
            for c, ch in task.channels.items():
                await ch.trim(await asyncio.to_thread(store.published_floor, c))
        await asyncio.sleep(0.5)


async def metrics_loop(
    cfg: TaskConfig,
    writes: StoreWriter,
    writer: MetricsWriter,
    status: Callable[[], Awaitable[None]],
) -> None:
    """Write a metrics row every ``cfg.metrics_interval``, and call ``status`` every
    quarter of a second (every interval, if that is shorter)."""
    next_row = time.monotonic() + cfg.metrics_interval
    while True:
        # status.json four times a second: how far behind the task is, for whoever
        # measures its recovery from outside (the benchmark on real nodes)
        await asyncio.sleep(min(0.25, cfg.metrics_interval))
        if time.monotonic() >= next_row:
            await writes(writer.write)
            next_row += cfg.metrics_interval
        await status()


class Following(Protocol):
    """What following the recovery session needs of the task
    (:class:`backstop_runtime.task.Task`)."""

    cfg: TaskConfig
    session: sessions.Session
    adaptive: bool
    planned: list[str] | None
    """Where the session's plan says the task's replay comes from (once known)."""
    epoch: int
    metrics: Metrics
    started: float

    def check_replay(self) -> None:
        """Compare where the replay came from with where the plan said (once)."""


async def session_watch(task: Following) -> None:
    """Follow the operator's recovery session: adaptive buffering while it asks."""
    cfg = task.cfg
    while cfg.recovery_dir is not None:
        task.session = session = sessions.read(cfg.recovery_dir, cfg.task)
        if session.adaptive != task.adaptive:
            log.info("%s: adaptive buffering %s", cfg.task, "on" if session.adaptive else "off")
            task.adaptive = session.adaptive
        if task.planned is None and task.epoch > 1 and session.recovering(cfg.task):
            # the kubelet refreshes a mounted ConfigMap about once a minute, so a new pod
            # may start with the previous session: check the replay once the plan arrives
            # (the checkpoint was restored already: any kept one is consistent)
            task.planned = session.replay[cfg.task]
            if session.before is not None:
                task.metrics.restart_seconds = task.started - session.before
            if task.metrics.recovery_seconds is not None:
                task.check_replay()
        await asyncio.sleep(1.0)
    await asyncio.Event().wait()
