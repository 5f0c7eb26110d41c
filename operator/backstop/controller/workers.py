"""The per-topology workers: the loops that run beside each StreamTopology while it exists.

Each topology has one of each :class:`Worker` (:mod:`backstop.controller.handlers` lists
them: the supervisor, the peer pushes, the data-plane confirmations, the re-optimizer).
:class:`Workers` starts them when an event shows the topology (the operator's initial
listing included), stops them when it is deleted or being deleted, and stops them all at
the operator's clean-up. A sync worker runs in a thread of its own, an ``async`` one as a
task on Kopf's event loop, so no number of topologies starves Kopf's handler executor.

Why not Kopf's daemons: Kopf puts a finalizer on every object that has one, and a
finalizer makes ``kubectl delete`` hang while the operator is down. A watching handler
(``kopf.on.event``), which drives this manager, needs none; Kopf removes the finalizer it
put on objects earlier once no handler needs it.

The lifecycle mirrors Kopf's daemons: a worker starts after its initial delay and gets
the live body (with ``spec``, ``meta`` and ``status`` views that every event of the object
refreshes), the object's memo, the indexes, a logger and a ``stopped`` flag; one that
returns, or raises :class:`kopf.PermanentError`, stays stopped; one that raises anything
else is started again after a backoff; stopping sets the flag and cancels an ``async``
worker, and the clean-up waits up to the worker's cancellation timeout for it to end.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import kopf

Logger = logging.Logger | logging.LoggerAdapter[Any]

BACKOFF = (1.0, 60.0)
"""Seconds before a failed worker starts again: the first wait, doubled on each failure in
a row up to the second (Kopf's daemons wait the second each time)."""


@dataclasses.dataclass(frozen=True)
class Worker:
    """One loop each topology runs: ``fn(**kwargs)``, sync (in its own thread) or ``async``."""

    name: str
    fn: Callable[..., Any]
    initial_delay: float = 0.0
    """Seconds after the topology is first seen before the worker starts."""
    cancellation_timeout: float = 5.0
    """Seconds the operator's clean-up waits for the worker to end."""


class Stopped:
    """The ``stopped`` flag a worker is given: false until its topology is deleted or the
    operator stops; ``wait(timeout)`` sleeps until then (true if it was set).

    Examples
    --------
    >>> s = Stopped()
    >>> bool(s), s.wait(0.01)
    (False, False)
    >>> s.set()
    >>> bool(s), s.wait(10)
    (True, True)
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        """Ask the worker to end."""
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, less if the flag is set; whether it is."""
        return self._event.wait(timeout)


class LiveBody(Mapping[str, Any]):
    """The newest body of an object, replaced whole by each of its events (one reference
    swap, so a reader sees one version of each top-level field).

    Examples
    --------
    >>> live = LiveBody({"spec": {"a": 1}})
    >>> body = live.view()
    >>> spec = body.spec
    >>> live.replace({"spec": {"a": 2}})
    >>> spec["a"]
    2
    """

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw

    def replace(self, raw: Mapping[str, Any]) -> None:
        """Serve ``raw`` from now on."""
        self._raw = raw

    def view(self) -> kopf.Body:
        """A :class:`kopf.Body` over this body (its ``spec``, ``meta``, ``status`` follow)."""
        source: Any = self
        return kopf.Body(source)

    def __getitem__(self, key: str) -> Any:
        return self._raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


@dataclasses.dataclass
class _Run:
    worker: Worker
    thread: threading.Thread | None = None
    task: asyncio.Task[None] | None = None

    def alive(self) -> bool:
        if self.task is not None:
            return not self.task.done()
        return self.thread is not None and self.thread.is_alive()


@dataclasses.dataclass
class _Topology:
    live: LiveBody
    stopped: Stopped
    runs: list[_Run]


class Workers:
    """Runs every :class:`Worker` once per topology; one per operator run, in the root memo.

    :meth:`saw` and :meth:`stop_all` are called on Kopf's event loop (by the watching
    handler and the clean-up handler).
    """

    def __init__(self, workers: Sequence[Worker], backoff: tuple[float, float] = BACKOFF) -> None:
        self._workers = tuple(workers)
        self._backoff = backoff
        self._topologies: dict[str, _Topology] = {}
        self._ending: list[_Run] = []

    def saw(
        self,
        kind: str | None,
        body: Mapping[str, Any],
        memo: Any,
        logger: Logger,
        indexes: Mapping[str, Any],
    ) -> None:
        """An event of a topology (``kind``: the watch event's type, ``None`` for the
        initial listing): start its workers when first seen, refresh their body, or stop
        them when it is deleted or being deleted."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        top = self._topologies.get(uid)
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if top is not None:
                self._stop(self._topologies.pop(uid))
            return
        if top is not None:
            top.live.replace(body)
            return
        live = LiveBody(body)
        top = _Topology(live=live, stopped=Stopped(), runs=[])
        self._topologies[uid] = top
        view = live.view()
        kwargs = {
            **indexes,
            "body": view,
            "spec": view.spec,
            "meta": view.meta,
            "status": view.status,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": uid,
            "memo": memo,
            "logger": logger,
            "stopped": top.stopped,
        }
        top.runs = [self._start(w, kwargs, top.stopped, logger) for w in self._workers]

    def running(self, uid: str) -> list[str]:
        """The names of the topology's workers still running (a view for tests and logs)."""
        top = self._topologies.get(uid)
        return [] if top is None else [r.worker.name for r in top.runs if r.alive()]

    def ending(self) -> int:
        """How many workers of deleted topologies are still ending."""
        self._ending = [r for r in self._ending if r.alive()]
        return len(self._ending)

    async def stop_all(self) -> None:
        """Stop every worker (the operator stops): set the flags, cancel the ``async``
        ones, and wait for each up to its cancellation timeout; one still running then
        is left (its thread does not keep the process alive)."""
        for top in list(self._topologies.values()):
            self._stop(top)
        self._topologies.clear()
        runs, self._ending = [r for r in self._ending if r.alive()], []
        tasks = [r.task for r in runs if r.task is not None]
        threads = [(r.thread, r.worker.cancellation_timeout) for r in runs if r.thread is not None]
        longest = max((r.worker.cancellation_timeout for r in runs), default=0.0)
        if tasks:
            await asyncio.wait(tasks, timeout=longest)
        if threads:
            await asyncio.to_thread(_join, threads)
        for r in runs:
            if r.alive():
                logging.getLogger(__name__).warning(
                    "worker %s did not end in %.0f s; left running",
                    r.worker.name,
                    r.worker.cancellation_timeout,
                )

    def _stop(self, top: _Topology) -> None:
        top.stopped.set()
        for r in top.runs:
            if r.task is not None:
                r.task.cancel()
        self._ending = [r for r in [*self._ending, *top.runs] if r.alive()]

    def _start(
        self, worker: Worker, kwargs: dict[str, Any], stopped: Stopped, logger: Logger
    ) -> _Run:
        if inspect.iscoroutinefunction(worker.fn):
            coro = _run_async(worker, kwargs, stopped, logger, self._backoff)
            task = asyncio.get_running_loop().create_task(coro, name=f"worker {worker.name}")
            return _Run(worker, task=task)
        context = contextvars.copy_context()  # Kopf's posting of Events reads its variables
        thread = threading.Thread(
            target=context.run,
            args=(_run_sync, worker, kwargs, stopped, logger, self._backoff),
            name=f"backstop-{worker.name}-{kwargs['namespace']}/{kwargs['name']}",
            daemon=True,
        )
        thread.start()
        return _Run(worker, thread=thread)


def _join(threads: Sequence[tuple[threading.Thread, float]]) -> None:
    """Join each thread within its own timeout, counted from now."""
    began = time.monotonic()
    for thread, timeout in threads:
        thread.join(max(0.0, began + timeout - time.monotonic()))


def _failed(worker: Worker, err: Exception, logger: Logger, wait: float) -> bool:
    """Log a worker's failure; whether it starts again (not after a PermanentError)."""
    if isinstance(err, kopf.PermanentError):
        logger.error("worker %s failed permanently: %s", worker.name, err)
        return False
    logger.exception("worker %s failed; started again in %.0f s", worker.name, wait)
    return True


def _next_wait(previous: float, ran: float, backoff: tuple[float, float]) -> float:
    """The wait after a failure, given the one after the previous failure (0: none) and
    how long the failed run lasted: the first, doubled on each failure in a row, and the
    first again after a run as long as the longest wait.

    Examples
    --------
    >>> b = (1.0, 60.0)
    >>> _next_wait(0.0, 0.1, b), _next_wait(1.0, 0.1, b), _next_wait(40.0, 0.1, b)
    (1.0, 2.0, 60.0)
    >>> _next_wait(8.0, 120.0, b)
    1.0
    """
    first, most = backoff
    return first if previous <= 0 or ran >= most else min(previous * 2, most)


def _run_sync(
    worker: Worker,
    kwargs: Mapping[str, Any],
    stopped: Stopped,
    logger: Logger,
    backoff: tuple[float, float],
) -> None:
    """A sync worker's thread: the initial delay, then the worker until it returns, started
    again after each failure."""
    wait = 0.0
    if stopped.wait(worker.initial_delay):
        return
    while not stopped:
        began = time.monotonic()
        try:
            worker.fn(**kwargs)
            return
        except Exception as err:
            wait = _next_wait(wait, time.monotonic() - began, backoff)
            if not _failed(worker, err, logger, wait) or stopped.wait(wait):
                return


async def _run_async(
    worker: Worker,
    kwargs: Mapping[str, Any],
    stopped: Stopped,
    logger: Logger,
    backoff: tuple[float, float],
) -> None:
    """An ``async`` worker's task: as :func:`_run_sync`, on Kopf's event loop."""
    wait = 0.0
    await asyncio.sleep(worker.initial_delay)
    while not stopped:
        began = time.monotonic()
        try:
            await worker.fn(**kwargs)
            return
        except Exception as err:
            wait = _next_wait(wait, time.monotonic() - began, backoff)
            if not _failed(worker, err, logger, wait):
                return
            await asyncio.sleep(wait)
