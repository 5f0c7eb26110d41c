"""``GET /metrics`` (Prometheus text), ``GET /status`` (JSON), ``GET /ready``,
``GET /suspects`` and ``PUT /peers`` on ``BACKSTOP_METRICS_PORT``.

The JSON-lines rows in the store feed the re-optimization job; this endpoint is for live
scraping and for probes. ``/ready`` is the pod's readiness probe: 503 with one line per
producer that has not answered for ``BACKSTOP_PEER_TIMEOUT`` seconds (the operator reads
that body into the topology's ``Ready`` condition), 200 otherwise. ``GET /suspects`` lists
the producers this task suspects to be lost (:mod:`backstop_runtime.suspects`), for the
operator to confirm; it needs no token (it changes nothing). ``PUT /peers`` is
where the operator tells the task where its producers are (:mod:`backstop_runtime.peermap`);
when ``BACKSTOP_PEERS_TOKEN`` is set (the operator's per-topology Secret) it needs
``Authorization: Bearer <token>`` (401 otherwise), and a body that is not a peer map is a
400. It is a few lines of asyncio on purpose: the runtime image ships the standard library
only.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from backstop_runtime import peermap, suspects

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
    ("ready", "gauge", "1 while GET /ready answers 200, 0 while it answers 503."),
    ("fenced", "gauge", "1 once a newer copy of the task fenced this one out."),
)
"""The series of ``GET /metrics``, ``backstop_task_<name>{task="<copy>"}``: counters and
gauges the task keeps (:meth:`backstop_runtime.task.Task._values`), and ``ready`` and
``fenced``, which :func:`probes` derives from what ``/ready`` answers."""


REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    503: "Service Unavailable",
}


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


def probes(values: dict[str, Any]) -> dict[str, int]:
    """``ready`` and ``fenced`` as numbers, from the same values ``/ready`` reads, so a
    dashboard shows what the readiness probe sees.

    >>> probes({"unanswered": {}})
    {'ready': 1, 'fenced': 0}
    >>> probes({"fenced": "sink-0: epoch 1 superseded by a newer copy"})
    {'ready': 0, 'fenced': 1}
    """
    code, _ = readiness(values)
    return {"ready": int(code == 200), "fenced": int(bool(values.get("fenced")))}


def prometheus(task: str, values: dict[str, Any]) -> str:
    """The Prometheus text of :data:`METRICS` for the copy ``task``; a value the task has
    not set (or not yet, e.g. ``recovery_seconds``) is ``NaN``."""
    current = {**values, **probes(values)}
    lines = []
    for name, kind, doc in METRICS:
        full = f"backstop_task_{name}"
        value = current.get(name)
        lines += [f"# HELP {full} {doc}", f"# TYPE {full} {kind}"]
        lines.append(f'{full}{{task="{task}"}} {"NaN" if value is None else float(value)}')
    return "\n".join(lines) + "\n"


class _Request:
    """One HTTP request as :func:`serve` reads it."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body


async def _read_request(reader: asyncio.StreamReader) -> _Request | int:
    """The request on ``reader``, or the status code that refuses it (400, 413)."""
    request = (await reader.readline()).decode("latin-1").split()
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    method = request[0].upper() if request else "GET"
    path = request[1] if len(request) > 1 else "/"
    body = b""
    if method in ("PUT", "POST"):
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            return 400
        if length < 0:
            return 400
        if length > peermap.MAX_BODY:
            return 413
        try:
            body = await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            return 400
    return _Request(method, path, headers, body)


def authorized(headers: Mapping[str, str], token: str | None) -> bool:
    """Whether a request may change the peer map: always without a token, else only
    with ``Authorization: Bearer <token>`` (compared in constant time).

    >>> authorized({}, None), authorized({}, "s3cret")
    (True, False)
    >>> authorized({"authorization": "Bearer s3cret"}, "s3cret")
    True
    """
    if not token:
        return True
    scheme, _, given = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


def put_peers(request: _Request, peers: peermap.PushedPeers, token: str | None) -> tuple[int, str]:
    """The answer to ``PUT /peers``: 401 without the token, 400 for a body that is not
    a peer map, 200 (and whether the map was taken, or was older than the one held)."""
    if not authorized(request.headers, token):
        return 401, "a bearer token is required\n"
    try:
        version, addresses = peermap.parse(request.body)
    except ValueError as err:
        return 400, f"{err}\n"
    taken = peers.update(version, addresses)
    if (epoch := peermap.promotion(request.body)) is not None:
        peers.promote(epoch)
    return 200, json.dumps({"taken": taken, "version": peers.version}) + "\n"


def _answer(
    request: _Request,
    task: str,
    snapshot: Callable[[], dict[str, Any]],
    peers: peermap.PushedPeers,
    token: str | None,
) -> tuple[int, str, str]:
    """``(code, content type, body)`` for ``request``."""
    path = request.path
    if path == "/peers" and request.method == "PUT":
        code, body = put_peers(request, peers, token)
        return code, "application/json" if code == 200 else "text/plain", body
    if request.method != "GET":
        return 405, "text/plain", "method not allowed\n"
    if path == "/metrics":
        return 200, "text/plain; version=0.0.4", prometheus(task, snapshot())
    if path == "/status":
        return 200, "application/json", json.dumps(snapshot())
    if path == "/ready":
        code, body = readiness(snapshot())
        return code, "text/plain", body
    if path == "/peers":
        return 200, "application/json", json.dumps(peers.snapshot())
    if path == "/suspects":
        return 200, "application/json", json.dumps(suspects.snapshot())
    return 404, "text/plain", "not found\n"


async def serve(
    port: int,
    task: str,
    snapshot: Callable[[], dict[str, Any]],
    *,
    peers: peermap.PushedPeers | None = None,
    token: str | None = None,
) -> asyncio.Server:
    """Start the endpoint; ``snapshot()`` gives the current values (see :data:`METRICS`).

    ``PUT /peers`` updates ``peers`` (the process's :data:`~backstop_runtime.peermap.PUSHED`
    by default), guarded by ``token`` (``BACKSTOP_PEERS_TOKEN`` by default; none: open).
    """
    held = peermap.PUSHED if peers is None else peers
    secret = os.environ.get("BACKSTOP_PEERS_TOKEN") if token is None else token

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if isinstance(request, int):
                code, ctype, body = request, "text/plain", "bad request\n"
            else:
                code, ctype, body = _answer(request, task, snapshot, held, secret)
            data = body.encode()
            head = f"HTTP/1.0 {code} {REASONS.get(code, 'Error')}\r\n"
            head += f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\n\r\n"
            writer.write(head.encode() + data)
            await writer.drain()
        except (ConnectionError, ValueError, asyncio.CancelledError):
            pass  # the client went away, or sent a line longer than the reader's limit
        finally:
            writer.close()

    return await asyncio.start_server(handle, host="0.0.0.0", port=port)
