"""The topologies' workers: started when a topology is seen, stopped when it is deleted or
the operator stops, started again after a failure, and never short of threads.

Why: the workers replace Kopf's daemons, which put a finalizer on every topology (a
``kubectl delete`` then hangs while the operator is down), and whose sync daemons held
threads of Kopf's handler executor for ever (a fleet of 100 topologies starved it).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from backstop.controller import handlers
from backstop.controller.workers import Stopped, Worker, Workers

LOG = logging.getLogger("test-workers")
FAST = (0.02, 0.2)  # the backoff of these tests: restarts within a fraction of a second
INDEXES = {"pods_by_topology": {"p": 1}, "topologies": {"t": 2}, "node_index": {"n": 3}}


def body(uid: str, name: str = "t", *, deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "StreamTopology", "metadata": meta, "spec": spec}


def until(check: Callable[[], bool], timeout: float = 5.0) -> Awaitable[None]:
    async def wait() -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.01)

    return wait()


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_sync_worker_runs_in_its_own_thread_with_the_live_body_until_deleted() -> None:
    seen: list[Any] = []
    threads: set[str] = set()

    def supervise(spec: kopf.Spec, stopped: Stopped, **kwargs: Any) -> None:
        threads.add(threading.current_thread().name)
        seen.append(({k: kwargs[k] for k in INDEXES}, kwargs["memo"], kwargs["name"]))
        while not stopped:
            seen.append(spec.get("size"))
            stopped.wait(0.01)

    async def main() -> None:
        workers = Workers([Worker("supervise", supervise, initial_delay=0.05)], FAST)
        memo = kopf.Memo(mine=1)
        workers.saw(None, body("u1", size=1), memo, LOG, INDEXES)  # the initial listing
        await until(lambda: 1 in seen)
        workers.saw("MODIFIED", body("u1", size=2), memo, LOG, INDEXES)
        await until(lambda: 2 in seen)
        assert workers.running("u1") == ["supervise"]
        workers.saw("DELETED", body("u1", size=2), memo, LOG, INDEXES)
        assert workers.running("u1") == []
        await until(lambda: workers.ending() == 0)

    run(main)
    assert seen[0] == (INDEXES, kopf.Memo(mine=1), "t")
    assert threads == {"backstop-supervise-ns/t"}


def test_deletion_under_way_stops_the_workers_and_starts_none() -> None:
    """A topology being deleted (``deletionTimestamp``, e.g. a foreground deletion waiting
    for its pods) has no worker: none recreates what the garbage collector deletes."""
    started: list[str] = []

    async def loop(uid: str, stopped: Stopped, **_: Any) -> None:
        started.append(uid)
        while not stopped:
            await asyncio.sleep(0.01)

    async def main() -> None:
        workers = Workers([Worker("peers", loop)], FAST)
        workers.saw(None, body("u1"), {}, LOG, INDEXES)
        await until(lambda: started == ["u1"])
        workers.saw("MODIFIED", body("u1", deleting=True), {}, LOG, INDEXES)
        workers.saw(None, body("u2", deleting=True), {}, LOG, INDEXES)
        await until(lambda: workers.ending() == 0)
        await asyncio.sleep(0.1)
        assert workers.running("u1") == workers.running("u2") == []

    run(main)
    assert started == ["u1"]


def test_a_failed_worker_starts_again_and_one_that_returned_does_not() -> None:
    calls = {"flaky": 0, "done": 0, "permanent": 0}

    def flaky(stopped: Stopped, **_: Any) -> None:
        calls["flaky"] += 1
        if calls["flaky"] <= 3:
            raise RuntimeError("boom")
        stopped.wait()

    async def done(**_: Any) -> None:
        calls["done"] += 1  # returns: the topology is gone, as far as it knows

    async def permanent(**_: Any) -> None:
        calls["permanent"] += 1
        raise kopf.PermanentError("never again")

    async def main() -> None:
        specs = [Worker("flaky", flaky), Worker("done", done), Worker("permanent", permanent)]
        workers = Workers(specs, FAST)
        began = time.monotonic()
        workers.saw(None, body("u1"), {}, LOG, INDEXES)
        await until(lambda: calls["flaky"] == 4)
        took = time.monotonic() - began
        assert took >= 0.02 + 0.04 + 0.08, "each restart waits, longer each time"
        for _ in range(3):  # later events of the topology start nothing again
            workers.saw("MODIFIED", body("u1"), {}, LOG, INDEXES)
            await asyncio.sleep(0.05)
        assert workers.running("u1") == ["flaky"]
        await workers.stop_all()
        assert workers.running("u1") == [] and workers.ending() == 0

    run(main)
    assert calls == {"flaky": 4, "done": 1, "permanent": 1}


def test_a_hundred_topologies_all_run_at_once() -> None:
    """Each sync worker holds its thread for its topology's lifetime: all 100 reach the
    barrier together only if none waits for another's thread."""
    n = 100
    barrier = threading.Barrier(n, timeout=10)
    passed: list[str] = []
    ticks: dict[str, int] = {}

    def supervise(uid: str, stopped: Stopped, **_: Any) -> None:
        barrier.wait()
        passed.append(uid)
        stopped.wait()

    async def peers(uid: str, stopped: Stopped, **_: Any) -> None:
        while not stopped:
            ticks[uid] = ticks.get(uid, 0) + 1
            await asyncio.sleep(0.01)

    async def main() -> None:
        workers = Workers([Worker("supervise", supervise), Worker("peers", peers)], FAST)
        for i in range(n):
            workers.saw(None, body(f"u{i}", f"t{i}"), {}, LOG, INDEXES)
        await until(lambda: len(passed) == n and len(ticks) == n, timeout=15)
        await workers.stop_all()
        assert workers.ending() == 0

    run(main)
    assert sorted(passed) == sorted(f"u{i}" for i in range(n))


