"""Frames between tasks: a 4-byte big-endian length, then one MessagePack map.

MessagePack (the ``msgpack`` package) carries what JSON does (maps, lists, strings,
numbers, booleans, nil) plus infinite floats, in a compact binary form that decodes into
Python objects in C without running any code: safe on an open port, as pickle would not be.
A frame is decoded within limits: its length is checked against :data:`MAX_FRAME` before it
is read, no string, list or map in it can be longer than the frame, and extension types are
refused; a frame that breaks any of this raises ``ValueError`` (the connection is dropped,
the task goes on).

Messages (``"t"``):

* ``sub`` (consumer → producer): ``{"consumer", "epoch", "from", "to"}``. ``to``
  is nil for the consumer's live input and a round for a bounded replay request
  (made by a task that regenerates its own output).
* ``batch`` (producer → consumer): ``{"r", "wm", "eos", "at", "k", "v", "ts"}``,
  mini-batch ``r``'s records for this consumer as three columns of one length (keys,
  values, event times; a key or time may be nil), in the producer's output order. A batch
  is also the barrier of Alg. 1 (its end closes the round) and, when ``r`` is a multiple
  of the checkpoint period, the checkpoint punctuation. ``at`` is when a source first made
  the round (wall time), so every task can tell how far behind it is; ``wm`` may be
  ±infinity. A regenerated batch names where it came from in ``via``.
* ``replay`` (producer → consumer): ``{"upto", "via"}``: batches up to ``upto`` are
  a replay from the producer's buffer.
* ``end`` (producer → consumer): a bounded replay is complete.
* ``hb`` (producer → consumer): a heartbeat on an idle connection, nothing else
  (:mod:`backstop_runtime.suspects`).
* ``err`` (producer → consumer): ``{"msg", "fenced"}``; the connection is closed after it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import msgpack

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
    """The frame of ``msg``: its length, then its MessagePack encoding."""
    body: bytes = msgpack.packb(msg, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"extension type {code} is not allowed in a frame")


def decode(body: bytes) -> dict[str, Any]:
    """The message of a frame's ``body``; ``ValueError`` for anything but one whole
    MessagePack map with a ``"t"``, within the limits of the module docstring."""
    n = len(body)
    try:
        msg = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=False,  # as JSON keeps them: the frame bounds every container
            ext_hook=_no_ext,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n,
            max_ext_len=0,
        )
    except Exception as err:  # msgpack's errors: truncated, extra data, too deep, too long
        raise ValueError(f"malformed frame: {type(err).__name__}: {err}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise ValueError("malformed frame: not a message (a map with a string t)")
    return msg


async def read(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; ``asyncio.IncompleteReadError`` when the peer closed, and
    ``ValueError`` for a frame too long or malformed (:func:`decode`)."""
    return (await read_sized(reader))[0]


async def read_sized(reader: asyncio.StreamReader) -> tuple[dict[str, Any], int]:
    """The next message (as :func:`read`) and its frame's size in bytes (what a
    read-ahead counts it as)."""
    head = await reader.readexactly(_LEN.size)
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    return decode(await reader.readexactly(n)), _LEN.size + n
