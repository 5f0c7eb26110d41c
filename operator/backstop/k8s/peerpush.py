"""Telling task pods where their peers are: ``PUT /peers`` on each pod's metrics port.

The body is ``{"version", "peers"}`` (:mod:`backstop.domain.peers`), with the topology's
token as ``Authorization: Bearer`` (:func:`peers_token`). Pushes go out concurrently,
each with a short timeout; a pod that does not answer (still starting, or gone) is
reported, and :mod:`backstop.controller.peers` tries it again on its next round. The
client is a few lines of asyncio: it runs on Kopf's event loop, beside the pod index
that wakes it, and holds no thread per pod.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import PEERS_TOKEN_KEY
from backstop.k8s.topologyobjects import Owner, build_peers_secret, peers_secret_name

K = TypeVar("K", bound=Hashable)

TIMEOUT = 1.0
"""Seconds one push may take, connection included."""
CONCURRENCY = 64
"""Pushes in flight at once."""


def body(version: int, peers: Mapping[str, str], promote: int | None = None) -> bytes:
    """The JSON body of a push; with ``promote``, it also makes the replica it reaches
    its task's primary, claiming with that operator epoch (``"role": "primary"``).

    >>> body(7, {"src-0": "10.0.0.1:7077"})
    b'{"version":7,"peers":{"src-0":"10.0.0.1:7077"}}'
    >>> body(7, {}, promote=2)
    b'{"version":7,"peers":{},"role":"primary","epoch":2}'
    """
    doc: dict[str, Any] = {"version": version, "peers": dict(peers)}
    if promote is not None:
        doc.update(role="primary", epoch=promote)
    return json.dumps(doc, separators=(",", ":")).encode()


async def _exchange(url: str, data: bytes, token: str | None) -> str | None:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = [
            f"PUT {parts.path or '/'} HTTP/1.0",
            f"Host: {parts.netloc}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
        ]
        if token:
            head.append(f"Authorization: Bearer {token}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()
        status = (await reader.readline()).decode("latin-1").split()
        code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 0
        if code == 200:
            return None
        text = (await reader.read(300)).decode("utf-8", "replace")
        reason = text.partition("\r\n\r\n")[2].strip() or " ".join(status[2:])
        return f"HTTP {code or '?'}: {reason}"
    finally:
        writer.close()


async def put(url: str, data: bytes, token: str | None, timeout: float = TIMEOUT) -> str | None:
    """PUT ``data`` to ``url``: ``None`` when the task took it (200), else why not."""
    try:
        return await asyncio.wait_for(_exchange(url, data, token), timeout)
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except (OSError, ValueError, EOFError) as err:
        return str(err) or type(err).__name__


async def put_all(
    pushes: Sequence[tuple[K, str, bytes]],
    token: str | None,
    timeout: float = TIMEOUT,
    limit: int = CONCURRENCY,
) -> dict[K, str | None]:
    """Every ``(key, url, body)`` of ``pushes`` at once (at most ``limit`` in flight):
    ``{key: None if taken, else why not}``."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(url: str, data: bytes) -> str | None:
        async with gate:
            return await put(url, data, token, timeout)

    answers = await asyncio.gather(*(one(url, data) for _, url, data in pushes))
    return {key: answer for (key, _, _), answer in zip(pushes, answers, strict=True)}


def peers_token(core: client.CoreV1Api, owner: Owner) -> str:
    """The topology's peer token: read from its Secret, which is created (with a new
    random token) when there is none. Two callers creating it at once read the one
    that won."""
    name = peers_secret_name(owner.name)
    for _ in range(3):
        try:
            return _token_of(core.read_namespaced_secret(name, owner.namespace))
        except ApiException as err:
            if err.status != 404:
                raise
        manifest = build_peers_secret(owner, secrets.token_urlsafe(32))
        try:
            core.create_namespaced_secret(owner.namespace, manifest)
            return str(manifest["stringData"][PEERS_TOKEN_KEY])
        except ApiException as err:
            if err.status != 409:
                raise
    raise ApiException(status=409, reason=f"Secret {name} keeps changing")


def _token_of(secret: Any) -> str:
    data = (secret.data if not isinstance(secret, Mapping) else secret.get("data")) or {}
    value = data.get(PEERS_TOKEN_KEY)
    if not value:
        raise ApiException(status=422, reason=f"the Secret has no {PEERS_TOKEN_KEY!r} key")
    return base64.b64decode(value).decode()