def test_the_operator_stopping_stops_every_worker_and_cancels_the_async_ones() -> None:
    cancelled: list[str] = []
    started: list[str] = []

    async def reoptimizer(**_: Any) -> None:
        started.append("reoptimizer")
        try:
            await asyncio.sleep(3600)  # a long job: the stop cancels it
        except asyncio.CancelledError:
            cancelled.append("reoptimizer")
            raise

    def supervise(stopped: Stopped, **_: Any) -> None:
        stopped.wait()

    async def main() -> None:
        workers = Workers(
            [Worker("supervise", supervise), Worker("reoptimizer", reoptimizer)], FAST
        )
        workers.saw(None, body("u1"), {}, LOG, INDEXES)
        workers.saw(None, body("u2", "t2"), {}, LOG, INDEXES)
        await until(lambda: len(started) == 2)
        assert len(workers.running("u1") + workers.running("u2")) == 4
        began = time.monotonic()
        await workers.stop_all()
        assert time.monotonic() - began < 2
        assert workers.running("u1") == workers.running("u2") == [] and workers.ending() == 0

    run(main)
    assert cancelled == ["reoptimizer", "reoptimizer"]


def test_a_recreated_topology_gets_new_workers_and_the_context_of_its_events() -> None:
    """Kopf posts Events (``kopf.info``) through context variables of its event loop;
    a worker's thread runs in a copy of the context of the event that started it."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    got: list[tuple[str, str]] = []

    def supervise(uid: str, stopped: Stopped, **_: Any) -> None:
        got.append((uid, var.get("unset")))
        stopped.wait()

    async def main() -> None:
        workers = Workers([Worker("supervise", supervise)], FAST)
        var.set("kopf's")
        workers.saw(None, body("u1"), {}, LOG, INDEXES)
        await until(lambda: len(got) == 1)
        workers.saw("DELETED", body("u1"), {}, LOG, INDEXES)
        workers.saw("ADDED", body("u2"), {}, LOG, INDEXES)  # same name, a new object
        await until(lambda: len(got) == 2)
        assert workers.running("u2") == ["supervise"]
        await workers.stop_all()

    run(main)
    assert got == [("u1", "kopf's"), ("u2", "kopf's")]


def test_a_worker_that_does_not_end_is_left_after_its_timeout() -> None:
    timeout = 0.2
    release = threading.Event()

    def stubborn(**_: Any) -> None:
        release.wait(10)  # ignores its stop flag

    async def main() -> None:
        workers = Workers([Worker("stubborn", stubborn, cancellation_timeout=timeout)], FAST)
        workers.saw(None, body("u1"), {}, LOG, INDEXES)
        await until(lambda: workers.running("u1") == ["stubborn"])
        began = time.monotonic()
        await workers.stop_all()
        assert timeout <= time.monotonic() - began < timeout + 1

    try:
        run(main)
    finally:
        release.set()


def test_the_watching_handler_hands_each_event_with_the_indexes_to_the_manager() -> None:
    got: list[tuple[str, Any]] = []

    async def peers(uid: str, stopped: Stopped, **kwargs: Any) -> None:
        got.append((uid, {k: kwargs[k] for k in INDEXES}))
        while not stopped:
            await asyncio.sleep(0.01)

    async def main() -> None:
        workers = Workers([Worker("peers", peers)], FAST)
        memo = kopf.Memo(workers=workers)
        raw: Any = body("u1")
        event = {"body": kopf.Body(raw), "memo": memo, "logger": LOG, **INDEXES}
        watch: Any = handlers.topology_workers  # as Kopf calls it
        await watch(type=None, event={}, **event)
        await until(lambda: workers.running("u1") == ["peers"] and len(got) == 1)
        await watch(type="DELETED", event={}, **event)
        assert workers.running("u1") == []
        await until(lambda: workers.ending() == 0)

    run(main)
    assert got == [("u1", INDEXES)]
