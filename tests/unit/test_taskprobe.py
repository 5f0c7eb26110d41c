"""A task that waits for a producer that never answers: its pod turns unready, and the
operator asks the task why and says it in the topology's ``Ready`` condition.

The task side is the runtime's own ``GET /ready`` (``backstop_runtime.httpmetrics``), served
on a real socket; the operator side is ``backstop.k8s.taskprobe`` and the supervisor's
``unready_reasons`` → ``pod_states`` → ``derive_conditions``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from backstop.controller.memo import TopologyMemo
from backstop.controller.tick import PROBE_EVERY, pod_states, unready_reasons
from backstop.domain.status import derive_conditions
from backstop_runtime import httpmetrics
from backstop_testkit.support.kubetools import free_port

SILENT = {"unanswered": {"source-0": "it has not registered in the store for 16s"}}


@pytest.fixture
def task() -> Iterator[tuple[int, dict[str, Any]]]:
    """The runtime's endpoint on 127.0.0.1, answering from ``values`` (mutable)."""
    values: dict[str, Any] = dict(SILENT)
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        await httpmetrics.serve(port, "count-0", lambda: values)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(main(), loop).result(5)
    ready.wait(5)
    yield port, values
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def pod(port: int, *, ready: bool, rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "wc--count-0",
            "resourceVersion": rv,
            "labels": {"streams.backstop.dev/task": "count-0"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "task", "ports": [{"name": "metrics", "containerPort": port}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "containerStatuses": [{"name": "task", "ready": ready, "state": {"running": {}}}],
        },
    }


def test_the_ready_condition_names_the_producer_that_never_answers(
    task: tuple[int, dict[str, Any]],
) -> None:
    port, _ = task
    bodies = [pod(port, ready=False)]
    reasons = unready_reasons(TopologyMemo(), bodies, now=0.0)
    assert reasons == {
        "wc--count-0": "NotAnswering: no answer from source-0: it has not registered in the "
        "store for 16s"
    }
    status = {"plan": {"generation": 1, "assignment": {"count-0": "n1"}}}
    ready = {c["type"]: c for c in derive_conditions(1, status, pod_states(bodies, reasons))}[
        "Ready"
    ]
    assert (ready["status"], ready["reason"]) == ("False", "TaskFailing")
    assert "wc--count-0: NotAnswering: no answer from source-0" in ready["message"]


def test_a_ready_pod_is_not_asked_and_a_task_is_asked_again_only_after_a_while(
    task: tuple[int, dict[str, Any]],
) -> None:
    port, values = task
    memo = TopologyMemo()
    assert unready_reasons(memo, [pod(port, ready=True)], now=0.0) == {}
    assert memo.probes == {}
    assert unready_reasons(memo, [pod(port, ready=False)], now=0.0)
    values["unanswered"] = {}  # the producer answers now: the task says it is ready
    assert unready_reasons(memo, [pod(port, ready=False)], now=1.0)  # cached
    assert unready_reasons(memo, [pod(port, ready=False)], now=PROBE_EVERY) == {}
    values.update(SILENT)
    assert unready_reasons(memo, [pod(port, ready=False, rv="2")], now=PROBE_EVERY + 1)


def test_an_unreachable_task_gives_no_reason() -> None:
    assert unready_reasons(TopologyMemo(), [pod(free_port(), ready=False)], now=0.0) == {}
