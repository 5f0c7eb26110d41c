"""A task's ``/metrics`` says what its ``/ready`` says: ``backstop_task_ready`` and
``backstop_task_fenced``, for a copy that waits on a producer and for a fenced copy
standing by (``backstop_runtime.main.stand_by``, the code path of a copy that a newer one
fenced out), each read over a real socket next to its ``/ready`` answer.
"""

from __future__ import annotations

import asyncio
import math
import urllib.error
import urllib.request
from typing import Any

import pytest

from backstop_runtime import httpmetrics
from backstop_runtime.main import stand_by
from backstop_testkit.support.exposition import parse, values
from backstop_testkit.support.kubetools import free_port

pytestmark = pytest.mark.timeout(60)


def get(port: int, path: str) -> tuple[int, str]:
    """``GET path`` on the endpoint: its status code and body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def scrape(port: int) -> tuple[int, dict[str, float], str]:
    """``/ready``'s code, ``/metrics``' values and its raw text, off the event loop."""
    code, _ = await asyncio.to_thread(get, port, "/ready")
    _, text = await asyncio.to_thread(get, port, "/metrics")
    return code, values(text), text


def test_a_fenced_copy_standing_by_exports_fenced_and_not_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    monkeypatch.setenv("BACKSTOP_METRICS_PORT", str(port))

    async def main() -> tuple[int, dict[str, float], str]:
        stop = asyncio.Event()
        waiting = asyncio.ensure_future(stand_by("sink-0", "epoch 1 superseded by 2", stop))
        for _ in range(100):  # until it listens
            await asyncio.sleep(0.05)
            try:
                got = await scrape(port)
                break
            except OSError:
                continue
        else:
            raise AssertionError("stand_by never served /metrics")
        stop.set()
        await asyncio.wait_for(waiting, 5)
        return got

    code, got, text = asyncio.run(main())
    assert code == 503
    assert got["backstop_task_fenced"] == 1.0 and got["backstop_task_ready"] == 0.0
    assert math.isnan(got["backstop_task_tuples_in_total"])  # a fenced copy counts nothing
    assert {s.labels["task"] for s in parse(text)} == {"sink-0"}


def test_ready_follows_the_producers_a_task_waits_for() -> None:
    values_now: dict[str, Any] = {"unanswered": {"source-0": "has not registered for 31s"}}
    port = free_port()

    async def main() -> list[tuple[int, dict[str, float], str]]:
        server = await httpmetrics.serve(port, "count-0", lambda: values_now, token="t")
        try:
            waiting = await scrape(port)
            values_now["unanswered"] = {}
            answered = await scrape(port)
        finally:
            server.close()
        return [waiting, answered]

    (code_w, waiting, _), (code_a, answered, _) = asyncio.run(main())
    assert (code_w, waiting["backstop_task_ready"], waiting["backstop_task_fenced"]) == (503, 0, 0)
    assert (code_a, answered["backstop_task_ready"], answered["backstop_task_fenced"]) == (
        200,
        1,
        0,
    )
