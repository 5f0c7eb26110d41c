"""What the benchmarks read of a process and of the host: load, RSS, CPU seconds, allocations.

Why one module: every figure on a ``docs/benchmarks/`` page stands next to the load average
(the host is shared) and several benchmarks read the same ``/proc`` fields; written
once, they are read and formatted the same way everywhere.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as the docs print them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (the kernel's peak) of a process, bytes; empty if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident set now (``VmRSS``), MiB (0 if it is gone)."""
    return proc_status(pid).get("VmRSS", 0) / 2**20


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds of a process so far (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ortools_loaded(pid: int | str = "self") -> bool | None:
    """Whether the process has mapped OR-Tools' native library (``/proc/PID/maps``): the
    RSS figure holds with the default placement only if it says which was measured
    (importing CP-SAT costs 128 MiB)."""
    try:
        return "ortools" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


class RssSampler:
    """``VmRSS`` of a process every ``every`` seconds (a daemon thread until ``stop``)."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def read(self) -> dict[str, int]:
        return proc_status(self.pid)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            rss = self.read().get("VmRSS")
            if rss is not None:
                self.samples.append((time.time(), rss))

    def peak_between(self, t0: float, t1: float) -> int | None:
        got = [r for t, r in self.samples if t0 <= t <= t1]
        return max(got) if got else None


def cpu_and_peak(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(CPU seconds, peak MiB allocated, result)``: timed without tracing (tracing
    slows allocation several times), then run again under ``tracemalloc`` for the peak."""
    t = time.process_time()
    result = fn()
    cpu = time.process_time() - t
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return cpu, peak, result
