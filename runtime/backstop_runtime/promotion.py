"""Promotion in place: an active replica becomes its task's primary without a restart.

The operator promotes a replica when its primary's node is lost (``PUT /peers`` with
``"role": "primary"`` and the operator epoch to claim with,
:func:`backstop_runtime.peermap.promotion`). The replica has the primary's state already
(it restored the same checkpoint and stepped the same input, the runtime being
deterministic) and its consumers read its batches already, so what changes is what the
store and the producers know:

1. it takes the task's own name on the data plane and the operator epoch it was given;
2. it claims the task's next store epoch, which fences the old primary should it still run
   (a half-dead node), and publishes its address in the registry;
3. its inputs subscribe again as the task itself, from the batch after the last one they
   fed, so the producers keep their backups for it (:attr:`Task.subscription`);
4. from the next checkpoint round on it checkpoints, keeps its backups, trims, follows the
   recovery session and writes the status and metrics rows (the task's duties).

A replica of a source or a sink only stands by (:meth:`backstop_runtime.task.Task.run`):
promoted, it starts as a primary does, from the task's checkpoint, in the process and pod
that are already running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Protocol

from backstop_runtime.config import TaskConfig
from backstop_runtime.metrics import Metrics, MetricsWriter
from backstop_runtime.offloop import StoreWriter
from backstop_runtime.store import Store

log = logging.getLogger("backstop_runtime.promotion")


class Task(Protocol):
    """What a promotion reads and changes of the task (:class:`backstop_runtime.task.Task`)."""

    cfg: TaskConfig
    store: Store
    writes: StoreWriter
    metrics: Metrics
    promotion: asyncio.Event
    promoted_epoch: int
    """The operator epoch the promotion gave."""
    replica: bool
    epoch: int
    port: int
    round: int
    subscription: int
    """Counts the promotions: an input whose count is older subscribes again."""

    async def report_status(self) -> None:
        """Write ``status.json`` as of now."""

    def metrics_writer(self) -> MetricsWriter:
        """A writer of the metrics rows, for the epoch held now."""


async def wait(task: Task, stop: asyncio.Event) -> bool:
    """Wait for the task's promotion or ``stop``; whether the promotion came first."""
    promoted = asyncio.ensure_future(task.promotion.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([promoted, stopping], return_when=asyncio.FIRST_COMPLETED)
    promoted.cancel()
    stopping.cancel()
    return task.promotion.is_set() and not stop.is_set()


def become_primary(task: Task) -> None:
    """Take the task's own name and the operator epoch the promotion gave (step 1)."""
    task.cfg = dataclasses.replace(task.cfg, role="primary", epoch=task.promoted_epoch)
    task.store.cfg = task.cfg
    task.store.operator_fence.own = task.promoted_epoch
    task.replica = False


async def promote(task: Task) -> MetricsWriter:
    """Make the running replica ``task`` its task's primary (steps 1-4 of the module
    docstring); the caller starts the duties with the metrics writer returned. The state,
    the channels and the consumers' connections stay as they are."""
    was = task.cfg.copy
    become_primary(task)
    task.epoch = await task.writes(task.store.claim_epoch)
    await task.writes(task.store.publish_address, task.cfg.host, task.port)
    task.subscription += 1  # each input subscribes again, as the task itself
    task.metrics.restart_seconds = 0.0
    log.info(
        "%s: promoted to primary at round %d: epoch %d (operator epoch %d)",
        was,
        task.round,
        task.epoch,
        task.cfg.epoch,
    )
    await task.report_status()
    return task.metrics_writer()
