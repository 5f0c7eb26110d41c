"""The consumer side of a channel: find the producer, subscribe, and receive batches.

A producer is found through :meth:`Store.peer <backstop_runtime.store.Store.peer>`: the
peer map the operator pushes (:mod:`backstop_runtime.peermap`), else the peer registry in
the shared store (``peers/<task>.json``, rewritten by every new copy of the task with a
higher epoch). A reader asks again while it waits and while it is connected, so when a
producer moves (a new pod, a new IP) the consumer re-subscribes within a poll interval of
hearing of it, from the first batch it still needs; batches it already has are dropped
by number (they are identical: see ``engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, NoReturn

from backstop_runtime import suspects, wire
from backstop_runtime.buffers import ByteQueue, Caps
from backstop_runtime.config import Fenced
from backstop_runtime.engine import Batch
from backstop_runtime.store import Store

log = logging.getLogger("backstop_runtime.inputs")
POLL = 0.05
CONNECT_TIMEOUT = 2.0
PEER_TIMEOUT = float(os.environ.get("BACKSTOP_PEER_TIMEOUT", "15"))
UNANSWERED: dict[str, tuple[float, str]] = {}
"""Producers this process cannot reach: since when (monotonic) and why. A peer that
never answers is reported in the task's log and ``status.json`` (``unanswered``)."""


def unanswered() -> dict[str, str]:
    """Producers unreachable for longer than ``BACKSTOP_PEER_TIMEOUT`` seconds."""
    now = time.monotonic()
    return {
        p: f"{why} for {now - since:.0f}s"
        for p, (since, why) in UNANSWERED.items()
        if now - since >= PEER_TIMEOUT
    }


def _no_answer(producer: str, why: str) -> None:
    since, _ = UNANSWERED.get(producer, (time.monotonic(), why))
    UNANSWERED[producer] = (since, why)
    now = time.monotonic()
    last = _warned.get(producer, since)
    if now - last >= PEER_TIMEOUT:
        log.warning("no answer from %s for %.0fs: %s", producer, now - since, why)
        _warned[producer] = now


_warned: dict[str, float] = {}


class PeerGone(Exception):
    """The producer's connection broke, or it moved (:func:`moved`)."""


