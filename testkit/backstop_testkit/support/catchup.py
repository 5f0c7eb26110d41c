"""When a task lost with a killed node is back, counted from the kill.

The operator promises that after a single node failure every lost task is caught up with its
input within ``recoveryLatencyBound`` R, counted from the failure. The real-node tests that
assert it (``tests/realnodes``) and the benchmarks that measure it (``bench/runtime_kill.py``)
share what "caught up" and "the failure" mean here:

- a lost task's new copy (a recreated pod, or a replica promoted in place) is *caught up*
  (:class:`CatchUp`) once its ``status.json`` shows a newer store epoch than before the kill,
  a round past the first one seen of that epoch (its restored round) and a lag (seconds
  behind its sources) within its median lag in the steady stream before the kill
  (:func:`steady_lags`) plus :data:`CAUGHT_UP_SLACK`;
- *the failure* is the moment the killed node's first container process is gone
  (:class:`ContainerDeath`), neither when the kill command started nor when it returned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

CAUGHT_UP_SLACK = 0.5
"""Seconds a new copy may lag beyond its steady median (a host where the pipeline lags 1 s
in steady state must not count every recovery as never caught up against a fixed 0.5 s)."""

Status = Callable[[str], Mapping[str, Any]]
"""A task's ``status.json`` by task name (``{}`` until the task writes it)."""


def steady_lags(
    status: Status, tasks: Iterable[str], seconds: float, interval: float = 0.5
) -> dict[str, float]:
    """Each task's median lag (``status.json``'s ``lag``) over ``seconds`` of the steady
    stream: ``seconds / interval`` samples (at least one), ``interval`` apart."""
    samples: dict[str, list[float]] = {t: [] for t in tasks}
    for i in range(max(1, round(seconds / interval))):
        if i:
            time.sleep(interval)
        for t, got in samples.items():
            got.append(float(status(t).get("lag") or 0.0))
    return {t: sorted(v)[len(v) // 2] for t, v in samples.items()}


def caught_up(
    s: Mapping[str, Any], task: str, epoch: int, steady: float, first: dict[str, int]
) -> bool:
    """Whether ``s``, the ``status.json`` of ``task``, is of a new copy (an epoch past
    ``epoch``) that processes batches no further behind its sources than ``steady`` plus
    :data:`CAUGHT_UP_SLACK`, in a round past its restored one (the first round seen of the
    new copy, kept in ``first``)."""
    if int(s.get("epoch", 0)) <= epoch:
        return False
    restored = first.setdefault(task, int(s.get("round", 0)))
    lag = float(s.get("lag") or 0.0)
    return int(s.get("round", 0)) > restored and lag <= steady + CAUGHT_UP_SLACK


class CatchUp:
    """The tasks lost with one node, watched from before the kill: when each new copy
    caught up (epoch seconds in :attr:`back`)."""

    def __init__(self, status: Status, lost: Iterable[str], steady: Mapping[str, float]) -> None:
        self.status, self.lost, self.steady = status, list(lost), dict(steady)
        self.epochs = {t: int(status(t).get("epoch", 0)) for t in self.lost}
        self.first: dict[str, int] = {}  # each new copy's first round seen: its restored one
        self.back: dict[str, float] = {}
        self.last: dict[str, Mapping[str, Any]] = {}  # each task's status.json last read

    def poll(self) -> bool:
        """One look at the tasks not back yet; whether every one is back now."""
        for t in self.lost:
            if t in self.back:
                continue
            s = self.last[t] = self.status(t)
            if caught_up(s, t, self.epochs[t], self.steady.get(t, 0.0), self.first):
                self.back[t] = time.time()
        return len(self.back) == len(self.lost)

    def watch(self, until: float, interval: float = 0.1) -> bool:
        """Poll until every task is back or the epoch second ``until``; whether all are."""
        while not self.poll():
            if time.time() >= until:
                return False
            time.sleep(interval)
        return True

    def since(self, failure: float) -> dict[str, float]:
        """Seconds from ``failure`` (epoch seconds) to each task caught up, so far."""
        return {t: at - failure for t, at in self.back.items()}

    def late(self) -> str:
        """The tasks not back: those with no new copy yet, and new copies not caught up
        (each with its round, from the restored one, and its lag against its steady one;
        named when the copy came to the end of its input first, so a test's input that ends
        too soon after the kill shows as such)."""
        late = [t for t in self.lost if t not in self.back]
        fresh = [t for t in late if t in self.first]
        return (
            f"no new copy of {[t for t in late if t not in fresh] or 'none'}, "
            f"new copies not caught up: {', '.join(map(self._where, fresh)) or 'none'}"
        )

    def _where(self, task: str) -> str:
        s = self.last.get(task, {})
        return (
            f"{task} (round {s.get('round')} from {self.first[task]}, lag "
            f"{float(s.get('lag') or 0.0):.2f} s, steady {self.steady.get(task, 0.0):.2f} s"
            f"{', at the end of its input: its lag stays as it was' if s.get('eos') else ''})"
        )


class ContainerDeath(threading.Thread):
    """The moment the killed node's first container process is gone: the failure.

    The node's containers are the children of its containerd shims (whose command line
    names the node's ``containerd.sock``), read before the kill; polled every 10 ms from
    then on. ``nodes kill`` spends most of its time before its SIGKILLs (the CLI's Python
    start-up, a scan of ``/proc``) and some after (waiting for the kernel to reap), so
    neither its start nor its return is the failure."""

    def __init__(self, victim: str) -> None:
        super().__init__(daemon=True)
        self.pids = self._containers(victim)
        self.at: float | None = None
        self.stop = threading.Event()

    @staticmethod
    def _containers(victim: str) -> list[int]:
        found: list[int] = []
        for proc in Path("/proc").iterdir():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if "containerd-shim" in cmd and f"/{victim}/containerd.sock" in cmd:
                    for kids in proc.glob("task/*/children"):
                        found += [int(k) for k in kids.read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def run(self) -> None:
        while self.pids and self.at is None and not self.stop.is_set():
            for pid in self.pids:
                if not Path(f"/proc/{pid}").exists():
                    self.at = time.time()
                    return
            time.sleep(0.01)

    def moment(self, timeout: float) -> float | None:
        """The failure (epoch seconds), waiting up to ``timeout`` for it; ``None`` if no
        container was seen gone by then (the watch stops)."""
        self.join(timeout)
        self.stop.set()
        return self.at
