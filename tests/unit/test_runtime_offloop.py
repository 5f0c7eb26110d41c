"""A task's event loop keeps serving while its store is slow: store calls run in threads
(:mod:`backstop_runtime.offloop`), and the output stays exact.

One task of the wordcount topology runs in this process over a store whose every write
takes half a second (a directory store wrapped to sleep in ``put`` and ``create``, as an
object store far away or retrying does); the other tasks run as processes
(:mod:`backstop_testkit.support.runtime_harness`). A coroutine on the task's loop samples
how late its short sleeps wake (the loop's lag) and a thread asks the task's ``/ready``
over HTTP, while checkpoints, batch-log entries and status writes are in flight. The
sink's output is compared with counts computed here from the input.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from backstop_runtime.blobs import Blobs
from backstop_runtime.config import from_env
from backstop_runtime.task import Task
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(180)
DELAY = 0.5
"""Seconds each write to the slow store takes."""
TICK = 0.02


class SlowBlobs(Blobs):
    """``inner`` whose writes take :data:`DELAY` seconds; it records when each was made."""

    def __init__(self, inner: Blobs, writes: list[tuple[float, float, str]]) -> None:
        self.inner = inner
        self.writes = writes
        """(start, end, key) of every write, in :func:`time.monotonic` seconds."""

    def _slow(self, key: str, write: Callable[[], bool | None]) -> bool | None:
        start = time.monotonic()
        time.sleep(DELAY)
        try:
            return write()
        finally:
            self.writes.append((start, time.monotonic(), key))

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self._slow(key, lambda: self.inner.put(key, data))

    def create(self, key: str, data: bytes) -> bool:
        return bool(self._slow(key, lambda: self.inner.create(key, data)))

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ReadyProbe(threading.Thread):
    """Asks ``/ready`` every 50 ms from its own thread, as the kubelet does from outside;
    records (start, seconds) of every answer (none while the port is closed)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/ready"
        self.answers: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as reply:
                    reply.read()
            except OSError:
                pass  # not listening yet, or stopped
            else:
                self.answers.append((start, time.monotonic() - start))
            time.sleep(0.05)


def spanned(
    writes: list[tuple[float, float, str]], samples: list[tuple[float, float]]
) -> list[str]:
    """The writes that some sample ``(start, seconds)`` spans whole: a write made on the
    loop shows so, since every sample of the loop's lag, and every ``/ready`` answer, in
    flight when it starts ends after it. A busy machine stalls the loop too, now and then,
    but not in step with the writes."""
    return [
        key
        for start, end, key in writes
        if any(s <= start and s + d >= end for s, d in samples if d >= DELAY)
    ]


async def drive(task: Task, until: Callable[[], bool]) -> list[tuple[float, float]]:
    """Run ``task`` on this loop until ``until()``, then stop it as SIGTERM does; return
    (start, lag) of every sample of the loop's lag."""
    stop = asyncio.Event()
    running = asyncio.ensure_future(task.run(stop))
    lags: list[tuple[float, float]] = []
    deadline = time.monotonic() + 150
    while not until():
        assert not running.done(), running.result()
        assert time.monotonic() < deadline, "the stream did not end"
        start = time.monotonic()
        await asyncio.sleep(TICK)
        lags.append((start, time.monotonic() - start - TICK))
    stop.set()
    await running
    return lags


def in_process(
    topo: LocalTopology, task_id: str, port: int
) -> tuple[Task, list[tuple[float, float, str]]]:
    """``task_id`` as this process runs it, its store (and a sink's output) slow; its
    metrics rows, one per minute, come after the run, so that the writer thread's queue
    holds the writes measured and the status reports."""
    env = {**topo.env[task_id], "BACKSTOP_METRICS_PORT": str(port)}
    task = Task(from_env({**env, "BACKSTOP_METRICS_INTERVAL": "60"}))
    writes: list[tuple[float, float, str]] = []
    task.store.blobs = SlowBlobs(task.store.blobs, writes)
    if task.cfg.is_source:
        task.log.blobs = task.store.blobs
    elif task.sink is not None:
        task.sink.out.blobs = SlowBlobs(task.sink.out.blobs, writes)
    return task, writes


@pytest.mark.parametrize(
    ("task_id", "kind", "batch", "per_file"),
    [("sink-0", "/ckpt/", 20, 400), ("source-0", "/batches/", 40, 200)],
    ids=["sink-checkpoints", "source-batch-log"],
)
def test_the_loop_serves_while_slow_writes_are_in_flight(
    task_id: str,
    kind: str,
    batch: int,
    per_file: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``batch`` and ``per_file`` (records per mini-batch, and per input file): as many
    rounds as give a few writes of ``kind`` (a sink checkpoints every tenth round, a source
    logs every round, each write in the queue of the task's writer thread)."""
    inp = tmp_path / "input"
    write_input(inp, files=3, per_file=per_file)
    out = tmp_path / "out"
    topo = LocalTopology(
        "wordcount", wordcount_spec(inp, out, rate=300.0, batch=batch), tmp_path / "store"
    )
    port = free_port()
    monkeypatch.setenv("BACKSTOP_METRICS_PORT", str(port))
    task, writes = in_process(topo, task_id, port)
    probe = ReadyProbe(port)
    for t in topo.tasks:
        if t != task_id:
            topo.start(t)
    probe.start()
    try:
        lags = asyncio.run(drive(task, lambda: topo.status("sink-0").get("eos") is True))
        assert topo.crashed() == {}
    finally:
        probe.done.set()
        topo.stop_all()
    probe.join()

    assert probe.answers, "/ready never answered"
    serving = probe.answers[0][0]  # start-up (claim, restore) is over: the task serves
    in_flight = [w for w in writes if w[0] >= serving and kind in w[2]]
    assert len(in_flight) >= 3, f"too few {kind} writes to measure: {in_flight}"
    stalled = spanned(in_flight, [(t, TICK + lag) for t, lag in lags])
    assert len(stalled) <= len(in_flight) // 3, f"the loop stalled for {stalled}"
    waited = spanned(in_flight, probe.answers)
    assert len(waited) <= len(in_flight) // 3, f"/ready waited for {waited}"
    lines = output_lines(out)
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(inp))