def moved(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> bool:
    """Whether ``new`` names another copy of the producer than ``old`` (both answers of
    :meth:`Store.peer`): another address, or a newer epoch in the registry. An answer of
    neither source (``None``) moves nothing: the connection stays while it works.

    >>> a = {"host": "10.0.0.1", "port": 7077, "epoch": 2}
    >>> moved(a, {"host": "10.0.0.2", "port": 7077}), moved(a, {**a, "epoch": 3})
    (True, True)
    >>> moved(a, {"host": "10.0.0.1", "port": 7077}), moved(a, None)
    (False, False)
    """
    if new is None:
        return False
    if (new["host"], int(new["port"])) != (old["host"], int(old["port"])):
        return True
    return "epoch" in old and "epoch" in new and int(new["epoch"]) > int(old["epoch"])


async def _watch_peer(store: Store, task: str, doc: Mapping[str, Any]) -> None:
    """Return when ``task`` has moved away from ``doc`` (:func:`moved`)."""
    while True:
        await asyncio.sleep(POLL)
        if moved(doc, store.peer(task)):
            return


def _where(doc: Mapping[str, Any]) -> str:
    """``host:port`` and where it comes from, for a log line."""
    how = f"epoch {int(doc['epoch'])}" if "epoch" in doc else "pushed by the operator"
    return f"{doc['host']}:{doc['port']} ({how})"


async def _connect(
    producer: str, doc: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the producer's registered address (``None``: none, after a pause)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(doc["host"], int(doc["port"])), CONNECT_TIMEOUT
        )
    except (OSError, TimeoutError) as err:
        why = f"cannot connect to {_where(doc)}: {err or 'timeout'}"
        _no_answer(producer, why)
        suspects.suspect(producer, why)
        await asyncio.sleep(POLL)
        return None
    wire.tune(writer)
    UNANSWERED.pop(producer, None)
    _warned.pop(producer, None)
    return reader, writer


def _refused(producer: str, expected: int, msg: Mapping[str, Any]) -> NoReturn:
    """Raise what the producer's error message means: fenced, or gone for now."""
    if msg.get("fenced"):
        raise Fenced(f"{producer}: {msg['msg']}")
    why = msg["msg"]
    log.warning("input %s refused batches from %d: %s", producer, expected, why)
    raise PeerGone(msg["msg"])


def _sub(consumer: str, epoch: int, start: int, end: int | None) -> bytes:
    """The ``sub`` frame asking for batches ``start`` to ``end`` (``None``: live)."""
    return wire.encode({"t": "sub", "consumer": consumer, "epoch": epoch, "from": start, "to": end})


async def stream(
    store: Store,
    producer: str,
    *,
    consumer: str,
    epoch: int,
    start: int,
    end: int | None = None,
    floor: Callable[[], int] | None = None,
) -> AsyncGenerator[tuple[Batch, int], None]:
    """Batches ``start, start+1, …`` (to ``end`` inclusive if given) from ``producer``,
    each with the size in bytes of the frame it came in (what a read-ahead counts).

    Reconnects, re-resolving the producer, whenever the connection breaks; a bounded
    stream ends after ``end`` or after the batch that ends the stream (``eos``).
    Raises :class:`Fenced` if the producer says a newer copy of ``consumer`` exists.
    With ``floor``, a (re)subscription starts at ``floor()`` if that is further on: the
    batches below it came from another copy of the producer (:func:`stream_copies`).
    """
    expected = start
    waited: set[str] = set()
    while end is None or expected <= end:
        if floor is not None:
            expected = max(expected, floor())
        found = await _open(store, producer, waited)
        if found is None:
            continue
        doc, reader, writer = found
        replay_upto, replay_via = 0, (producer,)
        writer.write(_sub(consumer, epoch, expected, end))
        watch = asyncio.ensure_future(_watch_peer(store, producer, doc))
        # a live subscriber beats too: its producer notices a consumer that vanished
        beat = suspects.beat(writer) if end is None else None
        try:
            async for msg, size in _frames(reader, watch, producer):
                kind = msg["t"]
                if kind == "err":
                    _refused(producer, expected, msg)
                if kind == "end":
                    suspects.clear(producer)
                    return
                if kind == "replay":
                    replay_upto, replay_via = int(msg["upto"]), tuple(msg["via"])
                if kind != "batch":
                    continue
                batch = Batch.from_msg(msg)
                if batch.r <= replay_upto and not batch.via:
                    batch.via = replay_via  # sent from the producer's buffer
                if batch.r < expected:
                    continue  # a duplicate of a batch we have (identical by construction)
                if batch.r > expected:
                    raise PeerGone(f"{producer} skipped from {expected} to {batch.r}")
                expected += 1
                yield batch, size
                if batch.eos:
                    suspects.clear(producer)
                    return
        except (
            PeerGone,
            OSError,
            asyncio.IncompleteReadError,
            ValueError,
            KeyError,
            TypeError,
        ) as err:
            _ended(producer, err)
        finally:
            await _close(writer, watch, beat)
        await asyncio.sleep(POLL)


async def _open(
    store: Store, producer: str, waited: set[str]
) -> tuple[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The producer's address and a connection to it; ``None`` (after a pause) while it
    has none or does not answer (said once in the log, in ``waited``, while unregistered)."""
    doc = store.peer(producer)
    if doc is None:
        if producer not in waited:
            log.info("waiting for %s to register", producer)
            waited.add(producer)
        _no_answer(producer, "it has not registered in the store")
        await asyncio.sleep(POLL)
        return None
    conn = await _connect(producer, doc)
    return None if conn is None else (doc, *conn)


async def _close(
    writer: asyncio.StreamWriter, watch: asyncio.Future[None], beat: asyncio.Future[None] | None
) -> None:
    """End one subscription's connection and its helpers."""
    watch.cancel()
    if beat is not None:
        beat.cancel()
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def _ended(producer: str, err: Exception) -> None:
    """A connection to ``producer`` ended: suspect it if it broke (not if it refused the
    subscription or moved: it answered, and the new address is tried next)."""
    why = str(err) or type(err).__name__
    if isinstance(err, PeerGone):
        suspects.clear(producer)
    else:
        suspects.suspect(producer, f"connection broken: {why}")
    log.info("input %s: %s; re-resolving", producer, why)


async def _frames(
    reader: asyncio.StreamReader, watch: asyncio.Future[None], producer: str
) -> AsyncIterator[tuple[Any, int]]:
    """Frames from ``reader``, each with its size in bytes, until the peer closes or
    ``watch`` fires; heartbeats are read (they clear a suspicion,
    :mod:`backstop_runtime.suspects`) and not yielded."""
    while True:
        got = await suspects.read(reader, producer, watch, frame=wire.read_sized)
        if got is None:
            raise PeerGone("the producer moved (a newer copy or another address)")
        if got[0]["t"] != "hb":
            yield got


RECEIVED: dict[str, tuple[int, str, float]] = {}
"""Per producer: the last batch taken from it, from which copy, and when (epoch seconds)."""


def received() -> dict[str, dict[str, Any]]:
    """What :data:`RECEIVED` says, for ``/status``: which copy of each producer feeds this
    task, and how far.

    >>> RECEIVED.clear(); RECEIVED["count-0"] = (7, "count-0#r0", 12.5)
    >>> received()
    {'count-0': {'round': 7, 'from': 'count-0#r0', 'at': 12.5}}
    """
    return {p: {"round": r, "from": c, "at": at} for p, (r, c, at) in sorted(RECEIVED.items())}


COPIES_EVERY = 0.5
"""Seconds between two looks at which copies of a producer the pushed map names."""


async def stream_copies(
    store: Store, producer: str, *, consumer: str, epoch: int, start: int
) -> AsyncGenerator[tuple[Batch, int], None]:
    """Batches ``start, start+1, …`` of ``producer``, taking the first copy of each, each
    with its frame's size (as :func:`stream`).

    Reads from the producer and from every active replica of it that the operator's map
    names (``<task>#r<k>``), each through its own :func:`stream`, and yields batch ``r``
    from whichever copy delivers it first. The copies compute the same batches (the
    runtime is deterministic), so when the primary's node dies the replica's copy goes
    on arriving: the consumer sees no gap, with no detection, restart or replay on its
    path. A copy whose stream fails is dropped and tried again at the next look, except
    the primary's failure to be fenced, which ends this stream as :func:`stream` does.
    """
    merge = _Merge(store, producer, consumer, epoch, start)
    try:
        async for got in merge.batches():
            yield got
    finally:
        await merge.close()


class _Merge:
    """The copies of one producer read at once (see :func:`stream_copies`)."""

    def __init__(self, store: Store, producer: str, consumer: str, epoch: int, nxt: int):
        self.store, self.producer, self.consumer, self.epoch = store, producer, consumer, epoch
        self.next = nxt
        """The next batch to yield: each copy subscribes (again) from here on."""
        self.queue: ByteQueue[tuple[tuple[str, Batch | Exception], int]] = ByteQueue(Caps(1))
        """One batch handed from a copy's reader to :meth:`batches` at a time, with its
        frame's size: the read-ahead is the consumer's, bounded in bytes, not this."""
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.looked = 0.0

    async def batches(self) -> AsyncIterator[tuple[Batch, int]]:
        while True:
            self._look()
            try:
                (copy, item), size = await asyncio.wait_for(self.queue.get(), COPIES_EVERY)
            except TimeoutError:
                continue
            if isinstance(item, Exception):
                if copy == self.producer or isinstance(item, Fenced):
                    raise item
                log.info("input %s: %s failed (%s); reading the others", self.producer, copy, item)
                self.readers.pop(copy, None)
                continue
            if item.r < self.next:
                continue  # another copy's batch came first (identical by construction)
            self.next = item.r + 1
            RECEIVED[self.producer] = (item.r, copy, time.time())
            yield item, size
            if item.eos:
                return

    def _look(self) -> None:
        """Start a reader for each copy the map names, stop those it no longer names."""
        now = time.monotonic()
        if now - self.looked < COPIES_EVERY and self.readers:
            return
        self.looked = now
        wanted = {self.producer, *self.store.pushed.copies(self.producer)}
        for copy in wanted - set(self.readers):
            self.readers[copy] = asyncio.ensure_future(self._read(copy))
        for copy in set(self.readers) - wanted:
            self.readers.pop(copy).cancel()
            UNANSWERED.pop(copy, None)
            suspects.clear(copy)

    async def _read(self, copy: str) -> None:
        try:
            async for batch in stream(
                self.store,
                copy,
                consumer=self.consumer,
                epoch=self.epoch,
                start=self.next,
                floor=lambda: self.next,
            ):
                await self.queue.put(((copy, batch[0]), batch[1]), batch[1])
            await asyncio.Event().wait()  # ended with eos: stay done
        except Exception as err:
            await self.queue.put(((copy, err), 0), 0)

    async def close(self) -> None:
        for reader in self.readers.values():
            reader.cancel()
        await asyncio.gather(*self.readers.values(), return_exceptions=True)
