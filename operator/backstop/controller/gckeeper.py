"""Full garbage collections on the operator's schedule, not in the middle of a recovery.

With 10k task pods the operator holds millions of Python objects (the pod index, the
ledger's pod feed, the plan's manifests). CPython's cyclic collector traverses all of
them in each full (generation 2) collection, which the allocations of an ordinary tick
trigger, so at 10k tasks such collections take about half of the recovery round that
writes the first RecoveryPlan (``bench/bench_scale.py``, docs/benchmarks/index.md).

:func:`collect_and_freeze` runs one full collection and then moves every object that
survived it into the permanent generation (:func:`gc.freeze`), which later collections
skip; new objects are still collected as usual. :func:`start` repeats that every
:data:`PERIOD` seconds in a thread of its own, unfreezing first, so cyclic garbage among
frozen objects waits at most a period to be collected. Objects without cycles (almost
everything: pod dicts, manifests) are freed by reference counting as before, frozen or
not.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)

PERIOD = 60.0
"""Seconds between two scheduled full collections."""


def collect_and_freeze() -> float:
    """One full collection of everything, then freeze the survivors; returns its seconds.

    >>> collect_and_freeze() >= 0 and gc.get_freeze_count() > 0
    True
    """
    start = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start


def start(period: float = PERIOD) -> threading.Event:
    """Collect and freeze now and then every ``period`` s; set the returned event to stop."""
    stop = threading.Event()

    def run() -> None:
        while True:
            took = collect_and_freeze()
            log.debug("full collection in %.3fs, %d objects frozen", took, gc.get_freeze_count())
            if stop.wait(period):
                return

    threading.Thread(target=run, name="backstop-gc", daemon=True).start()
    return stop
