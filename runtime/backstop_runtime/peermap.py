"""Where the producers are, as the operator last said: the pushed peer map.

The operator watches the task pods; when a topology's pods change (a pod got its IP, a
task moved, a pod was deleted) it sends every task pod the addresses of the tasks it
reads from, ``PUT /peers`` on the pod's metrics port (:mod:`backstop_runtime.httpmetrics`)
with ``{"version": int, "peers": {task: "host:port"}}``; a task's active replicas are
named ``<task>#r<k>`` (:func:`backstop_runtime.config.copy_name`). A newer version replaces the
map whole; an older or equal one (a retry that arrives late) is ignored.
A push may also promote the copy it reaches: ``"role": "primary"`` with ``"epoch": n``
tells an active replica that the operator made it its task's primary (its primary's node
was lost), ranked ``n`` (:func:`promotion`); the task then takes the primary's duties in
place (:func:`backstop_runtime.promotion.promote`).
:meth:`Store.peer <backstop_runtime.store.Store.peer>` asks this map first, so a moved
producer is found as soon as the operator has seen its new pod, without a read of the
store; a task the map does not name (no operator, or not pushed yet) is looked up in the
store's peer registry as before.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from backstop_runtime.config import REPLICA_MARK

MAX_BODY = 8 * 1024 * 1024
"""Bytes a ``PUT /peers`` body may have (a map of every task of the largest topology
is well under a megabyte)."""


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) as ``(host, port)``; :class:`ValueError`
    if it is not one.

    >>> split_address("10.0.0.7:7077"), split_address("[fd00::7]:7077")
    (('10.0.0.7', 7077), ('fd00::7', 7077))
    >>> split_address("10.0.0.7")
    Traceback (most recent call last):
    ...
    ValueError: not host:port: '10.0.0.7'
    """
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not host:port: {text!r}")
    return host, int(port)


def join_address(host: str, port: int) -> str:
    """The inverse of :func:`split_address`.

    >>> join_address("10.0.0.7", 7077), join_address("fd00::7", 7077)
    ('10.0.0.7:7077', '[fd00::7]:7077')
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse(body: bytes) -> tuple[int, dict[str, tuple[str, int]]]:
    """The version and the addresses of a ``PUT /peers`` body; :class:`ValueError`
    (with what is wrong) for anything else.

    >>> parse(b'{"version": 3, "peers": {"src-0": "10.0.0.7:7077"}}')
    (3, {'src-0': ('10.0.0.7', 7077)})
    >>> parse(b'{"version": "3", "peers": {}}')
    Traceback (most recent call last):
    ...
    ValueError: "version" must be an integer
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeError) as err:
        raise ValueError(f"the body is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise ValueError("the body must be a JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError('"version" must be an integer')
    peers = doc.get("peers")
    if not isinstance(peers, dict):
        raise ValueError('"peers" must be an object of task: "host:port"')
    out = {}
    for task, address in peers.items():
        if not isinstance(address, str):
            raise ValueError(f"the address of {task!r} must be a string")
        out[task] = split_address(address)
    return version, out


def promotion(body: bytes) -> int | None:
    """The operator epoch a ``PUT /peers`` body promotes this copy with, or ``None`` when
    it promotes nothing (no ``role``, another role, or an epoch that is not a number).

    >>> promotion(b'{"version": 3, "peers": {}, "role": "primary", "epoch": 2}')
    2
    >>> promotion(b'{"version": 3, "peers": {}}'), promotion(b'{"role": "replica"}')
    (None, None)
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeError):
        return None
    if not isinstance(doc, dict) or doc.get("role") != "primary":
        return None
    epoch = doc.get("epoch", 0)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


class PushedPeers:
    """The newest peer map pushed to this process (empty until the first push).

    Written by the HTTP server's handler and read by the inputs, both on the task's
    event loop; the lock keeps it right for a caller on another thread too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version: int | None = None
        self._peers: dict[str, tuple[str, int]] = {}
        self.promoted: int | None = None
        """The operator epoch a push promoted this copy with (``None``: not promoted)."""
        self._listeners: list[Callable[[int], object]] = []

    def on_promotion(self, listener: Callable[[int], object]) -> None:
        """Call ``listener(epoch)`` when a push promotes this copy (at once if one did)."""
        with self._lock:
            self._listeners.append(listener)
            promoted = self.promoted
        if promoted is not None:
            listener(promoted)

    def promote(self, epoch: int) -> None:
        """A push made this copy its task's primary with operator epoch ``epoch``: tell
        the listeners, once (a repeated push of the same role changes nothing)."""
        with self._lock:
            if self.promoted is not None:
                return
            self.promoted = epoch
            listeners = list(self._listeners)
        for listener in listeners:
            listener(epoch)

    def update(self, version: int, peers: Mapping[str, tuple[str, int]]) -> bool:
        """Take ``peers`` if ``version`` is newer than the map held; whether it was."""
        with self._lock:
            if self.version is not None and version <= self.version:
                return False
            self.version, self._peers = version, dict(peers)
            return True

    def address(self, task: str) -> tuple[str, int] | None:
        """Where the pushed map says ``task`` listens (``None``: it does not name it)."""
        with self._lock:
            return self._peers.get(task)

    def copies(self, task: str) -> list[str]:
        """The names of ``task``'s active replicas the map names (``<task>#r<k>``), in
        order: a consumer reads from each of them beside the primary.

        >>> m = PushedPeers()
        >>> m.update(1, {"a-0": ("10.0.0.1", 1), "a-0#r0": ("10.0.0.2", 1),
        ...              "a-1#r0": ("10.0.0.3", 1)})
        True
        >>> m.copies("a-0"), m.copies("b-0")
        (['a-0#r0'], [])
        """
        mark = task + REPLICA_MARK
        with self._lock:
            return sorted(t for t in self._peers if t.startswith(mark))

    def snapshot(self) -> dict[str, Any]:
        """The map as ``GET /peers`` shows it."""
        with self._lock:
            peers = {t: join_address(h, p) for t, (h, p) in self._peers.items()}
        return {"version": self.version, "peers": peers}


PUSHED = PushedPeers()
"""The process's pushed map: one task per process, one map."""
