"""Frames between tasks: a 4-byte big-endian length, then one MessagePack map.

MessagePack (the ``msgpack`` package) carries what JSON does (maps, lists, strings,
numbers, booleans, nil) plus infinite floats, in a compact binary form that decodes into
Python objects in C without running any code: safe on an open port, as pickle would not be.
A frame is decoded within limits: its length is checked against :data:`MAX_FRAME` before it
is read, no string, list or map in it can be longer than the frame, and extension types are
refused; a frame that breaks any of this raises ``ValueError`` (the connection is dropped,
the task goes on).

A batch frame of :data:`LARGE` bytes or more (a window's results flushed at once, say) is
checked whole when it arrives, a piece at a time, and its columns stay encoded
(:class:`Encoded`) until the task takes them, again a piece at a time: a read-ahead holds
such a frame as the bytes it counts it by, and a task never holds all of it decoded (its
decoded records take several times its bytes).

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
import io
import socket
import struct
from collections.abc import Iterator
from itertools import islice
from typing import Any

import msgpack

_LEN = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024
LARGE = 1024 * 1024
"""Frames of this many bytes or more keep a batch's columns encoded (:class:`Encoded`)."""
COLUMNS = ("k", "v", "ts")
PIECE = 4096
"""Items a column of a large frame is checked and decoded in, at most, at a time."""
_WINDOW = 64 * 1024


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


def _limits(n: int) -> dict[str, Any]:
    """msgpack's options for a frame of ``n`` bytes: the frame bounds every container."""
    return {
        "raw": False,
        "strict_map_key": False,  # as JSON keeps them
        "ext_hook": _no_ext,
        "max_str_len": n,
        "max_bin_len": n,
        "max_array_len": n,
        "max_map_len": n,
        "max_ext_len": 0,
    }


def _unpacker(body: bytes, start: int) -> msgpack.Unpacker:
    """An unpacker of ``body`` from ``start`` on that copies a window of it at a time
    (its ``tell()`` counts from ``start``)."""
    data = io.BytesIO(body)  # shares the bytes, no copy
    data.seek(start)
    n = len(body)
    window = min(_WINDOW, max(n, 1))
    return msgpack.Unpacker(data, read_size=window, max_buffer_size=max(n, 1), **_limits(n))


class Encoded:
    """One column of a large batch frame, still encoded: ``len()`` items of ``body``
    from ``start`` to ``end``, decoded a piece at a time by :meth:`pieces`.

    >>> body = msgpack.packb({"t": "batch", "k": list(range(5))})
    >>> col = decode(body, large=0)["k"]
    >>> len(col), list(col.pieces(2))
    (5, [[0, 1], [2, 3], [4]])
    """

    __slots__ = ("body", "end", "n", "start")

    def __init__(self, body: bytes, start: int, end: int, n: int) -> None:
        self.body, self.start, self.end, self.n = body, start, end, n

    def __len__(self) -> int:
        return self.n

    def pieces(self, size: int = PIECE) -> Iterator[list[Any]]:
        """The items in lists of ``size`` (the last may be shorter)."""
        unpacker = _unpacker(self.body, self.start)
        left = unpacker.read_array_header()
        while left:
            piece = _piece(unpacker, min(size, left))
            left -= len(piece)
            yield piece

    def decode(self) -> list[Any]:
        """All the items."""
        return [x for piece in self.pieces() for x in piece]


def decode(body: bytes, large: int | None = None) -> dict[str, Any]:
    """The message of a frame's ``body``; ``ValueError`` for anything but one whole
    MessagePack map with a ``"t"``, within the limits of the module docstring. With
    ``large``, a batch's columns in a body of that many bytes or more are
    :class:`Encoded` (each checked by decoding it a piece at a time, nothing kept)."""
    n = len(body)
    try:
        if large is not None and n >= large:
            msg = _decode_large(body)
        else:
            msg = msgpack.unpackb(body, **_limits(n))
    except Exception as err:  # msgpack's errors: truncated, extra data, too deep, too long
        raise ValueError(f"malformed frame: {type(err).__name__}: {err}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise ValueError("malformed frame: not a message (a map with a string t)")
    return msg


def _decode_large(body: bytes) -> Any:
    """:func:`decode` of a large body: the map with its columns :class:`Encoded`."""
    unpacker = _unpacker(body, 0)
    msg: dict[Any, Any] = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key not in COLUMNS:
            msg[key] = unpacker.unpack()
            continue
        start = unpacker.tell()
        left = items = unpacker.read_array_header()
        while left:  # every item decoded once, to be sure the frame is whole and valid
            left -= len(_piece(unpacker, min(PIECE, left)))
        msg[key] = Encoded(body, start, unpacker.tell(), items)
    if unpacker.tell() != len(body):
        raise ValueError("extra data after the message")
    return msg


def _piece(unpacker: msgpack.Unpacker, size: int) -> list[Any]:
    """The next ``size`` items; ``ValueError`` if the frame ends before them."""
    piece = list(islice(unpacker, size))
    if len(piece) < size:
        raise ValueError("truncated column")
    return piece


async def read(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; ``asyncio.IncompleteReadError`` when the peer closed, and
    ``ValueError`` for a frame too long or malformed (:func:`decode`)."""
    return decode(await _body(reader))


async def read_sized(reader: asyncio.StreamReader) -> tuple[dict[str, Any], int]:
    """The next message (as :func:`read`, a batch of :data:`LARGE` bytes or more with its
    columns :class:`Encoded`) and its frame's size in bytes (what a read-ahead counts it
    as)."""
    body = await _body(reader)
    return decode(body, LARGE), _LEN.size + len(body)


async def _body(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(_LEN.size)
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    return await reader.readexactly(n)
