"""``GET /metrics`` (Prometheus text), ``GET /status`` (JSON) and ``GET /ready`` on
``BACKSTOP_METRICS_PORT``.

The JSON-lines rows in the store feed the re-optimization job; this endpoint is for live
scraping and for probes. ``/ready`` is the pod's readiness probe: 503 with one line per
producer that has not answered for ``BACKSTOP_PEER_TIMEOUT`` seconds (the operator reads
that body into the topology's ``Ready`` condition), 200 otherwise. It is a few lines of
asyncio on purpose: the runtime image ships the standard library only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

METRICS = (
    ("tuples_in_total", "counter", "Records processed."),
    ("tuples_out_total", "counter", "Records emitted."),
    ("dead_letters_total", "counter", "Malformed or late records kept aside."),
    ("checkpoints_total", "counter", "Checkpoints taken (a source: batches logged)."),
    ("checkpoint_seconds_total", "counter", "Time spent taking checkpoints."),
    ("replayed_batches_total", "counter", "Batches regenerated for consumers."),
    ("replay_seconds_total", "counter", "Time spent regenerating batches."),
    ("round", "gauge", "The last mini-batch processed and sent."),
    ("lag_seconds", "gauge", "Age of the input of the last mini-batch."),
    ("recovery_seconds", "gauge", "Start to caught up, for this copy (NaN until then)."),
    ("epoch", "gauge", "This copy's epoch (starts of the task so far)."),
)


REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


def readiness(values: dict[str, Any]) -> tuple[int, str]:
    """The ``/ready`` answer: 503 and why while a producer does not answer, or for good
    once the copy is fenced (a newer copy of its task runs).

    >>> readiness({"unanswered": {}})
    (200, 'ready\\n')
    >>> readiness({"unanswered": {"source-0": "has not registered for 31s"}})
    (503, 'no answer from source-0: has not registered for 31s\\n')
    >>> readiness({"fenced": "sink-0: epoch 1 superseded by a newer copy"})
    (503, 'fenced: sink-0: epoch 1 superseded by a newer copy\\n')
    """
    if values.get("fenced"):
        return 503, f"fenced: {values['fenced']}\n"
    silent = values.get("unanswered") or {}
    if not silent:
        return 200, "ready\n"
    return 503, "".join(f"no answer from {p}: {why}\n" for p, why in sorted(silent.items()))


def prometheus(task: str, values: dict[str, Any]) -> str:
    lines = []
    for name, kind, doc in METRICS:
        full = f"backstop_task_{name}"
        value = values.get(name)
        lines += [f"# HELP {full} {doc}", f"# TYPE {full} {kind}"]
        lines.append(f'{full}{{task="{task}"}} {"NaN" if value is None else float(value)}')
    return "\n".join(lines) + "\n"


async def serve(port: int, task: str, snapshot: Callable[[], dict[str, Any]]) -> asyncio.Server:
    """Start the endpoint; ``snapshot()`` gives the current values (see :data:`METRICS`)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readline()).decode("latin-1").split()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # headers
            path = request[1] if len(request) > 1 else "/"
            if path == "/metrics":
                body, ctype, code = prometheus(task, snapshot()), "text/plain; version=0.0.4", 200
            elif path == "/status":
                body, ctype, code = json.dumps(snapshot()), "application/json", 200
            elif path == "/ready":
                (code, body), ctype = readiness(snapshot()), "text/plain"
            else:
                body, ctype, code = "not found\n", "text/plain", 404
            data = body.encode()
            head = f"HTTP/1.0 {code} {REASONS.get(code, 'Error')}\r\n"
            head += f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\n\r\n"
            writer.write(head.encode() + data)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host="0.0.0.0", port=port)
