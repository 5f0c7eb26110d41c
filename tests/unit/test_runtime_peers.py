"""The peer map the operator pushes: ``PUT /peers`` on a task's metrics port, and its
precedence over the store's peer registry when a consumer looks for its producer."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime import httpmetrics, inputs, wire
from backstop_runtime.api import Record
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.engine import Batch
from backstop_runtime.peermap import PushedPeers
from backstop_runtime.store import Store

TOKEN = "peers-token-of-this-topology"


def _cfg(store: Path, task: str) -> TaskConfig:
    return from_env(
        {
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": task,
            "BACKSTOP_OPERATOR": task.rsplit("-", 1)[0],
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_STORE": str(store),
        }
    )


def _request(
    port: int, method: str, path: str, body: bytes | None = None, token: str | None = None
) -> tuple[int, str]:
    """``(status, body)`` of one real HTTP request to 127.0.0.1:``port``."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _push(port: int, version: Any, peers: Any, token: str | None = TOKEN) -> tuple[int, str]:
    body = json.dumps({"version": version, "peers": peers}).encode()
    return _request(port, "PUT", "/peers", body, token)


async def _apush(port: int, version: Any, peers: Any, token: str | None = TOKEN) -> tuple[int, str]:
    """:func:`_push` off the event loop that serves the endpoint."""
    return await asyncio.to_thread(_push, port, version, peers, token)


@asynccontextmanager
async def _endpoint(peers: PushedPeers, token: str | None) -> AsyncIterator[int]:
    """The task's HTTP endpoint on a free port of 127.0.0.1; yields the port."""
    server = await httpmetrics.serve(0, "sink-0", lambda: {"round": 3}, peers=peers, token=token)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def test_a_push_needs_the_topology_token(caplog: pytest.LogCaptureFixture) -> None:
    peers = PushedPeers()

    async def run() -> list[tuple[int, str]]:
        async with _endpoint(peers, TOKEN) as port:
            return [
                await _apush(port, 1, {"src-0": "10.0.0.1:7077"}, None),
                await _apush(port, 1, {"src-0": "10.0.0.1:7077"}, "wrong"),
                await _apush(port, 2, {"src-0": "10.0.0.2:7077"}, TOKEN),
            ]

    with caplog.at_level(logging.DEBUG):
        missing, wrong, right = asyncio.run(run())
    assert missing[0] == 401 and wrong[0] == 401
    assert right[0] == 200 and json.loads(right[1]) == {"taken": True, "version": 2}
    assert peers.address("src-0") == ("10.0.0.2", 7077)
    assert not [r for r in caplog.records if r.exc_info]


def test_without_a_token_any_push_is_taken() -> None:
    peers = PushedPeers()

    async def run() -> tuple[int, str]:
        async with _endpoint(peers, "") as port:
            return await _apush(port, 1, {"src-0": "[fd00::1]:7077"}, None)

    assert asyncio.run(run())[0] == 200
    assert peers.address("src-0") == ("fd00::1", 7077)


