"""A consumer names a silent or broken producer at ``GET /suspects`` within about a second.

The word count runs as OS processes (:class:`LocalTopology`, no operator). A producer
stopped with SIGSTOP stands for a machine that vanished without a FIN: its connection stays
open and silent, and only the heartbeats' absence tells. SIGKILL breaks the connection (the
kernel closes it), which the consumer notices at once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from backstop_testkit.support.kubetools import free_port
from backstop_testkit.support.runtime_data import wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(180)


def _suspects(port: int) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/suspects", timeout=5) as resp:
        doc = json.loads(resp.read())
    assert isinstance(doc, list)
    return doc


def _named(port: int, task: str) -> dict[str, object] | None:
    return next((s for s in _suspects(port) if s["task"] == task), None)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[LocalTopology, int, str]]:
    """The word count under way; the sink's metrics port and its first producer."""
    inp = tmp_path / "input"
    write_input(inp, files=2, per_file=20000)
    topo = LocalTopology(
        "wordcount", wordcount_spec(inp, tmp_path / "out", rate=300.0, batch=20), tmp_path / "s"
    )
    port = free_port()
    topo.env["sink-0"]["BACKSTOP_METRICS_PORT"] = str(port)
    producer = topo.env["sink-0"]["BACKSTOP_UPSTREAM_TASKS"].split(",")[0]
    topo.start_all()
    try:
        topo.wait("the sink to make progress", lambda: topo.status("sink-0").get("round", 0) > 3)
        yield topo, port, producer
    finally:
        for proc in topo.procs.values():
            proc.send_signal(signal.SIGCONT)
        topo.stop_all()


def test_a_stopped_producer_is_suspected_within_two_seconds_and_cleared_when_it_resumes(
    running: tuple[LocalTopology, int, str],
) -> None:
    topo, port, producer = running
    assert _suspects(port) == [], "nobody is suspected while everything runs"
    topo.procs[producer].send_signal(signal.SIGSTOP)
    stopped = time.time()
    topo.wait(
        "the sink to suspect its stopped producer", lambda: _named(port, producer) is not None, 10
    )
    noticed = time.time() - stopped
    found = _named(port, producer)
    assert found is not None and "silent" in str(found["reason"]), found
    assert noticed < 2.5, f"noticed after {noticed:.2f}s"
    assert stopped - 1.5 <= float(str(found["since"])) <= stopped + 1.5, (found, stopped)

    topo.procs[producer].send_signal(signal.SIGCONT)
    topo.wait("the suspicion to clear", lambda: _named(port, producer) is None, 10)


def test_a_killed_producer_is_suspected_at_once(
    running: tuple[LocalTopology, int, str],
) -> None:
    topo, port, producer = running
    topo.kill(producer)
    killed = time.time()
    topo.wait(
        "the sink to suspect its killed producer", lambda: _named(port, producer) is not None, 10
    )
    noticed = time.time() - killed
    found = _named(port, producer)
    assert found is not None and "silent" not in str(found["reason"]), found
    assert noticed < 0.8, f"noticed after {noticed:.2f}s"


async def _idle_connection(beats: bool, reads: int) -> list[dict[str, object]]:
    """Serve one idle connection (with or without heartbeats), read ``reads`` frames from
    it or time out, and return the suspicions made meanwhile."""
    from backstop_runtime import suspects

    suspects.SUSPECTS.clear()
    served: list[asyncio.Future[None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if beats:
            served.append(suspects.beat(writer))
        await asyncio.sleep(10)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen = []
    try:
        for _ in range(reads):
            msg = await asyncio.wait_for(suspects.read(reader, "idle-0", never), 1.6)
            seen.append(msg["t"])
            await asyncio.sleep(0.2)
    except TimeoutError:
        pass
    finally:
        writer.close()
        for f in served:
            f.cancel()
        server.close()
    assert seen == ["hb"] * len(seen)
    return suspects.snapshot()


def test_heartbeats_keep_an_idle_producer_unsuspected() -> None:
    from backstop_runtime import suspects

    assert suspects.SUSPECT_AFTER == 1.0
    assert asyncio.run(_idle_connection(beats=True, reads=8)) == []  # 8 × 0.2 s > 1 s


def test_an_idle_connection_without_heartbeats_is_suspected() -> None:
    found = asyncio.run(_idle_connection(beats=False, reads=1))
    assert [(s["task"], str(s["reason"]).startswith("silent for")) for s in found] == [
        ("idle-0", True)
    ]


def test_a_stopped_consumer_is_suspected_by_its_producer(tmp_path: Path) -> None:
    """The other way round: the sink stops (SIGSTOP, no FIN) and a task it reads from names
    it within seconds, so a node whose tasks only read from others is noticed too."""
    inp = tmp_path / "input"
    write_input(inp, files=2, per_file=20000)
    topo = LocalTopology(
        "wordcount", wordcount_spec(inp, tmp_path / "out", rate=300.0, batch=20), tmp_path / "s"
    )
    producer = topo.env["sink-0"]["BACKSTOP_UPSTREAM_TASKS"].split(",")[0]
    port = free_port()
    topo.env[producer]["BACKSTOP_METRICS_PORT"] = str(port)
    topo.start_all()
    try:
        topo.wait("the sink to make progress", lambda: topo.status("sink-0").get("round", 0) > 3)
        assert _named(port, "sink-0") is None, "nobody is suspected while everything runs"
        topo.procs["sink-0"].send_signal(signal.SIGSTOP)
        stopped = time.time()
        topo.wait(
            "the producer to suspect the sink", lambda: _named(port, "sink-0") is not None, 10
        )
        noticed = time.time() - stopped
        found = _named(port, "sink-0")
        assert found is not None and "silent" in str(found["reason"]), found
        assert noticed < 2.5, f"noticed after {noticed:.2f}s"
        topo.procs["sink-0"].send_signal(signal.SIGCONT)
        topo.wait("the suspicion to clear", lambda: _named(port, "sink-0") is None, 10)
    finally:
        for proc in topo.procs.values():
            proc.send_signal(signal.SIGCONT)
        topo.stop_all()
