"""Frames between tasks: a 4-byte big-endian length, then one JSON object.

Messages (``"t"``):

* ``sub`` (consumer → producer): ``{"consumer", "epoch", "from", "to"}``. ``to``
  is ``null`` for the consumer's live input and a round for a bounded replay request
  (made by a task that regenerates its own output).
* ``batch`` (producer → consumer): ``{"r", "wm", "eos", "recs": [[key, value, ts], …]}``,
  mini-batch ``r``'s records for this consumer, in the producer's output order. A batch is
  also the barrier of Alg. 1 (its end closes the round) and, when ``r`` is a multiple of
  the checkpoint period, the checkpoint punctuation. ``at`` is when a source first made
  the round (wall time), so every task can tell how far behind it is.
* ``end`` (producer → consumer): a bounded replay is complete.
* ``hb`` (producer → consumer): a heartbeat on an idle connection, nothing else
  (:mod:`backstop_runtime.suspects`).
* ``err`` (producer → consumer): ``{"msg", "fenced"}``; the connection is closed after it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

_LEN = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024


def tune(writer: asyncio.StreamWriter, dead_after: float = 5.0) -> None:
    """Notice a peer whose node is gone within ``dead_after`` seconds.

    A lost node sends no RST: without keepalives a connection to it looks open for many
    minutes, a writer to it blocks, and a producer without a backup would keep buffering for
    a consumer that is gone. TCP keepalive probes and ``TCP_USER_TIMEOUT`` (Linux) make both
    ends fail fast instead.
    """
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", 1),
        ("TCP_KEEPINTVL", 1),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", int(dead_after * 1000)),
    ):
        opt = getattr(socket, name, None)
        if opt is not None:
            sock.setsockopt(socket.IPPROTO_TCP, opt, value)


def encode(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg, separators=(",", ":")).encode()
    return _LEN.pack(len(body)) + body


async def read(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; ``asyncio.IncompleteReadError`` when the peer closed."""
    head = await reader.readexactly(_LEN.size)
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    msg = json.loads(await reader.readexactly(n))
    if not isinstance(msg, dict) or "t" not in msg:
        raise ValueError("malformed frame")
    return msg
