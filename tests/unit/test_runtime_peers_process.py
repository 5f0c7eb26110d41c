"""A task process follows the peer map pushed to it, over its registry entry.

The word count runs as OS processes (:class:`LocalTopology`, no operator); the sink gets a
peer token and a metrics port, and the test pushes as the operator does
(``backstop.k8s.peerpush``): a map naming a dead address for the sink's producer makes it
unready, naming the producer's real address again makes it ready, both within seconds,
while the store's registry named the live producer all along.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from backstop.k8s import peerpush
from backstop_testkit.support.kubetools import free_port
from backstop_testkit.support.runtime_data import wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(180)


def _ready(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def _push(port: int, version: int, peers: dict[str, str], token: str | None) -> str | None:
    url = f"http://127.0.0.1:{port}/peers"
    return asyncio.run(peerpush.put(url, peerpush.body(version, peers), token, timeout=5))


def test_a_task_process_follows_the_map_pushed_to_it(tmp_path: Path) -> None:
    inp = tmp_path / "input"
    write_input(inp, files=2, per_file=4000)
    topo = LocalTopology(
        "wordcount",
        wordcount_spec(inp, tmp_path / "out", rate=400.0, batch=20),
        tmp_path / "store",
    )
    port = free_port()
    sink = topo.env["sink-0"]
    sink.update(
        BACKSTOP_METRICS_PORT=str(port), BACKSTOP_PEERS_TOKEN="tok", BACKSTOP_PEER_TIMEOUT="1"
    )
    producer = sink["BACKSTOP_UPSTREAM_TASKS"].split(",")[0]
    topo.start_all()
    try:
        topo.wait("the sink to be ready", lambda: _ready(port)[0] == 200)
        key = f"{topo.root_key}/peers/{producer}.json"
        # ready says no producer went unanswered yet, not that this one has registered
        topo.wait(f"{producer} registered", lambda: topo.blobs.get(key) is not None)
        registered = json.loads(topo.blobs.get(key) or b"")
        real = f"{registered['host']}:{registered['port']}"

        refused = _push(port, 1, {producer: "127.0.0.1:1"}, None)
        assert refused is not None and "401" in refused
        assert _push(port, 1, {producer: "127.0.0.1:1"}, "tok") is None

        why = f"no answer from {producer}: cannot connect to 127.0.0.1:1 (pushed by the operator)"
        topo.wait("the sink to follow the pushed address", lambda: why in _ready(port)[1], 15)

        assert _push(port, 2, {producer: real}, "tok") is None
        topo.wait("the sink to reach its producer again", lambda: _ready(port)[0] == 200, 15)
        before = topo.status("sink-0").get("round", 0)
        topo.wait("progress", lambda: topo.status("sink-0").get("round", 0) > before + 3)
        # a late retry of the first push changes nothing
        assert _push(port, 1, {producer: "127.0.0.1:1"}, "tok") is None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/peers", timeout=5) as resp:
            shown = json.loads(resp.read())
        assert shown == {"version": 2, "peers": {producer: real}}
    finally:
        topo.stop_all()
