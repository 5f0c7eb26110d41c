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
* ``err`` (producer → consumer): ``{"msg", "fenced"}``; the connection is closed after it.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

_LEN = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024


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
