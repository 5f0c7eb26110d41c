"""The entry point's logic, separate from ``__main__`` so tests can call it in-process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from backstop_runtime.config import ConfigError, Fenced, from_env

EXIT_CONFIG = 2
EXIT_FENCED = 3


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
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        loop.run_until_complete(task.run(stop))
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return EXIT_CONFIG
    except Fenced as err:
        log.error("fenced: %s", err)
        return EXIT_FENCED
    finally:
        pending = asyncio.all_tasks(loop)
        for t in pending:
            t.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
    return 0
