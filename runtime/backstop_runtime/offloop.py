"""Store I/O off the event loop: one writer thread per task, reads in the loop's pool.

Every store operation is blocking I/O: a request over the network on an object store
(milliseconds, up to ``BACKSTOP_S3_DEADLINE`` while the store is down), a write and an
``fsync`` on a directory. A task's event loop also sends and receives batches and answers
``/ready``, so once the task serves, it runs no store call itself: it hands each one to a
thread and awaits it.

* Writes, and the calls that change what the task holds in memory (the batch log, dead
  letters, a sink's pending lines, the metrics totals), run on the task's
  :class:`StoreWriter`: a single thread, one call after the other in the order the loop
  issues them. One thread rather than a pool, because that order is part of the
  runtime's guarantees across coroutines: a status written after a checkpoint lands after
  it (two writes of ``status.json`` in flight at once could land the older one last); the
  checkpoint taken at SIGTERM waits for one still being written instead of running beside
  it; a source's round is read and logged before a later round, and its batch log is
  compacted between two appends, never during one. And each of those objects has one
  thread that changes it, so none needs a lock.
* Reads that change nothing the task holds (the fence check, the consumers' floors,
  another source's log, a checkpoint a replay restores, a replay's segment reads) run
  with :func:`asyncio.to_thread` and do not queue behind writes.

The coroutine that issues a call awaits it before it goes on, so what the runtime writes
in order is still written in order: a round's batch-log entry is stored before the batch
is sent, a sink's output object is created before the checkpoint that covers it (one
writer call does both, after the fence check), the checkpoint of round ``r`` is saved
before round ``r`` is published. While it waits, the loop serves consumers and probes.
The task's state is not stepped meanwhile: the one coroutine that steps it is the one
waiting, so a checkpoint serialized in the thread sees the state of its own round.

A call keeps running if the coroutine awaiting it is cancelled (a stop, a fenced copy):
what it writes is what it would have written had it finished a moment earlier, and the
next call on the writer starts after it.

Start-up stays inline (claiming the epoch, restoring the checkpoint or batch log, opening
the sink, publishing the address): it happens before the task listens for probes and
must finish before anything else runs.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StoreWriter:
    """The single thread that performs one task's store writes, in the order issued."""

    def __init__(self, task: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{task}")

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the writer thread, after every call issued before."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        """Wait for the calls issued so far, then let the thread end."""
        self._pool.shutdown(wait=True)
