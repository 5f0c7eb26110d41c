"""Asking task pods what they suspect (``GET /suspects``) and whether they answer at all.

Both go to the task's metrics port (``runtime/backstop_runtime/httpmetrics.py``), without a
token: neither changes anything. Requests go out concurrently, each with a short timeout,
from a few lines of asyncio on Kopf's event loop (as :mod:`backstop.k8s.peerpush`): a
topology's round holds no thread per pod.

A probe counts any HTTP answer (``/ready`` says 503 while a producer is silent) as alive:
only the task process itself answers HTTP, so a pod that answers runs, and its node with it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Hashable, Sequence
from typing import TypeVar

from backstop.domain.dataplane import Suspicion, TaskPod, parse_suspects

K = TypeVar("K", bound=Hashable)

TIMEOUT = 0.5
"""Seconds one request may take, connection included."""
TRIES = 2
"""Probes of a suspected node's pod before it counts as not answering."""
CONCURRENCY = 64
"""Requests in flight at once."""
MAX_ANSWER = 256 * 1024
"""Bytes of an answer read at most."""


def _split(endpoint: str) -> tuple[str, int]:
    """``(host, port)`` of ``ip:port`` or ``[ipv6]:port``.

    >>> _split("10.0.0.1:9090"), _split("[fd00::7]:9090")
    (('10.0.0.1', 9090), ('fd00::7', 9090))
    """
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


async def _exchange(endpoint: str, path: str) -> tuple[int, bytes]:
    host, port = _split(endpoint)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {endpoint}\r\n\r\n".encode("latin-1"))
        await writer.drain()
        data = await reader.read(MAX_ANSWER)
        while len(data) < MAX_ANSWER and (more := await reader.read(MAX_ANSWER - len(data))):
            data += more
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[0].startswith(b"HTTP/") or not status[1].isdigit():
        raise ValueError(f"not an HTTP answer from {endpoint}")
    return int(status[1]), body


async def get(endpoint: str, path: str, timeout: float = TIMEOUT) -> tuple[int, bytes] | None:
    """``(status, body)`` of ``GET path`` on ``endpoint``; ``None`` without an answer."""
    try:
        return await asyncio.wait_for(_exchange(endpoint, path), timeout)
    except (TimeoutError, OSError, ValueError, EOFError):
        return None


async def reachable(endpoint: str, timeout: float = TIMEOUT) -> bool | None:
    """Whether something accepts a TCP connection at ``endpoint`` (``None``: no endpoint
    to try). For a node's kubelet: a process that accepts runs on a machine that runs;
    nothing is sent, so it needs no credentials."""
    if not endpoint:
        return None
    host, port = _split(endpoint)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


async def _gather(
    calls: Sequence[tuple[K, str, str]], timeout: float, limit: int
) -> dict[K, tuple[int, bytes] | None]:
    gate = asyncio.Semaphore(max(1, limit))

    async def one(endpoint: str, path: str) -> tuple[int, bytes] | None:
        async with gate:
            return await get(endpoint, path, timeout)

    answers = await asyncio.gather(*(one(e, p) for _, e, p in calls))
    return {key: a for (key, _, _), a in zip(calls, answers, strict=True)}


async def suspects(
    pods: Sequence[TaskPod], timeout: float = TIMEOUT, limit: int = CONCURRENCY
) -> dict[str, list[Suspicion] | None]:
    """``{task: its suspicions, or None when its pod gave no answer}`` of every pod."""
    answers = await _gather([(p.task, p.endpoint, "/suspects") for p in pods], timeout, limit)
    out: dict[str, list[Suspicion] | None] = {}
    for task, answer in answers.items():
        if answer is None or answer[0] != 200:
            out[task] = None
            continue
        try:
            out[task] = parse_suspects(task, json.loads(answer[1]))
        except ValueError:
            out[task] = None
    return out


async def probe(
    pods: Sequence[TaskPod],
    tries: int = TRIES,
    timeout: float = TIMEOUT,
    limit: int = CONCURRENCY,
) -> dict[str, bool]:
    """``{pod name: whether it answered}``: each pod is asked ``GET /ready`` up to
    ``tries`` times (the next try only for pods that did not answer yet)."""
    answered = {p.pod: False for p in pods}
    left = list(pods)
    for _ in range(max(1, tries)):
        got = await _gather([(p.pod, p.endpoint, "/ready") for p in left], timeout, limit)
        for name, answer in got.items():
            answered[name] = answer is not None
        left = [p for p in left if not answered[p.pod]]
        if not left:
            break
    return answered
