"""Kopf's executor grows with the supervise daemons: a fleet created at once all runs.

Each sync daemon holds a thread of Kopf's executor for its topology's lifetime. A fleet
of 100 topologies submits 100 daemons at once. Raising the executor's limit as each
starts is not enough: a ``ThreadPoolExecutor`` starts threads only on a submission, and
the pod and node indexes submit no work (they are ``async``), so only the first 16
daemons would run (``bench/bench_operator.py --scenario fleet-loss`` shows it: 16 of 100
topologies Ready, 84 never supervised).
"""

from __future__ import annotations

import threading
import time

import kopf

from backstop.controller import daemon


def test_every_queued_daemon_gets_a_thread() -> None:
    settings = kopf.OperatorSettings()
    sizer = daemon.ExecutorSizer()
    sizer.attach(settings)
    n = daemon.HANDLER_WORKERS + 24
    started = threading.Semaphore(0)
    stop = threading.Event()

    def a_daemon() -> None:  # as daemon.supervise: count itself, then hold the thread
        sizer.add(+1)
        started.release()
        stop.wait(30)

    executor = settings.execution.executor
    go = threading.Event()
    try:
        for _ in range(daemon.HANDLER_WORKERS):  # the fleet's reconciles hold every thread
            executor.submit(go.wait, 30)
        for _ in range(n):  # meanwhile Kopf spawns the fleet's daemons: they queue
            executor.submit(a_daemon)
        go.set()
        deadline = time.monotonic() + 10
        running = 0
        while running < n and started.acquire(timeout=max(0.0, deadline - time.monotonic())):
            running += 1
        assert running == n, f"{running} of {n} daemons got a thread"
        assert settings.execution.max_workers == daemon.HANDLER_WORKERS + n
    finally:
        go.set()
        stop.set()
        executor.shutdown(wait=True)