def test_an_older_version_is_ignored_and_a_newer_one_replaces_the_map() -> None:
    peers = PushedPeers()

    async def run() -> list[tuple[int, str]]:
        async with _endpoint(peers, TOKEN) as port:
            answers = [
                await asyncio.to_thread(
                    _push, port, 5, {"a-0": "10.0.0.5:7077", "b-0": "10.0.0.6:1"}
                ),
                await _apush(port, 3, {"a-0": "10.0.0.3:7077"}),  # late retry
                await _apush(port, 5, {"a-0": "10.0.0.9:7077"}),  # same version
            ]
            assert peers.address("a-0") == ("10.0.0.5", 7077)
            answers.append(await _apush(port, 6, {"a-0": "10.0.0.7:7077"}))
            answers.append(await asyncio.to_thread(_request, port, "GET", "/peers"))
            return answers

    first, older, same, newer, shown = asyncio.run(run())
    assert [json.loads(a[1])["taken"] for a in (first, older, same, newer)] == [
        True,
        False,
        False,
        True,
    ]
    assert json.loads(older[1])["version"] == 5
    assert peers.address("a-0") == ("10.0.0.7", 7077)
    assert peers.address("b-0") is None  # the newer map no longer names it
    assert json.loads(shown[1]) == {"version": 6, "peers": {"a-0": "10.0.0.7:7077"}}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"version": "7", "peers": {}}',
        b'{"version": true, "peers": {}}',
        b'{"version": 7, "peers": ["a-0"]}',
        b'{"version": 7, "peers": {"a-0": "10.0.0.1"}}',
        b'{"version": 7, "peers": {"a-0": "10.0.0.1:0"}}',
        b'{"version": 7, "peers": {"a-0": 7077}}',
        b"\xff\xfe",
    ],
)
def test_a_bad_body_is_a_400_and_changes_nothing(
    body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    peers = PushedPeers()
    peers.update(1, {"a-0": ("10.0.0.1", 7077)})

    async def run() -> tuple[tuple[int, str], tuple[int, str]]:
        async with _endpoint(peers, TOKEN) as port:
            bad = await asyncio.to_thread(_request, port, "PUT", "/peers", body, TOKEN)
            after = await asyncio.to_thread(_request, port, "GET", "/metrics")
            return bad, after

    with caplog.at_level(logging.DEBUG):
        (code, text), (metrics_code, metrics) = asyncio.run(run())
    assert code == 400 and text.strip() and "Traceback" not in text
    assert peers.version == 1 and peers.address("a-0") == ("10.0.0.1", 7077)
    assert metrics_code == 200 and 'backstop_task_round{task="sink-0"} 3.0' in metrics
    assert not [r for r in caplog.records if r.exc_info]


def test_the_pushed_map_wins_over_the_registry(tmp_path: Path) -> None:
    producer = Store(_cfg(tmp_path, "b-0"))
    producer.claim_epoch()
    producer.publish_address("10.0.0.1", 7077)
    consumer = Store(_cfg(tmp_path, "c-0"))
    consumer.pushed = PushedPeers()
    assert consumer.peer("b-0") == {"host": "10.0.0.1", "port": 7077, "epoch": 1}
    consumer.pushed.update(1, {"b-0": ("10.0.0.2", 7078), "x-0": ("10.0.0.9", 1)})
    assert consumer.peer("b-0") == {"host": "10.0.0.2", "port": 7078}
    # a task the map does not name is looked up in the registry
    assert consumer.peer("d-0") is None
    other = Store(_cfg(tmp_path, "d-0"))
    other.claim_epoch()
    other.publish_address("10.0.0.4", 7077)
    assert consumer.peer("d-0") == {"host": "10.0.0.4", "port": 7077, "epoch": 1}
    # the map no longer names b-0 (its pod is gone): the registry again
    consumer.pushed.update(2, {})
    assert consumer.peer("b-0") == {"host": "10.0.0.1", "port": 7077, "epoch": 1}


async def _producer(mark: str) -> asyncio.Server:
    """A producer speaking the wire protocol: batches from the subscribed one on, one
    every 20 ms, each with one record ``mark`` (which copy sent it)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sub = await wire.read(reader)
            r = int(sub["from"])
            while True:
                batch = Batch(r, [Record(mark, None, 0.0)], 0.0, False, time.time())
                writer.write(wire.encode(batch.to_msg()))
                await writer.drain()
                r += 1
                await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, host="127.0.0.1", port=0)


def test_a_consumer_follows_a_pushed_move_within_a_fraction_of_a_second(
    tmp_path: Path,
) -> None:
    """The registry keeps naming the old copy, which keeps serving: only the push can
    move the consumer, and it moves over a real connection to the new address."""
    peers = PushedPeers()
    consumer = Store(_cfg(tmp_path, "sink-0"))
    consumer.pushed = peers
    registered = Store(_cfg(tmp_path, "src-0"))
    registered.claim_epoch()

    async def run() -> tuple[float, list[str]]:
        old, new = await _producer("old"), await _producer("new")
        registered.publish_address("127.0.0.1", old.sockets[0].getsockname()[1])
        new_port = new.sockets[0].getsockname()[1]
        seen: list[str] = []
        moved_after = float("inf")
        async with _endpoint(peers, TOKEN) as port:
            batches = inputs.stream(consumer, "src-0", consumer="sink-0", epoch=1, start=1)
            pushed_at = None
            async for batch, _ in batches:
                seen.append(batch.recs[0].value)
                if len(seen) == 5:  # settled on the old copy: now the operator pushes
                    code, _ = await asyncio.to_thread(
                        _push, port, 1, {"src-0": f"127.0.0.1:{new_port}"}
                    )
                    assert code == 200
                    pushed_at = time.monotonic()
                if seen[-1] == "new":
                    assert pushed_at is not None
                    moved_after = time.monotonic() - pushed_at
                    break
                if len(seen) > 200:
                    break
            await batches.aclose()
        for s in (old, new):
            s.close()
        return moved_after, seen

    moved_after, seen = asyncio.run(run())
    assert seen[:5] == ["old"] * 5
    assert seen[-1] == "new", "the consumer never reached the pushed address"
    assert moved_after < 0.5
