"""The entry point's logic, separate from ``__main__`` so tests can call it in-process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

from backstop_runtime.config import ConfigError, Fenced, from_env

EXIT_CONFIG = 2
EXIT_FENCED = 3


def _dump_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """``kill -USR1 <pid>``: log where every coroutine waits (for a task that seems stuck)."""
    import io

    for t in asyncio.all_tasks(loop):
        out = io.StringIO()
        t.print_stack(file=out)
        logging.getLogger("backstop_runtime").warning("%s", out.getvalue())


async def _run(task: Any) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks, loop)
    await task.run(stop)


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("BACKSTOP_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("backstop_runtime")
    try:
        cfg = from_env()
        from backstop_runtime.task import Task

        task = Task(cfg)
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return EXIT_CONFIG
    try:
        asyncio.run(_run(task))
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return EXIT_CONFIG
    except Fenced as err:
        log.error("fenced: %s", err)
        return EXIT_FENCED
    return 0
