"""An active replica takes over with no gap: the sink's input goes on when a primary dies.

The word count runs as OS processes (:class:`LocalTopology`, no operator); ``count-0`` gets
an active replica (``BACKSTOP_ROLE=replica``, the copy ``count-0#r0``) and the test pushes
the sink the replica's address as the operator does (``backstop.k8s.peerpush``). The
primary ``count-0`` is SIGKILLed mid-stream and started again only 5 s later (a lost node
and the operator's restart elsewhere). The sink's round, read live from its ``/status``
every 20 ms, must go on advancing through those 5 s (no pause over 2.5 s, a margin for a
loaded CI host; the real-node figure is in docs/benchmarks), and the output must be exactly the
counts computed from the input. The same run without the replica shows the sink stopped for
the whole 5 s, so the check can fail.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from backstop.k8s import peerpush
from backstop_testkit.support.kubetools import free_port
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(300)

DOWN = 5.0
"""Seconds the primary stays dead before its new copy starts."""


def _status(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1) as resp:
            doc = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _round(port: int) -> int | None:
    r = _status(port).get("round")
    return int(r) if isinstance(r, int) else None


class Rounds(threading.Thread):
    """The sink's round over time: ``(monotonic seconds, round)`` whenever it changes."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.seen = port, [(time.monotonic(), -1)]
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            r = _round(self.port)
            if r is not None and r != self.seen[-1][1]:
                self.seen.append((time.monotonic(), r))
            time.sleep(0.02)

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time in ``[start, end]`` without a new round."""
        times = [start, *(t for t, _ in self.seen if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


def _push(port: int, peers: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{port}/peers"
    err = asyncio.run(peerpush.put(url, peerpush.body(1, peers), "tok", timeout=5))
    assert err is None, err


def _run(tmp_path: Path, data: Path, replicated: bool) -> tuple[float, list[str]]:
    """One run with ``count-0`` killed mid-stream; the sink's longest pause while it was
    down, and the output."""
    out = tmp_path / "out"
    spec = wordcount_spec(data, out, rate=300.0, batch=20)
    topo = LocalTopology("wordcount", spec, tmp_path / "store")
    sink_port = free_port()
    topo.env["sink-0"].update(BACKSTOP_METRICS_PORT=str(sink_port), BACKSTOP_PEERS_TOKEN="tok")
    assert "count-0" in topo.env["sink-0"]["BACKSTOP_UPSTREAM_TASKS"].split(",")
    rounds = Rounds(sink_port)
    topo.start_all()
    try:
        topo.wait("the sink to serve", lambda: _round(sink_port) is not None)
        if replicated:
            data_port, metrics_port = free_port(), free_port()
            topo.start(
                "count-0",
                copy="count-0#r0",
                BACKSTOP_ROLE="replica",
                BACKSTOP_REPLICA="0",
                BACKSTOP_PORT=str(data_port),
                BACKSTOP_METRICS_PORT=str(metrics_port),
            )
            _push(sink_port, {"count-0#r0": f"127.0.0.1:{data_port}"})

            def following() -> bool:
                mine, theirs = _round(metrics_port), _round(sink_port)
                return mine is not None and theirs is not None and mine >= theirs > 20

            topo.wait("the replica to follow the primary", following, 60)
        else:
            topo.wait("progress", lambda: (_round(sink_port) or 0) > 20, 60)
        rounds.start()
        time.sleep(1.0)
        assert not topo.status("sink-0").get("eos"), "the kill would come after the end"
        topo.kill("count-0")
        killed = time.monotonic()
        time.sleep(DOWN)
        pause = rounds.longest_pause(killed, time.monotonic())
        assert not topo.status("sink-0").get("eos"), "the stream ended before the restart"
        fed_by = _status(sink_port).get("inputs", {}).get("count-0", {}).get("from")
        assert fed_by == ("count-0#r0" if replicated else "count-0"), fed_by
        topo.start("count-0")  # a new copy: it claims the next epoch, restores, replays
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True, 120)
    finally:
        rounds.done.set()
        topo.stop_all()
    return pause, output_lines(out)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 s of input at 300 records/s per source: the kill comes about 3 s in, the new copy
    :data:`DOWN` seconds later, with a margin for a slow host before the end."""
    folder = tmp_path_factory.mktemp("input")
    write_input(folder, files=2, per_file=3600)
    return folder


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 s of input: enough for a kill and a promotion mid-stream, since the stream cannot
    end while the killed task is neither back nor promoted."""
    folder = tmp_path_factory.mktemp("short")
    write_input(folder, files=2, per_file=1800)
    return folder


def test_the_sink_reads_on_from_the_replica_while_the_primary_is_dead(
    data: Path, tmp_path: Path
) -> None:
    pause, lines = _run(tmp_path, data, replicated=True)
    assert pause < 2.5, f"the sink stopped for {pause:.2f}s after the primary's kill"
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(data))
    print(f"with a replica: the sink's longest pause while count-0 was down {pause:.2f}s")


def test_without_the_replica_the_sink_waits_for_the_new_copy(data: Path, tmp_path: Path) -> None:
    pause, lines = _run(tmp_path, data, replicated=False)
    assert pause > DOWN - 1.0, f"the sink went on ({pause:.2f}s) with its input dead"
    assert counts_of(lines) == dict(expected_counts(data))


def _start_replica(topo: LocalTopology, task: str) -> tuple[int, int]:
    """Start replica 0 of ``task`` (a copy named ``<task>#r0`` taking pushes with the token
    ``tok``); its data and metrics ports."""
    data_port, metrics_port = free_port(), free_port()
    topo.start(
        task,
        copy=f"{task}#r0",
        BACKSTOP_ROLE="replica",
        BACKSTOP_REPLICA="0",
        BACKSTOP_PORT=str(data_port),
        BACKSTOP_METRICS_PORT=str(metrics_port),
        BACKSTOP_PEERS_TOKEN="tok",
    )
    return data_port, metrics_port


def _promote(metrics_port: int, version: int) -> None:
    """The operator's push that makes the copy behind ``metrics_port`` its task's primary."""
    url = f"http://127.0.0.1:{metrics_port}/peers"
    err = asyncio.run(peerpush.put(url, peerpush.body(version, {}, promote=1), "tok", timeout=5))
    assert err is None, err


def _exact(out: Path, data: Path) -> None:
    lines = output_lines(out)
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(data))


def _checkpoints(topo: LocalTopology, task: str) -> list[int]:
    return sorted(int(p.stem) for p in topo.store.glob(f"**/tasks/{task}/ckpt/*.json"))


def test_a_promoted_replica_becomes_the_primary_with_no_restart(
    short: Path, tmp_path: Path
) -> None:
    """``count-0``'s replica is promoted when its primary dies and the primary never
    comes back: the stream ends with the exact counts, the promoted copy claims the next
    epoch, checkpoints and writes the task's status; a copy of the old primary started
    afterwards with its old environment (a zombie the kubelet restarts) finds itself
    fenced and fences nobody."""
    out = tmp_path / "out"
    spec = wordcount_spec(short, out, rate=300.0, batch=20)
    topo = LocalTopology("wordcount", spec, tmp_path / "store")
    sink_port = free_port()
    topo.env["sink-0"].update(BACKSTOP_METRICS_PORT=str(sink_port), BACKSTOP_PEERS_TOKEN="tok")
    topo.start_all()
    try:
        topo.wait("the sink to serve", lambda: _round(sink_port) is not None)
        data_port, metrics_port = _start_replica(topo, "count-0")
        _push(sink_port, {"count-0#r0": f"127.0.0.1:{data_port}"})
        topo.wait(
            "the replica to follow the primary",
            lambda: (_round(metrics_port) or 0) >= (_round(sink_port) or 0) > 20,
            60,
        )
        assert _status(metrics_port).get("epoch") == 0, "a replica claims no epoch"
        assert not topo.status("sink-0").get("eos"), "the kill would come after the end"
        topo.kill("count-0")
        before = _checkpoints(topo, "count-0")
        _promote(metrics_port, version=2)
        topo.wait("the promotion", lambda: (_status(metrics_port).get("epoch") or 0) > 1, 30)
        topo.start("count-0")  # the old primary again, with its old environment
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True, 120)
        assert topo.status("count-0").get("eos") is True, "the promoted copy writes the status"
        assert max(_checkpoints(topo, "count-0")) > max(before, default=0)
        assert "promoted to primary" in topo.log("count-0#r0")
        assert "fenced" in topo.log("count-0"), topo.log("count-0")[-2000:]
        assert "Fenced" not in topo.log("count-0#r0")
    finally:
        topo.stop_all()
    _exact(out, short)


def test_a_standing_by_replica_of_a_source_is_promoted_and_reads_on(
    short: Path, tmp_path: Path
) -> None:
    """A source's replica only stands by, with its metrics port open; promoted after its
    primary's death, it starts as the primary (claims, restores the batch log, serves the
    tokenizers) in its own process: the stream ends with the exact counts, and the dead
    primary is never started again."""
    out = tmp_path / "out"
    spec = wordcount_spec(short, out, rate=300.0, batch=20)
    topo = LocalTopology("wordcount", spec, tmp_path / "store")
    topo.start_all()
    try:
        _, metrics_port = _start_replica(topo, "source-0")
        topo.wait("the standby's endpoint", lambda: _status(metrics_port) != {}, 30)
        topo.wait("progress", lambda: (topo.status("sink-0").get("round") or 0) > 20, 60)
        topo.kill("source-0")
        logged = int(topo.status("source-0").get("round") or 0)
        _promote(metrics_port, version=1)
        topo.wait("the promotion", lambda: (_status(metrics_port).get("epoch") or 0) > 1, 30)
        resumed = int(_status(metrics_port).get("round") or 0)
        assert resumed >= logged, f"the promoted source read its input again from {resumed}"
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True, 120)
        assert topo.status("source-0").get("eos") is True
        read_on = int(topo.status("source-0").get("round") or 0)
        assert read_on > resumed, f"the promoted source read nothing after round {resumed}"
        assert "stands by" in topo.log("source-0#r0")
    finally:
        topo.stop_all()
    _exact(out, short)
