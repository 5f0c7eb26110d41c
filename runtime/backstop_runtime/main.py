"""The entry point's logic, separate from ``__main__`` so tests can call it in-process.

A fenced copy (:class:`~backstop_runtime.config.Fenced`) does not exit: it logs why
once, answers ``/ready`` with 503 and ``/status`` with the reason, writes nothing more
and waits to be stopped, then exits with code 3. Exiting at once would have the kubelet
restart it (``restartPolicy: Always``) into a crash loop; a restarted copy finds itself
fenced before it claims (:meth:`backstop_runtime.store.Store.claim_epoch`) when the
operator published a higher epoch for it or a higher one claimed the store, but one
fenced by a copy of the same operator epoch (two pods of one task sharing the store)
would claim again and fence that copy back. The operator deletes the fenced pod once it
can reach its node; until then it is an idle process that holds no store epoch.

A store that stays unreachable for longer than its deadline
(:class:`~backstop_runtime.blobs.StoreUnavailable`, ``BACKSTOP_S3_DEADLINE``) ends the
task with one line and exit code 4: it has sent nothing its store does not hold, and the
kubelet's restart recovers it from its checkpoint once the store answers again. A store
that refuses the task for good (:class:`~backstop_runtime.blobs.StoreError`: no such
bucket, wrong credentials) ends it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from typing import Any

from backstop_runtime import httpmetrics, logformat
from backstop_runtime.blobs import StoreError
from backstop_runtime.config import ConfigError, Fenced, from_env

EXIT_CONFIG = 2
EXIT_FENCED = 3
EXIT_STORE = 4


def _dump_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """``kill -USR1 <pid>``: log where every coroutine waits (for a task that seems stuck)."""
    import io

    for t in asyncio.all_tasks(loop):
        out = io.StringIO()
        t.print_stack(file=out)
        logging.getLogger("backstop_runtime").warning("%s", out.getvalue())


def _signals(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks, loop)
    return stop


async def _run(task: Any) -> None:
    stop = _signals(asyncio.get_running_loop())
    try:
        await task.run(stop)
    except Fenced as err:
        log = logging.getLogger("backstop_runtime")
        if stop.is_set():  # fenced while being stopped: nothing to wait for
            log.error("fenced: %s", err)
        else:
            log.error("fenced: %s; writing nothing more, standing by until stopped", err)
            await stand_by(task.cfg.task, str(err), stop)
        raise


async def stand_by(task: str, reason: str, stop: asyncio.Event) -> None:
    """Wait, fenced, until ``stop`` (SIGTERM or SIGINT), telling probes why (see the
    module doc)."""
    values = {"fenced": reason, "unanswered": {}}
    port = int(os.environ.get("BACKSTOP_METRICS_PORT", "9090"))
    web = None
    with contextlib.suppress(OSError):  # the port is taken: stand by without probes
        web = await httpmetrics.serve(port, task, lambda: values)
    try:
        await stop.wait()
    finally:
        if web is not None:
            web.close()


def _tune_gc() -> None:
    """Collect cycles less often, and never look at what start-up made again.

    A task makes and drops many small containers each round (a batch's values, its
    columns), nearly none in cycles: at the default threshold (700 allocations) the
    collector runs thousands of times a second over them and over every long-lived
    object of start-up (modules, the task's state). Those are frozen out of the
    collections, and the youngest generation is collected every 20,000 allocations.
    """
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def main() -> int:
    logformat.configure()
    log = logging.getLogger("backstop_runtime")
    try:
        cfg = from_env()
        from backstop_runtime.task import Task

        task = Task(cfg)
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return EXIT_CONFIG
    except StoreError as err:
        log.error("store error: %s", err)
        return EXIT_STORE
    _tune_gc()
    try:
        asyncio.run(_run(task))
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return EXIT_CONFIG
    except StoreError as err:
        log.error("store error: %s", err)
        return EXIT_STORE
    except Fenced:  # logged, and stood by until stopped, by _run
        return EXIT_FENCED
    return 0
