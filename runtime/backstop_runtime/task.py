"""One running task: restore, listen, consume, process, publish, checkpoint, report.

Start-up order matters for fencing: the copy claims a new epoch first (unless it finds
itself fenced already: :mod:`backstop_runtime.fencing`), then restores
its newest checkpoint (a sink deletes its output objects after the checkpointed round),
then binds its port and publishes the address. Once it serves, its store calls run in
threads (:mod:`backstop_runtime.offloop`), so the loop keeps serving meanwhile. Consumers
and producers find it through the registry and re-subscribe; anything they already have
is dropped by batch number, anything nobody holds is regenerated (``replay``).
Checkpoints are taken after every batch whose number is a multiple of
``K = checkpoint interval / batch interval``: every task checkpoints the same rounds, so
batch ``K·k`` is the checkpoint punctuation ``P_k`` of *Incremental Recovery in
Distributed Stream Processing Systems*, Section 4.1, and the checkpoints of one round
form a consistent cut.

An active replica (``BACKSTOP_ROLE=replica``, ``spec.replication``) restores the same
checkpoint, reads the same input (:func:`backstop_runtime.inputs.stream_copies`) and serves
the same batches to the same consumers, which take the first copy of each: when the
primary's node dies, the consumers' input goes on from the replica with no restart and no
replay on their path. A replica owns nothing in the store: it claims no epoch (that would
fence its primary out) and writes no checkpoint, status, metrics row or output.

When the primary's node is lost, the operator promotes the replica in place, with no
restart and no replay (:mod:`backstop_runtime.promotion`).

The task serves its consumers through :mod:`backstop_runtime.serving` and runs its
periodic duties (the fence check, the replay floors, the metrics rows) from
:mod:`backstop_runtime.duties`; this module holds its life cycle, its state and its loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import time
from typing import Any

from backstop_runtime import duties, httpmetrics, inputs, promotion, serving, wire
from backstop_runtime import session as sessions
from backstop_runtime import stopping as stopping_
from backstop_runtime.api import Context, Operator, Sink, Source
from backstop_runtime.buffers import ByteQueue, Caps
from backstop_runtime.channels import OutChannel
from backstop_runtime.config import ConfigError, Fenced, TaskConfig
from backstop_runtime.engine import (
    INF,
    Batch,
    BatchLog,
    Counters,
    DeadLetters,
    Processor,
    SinkWriter,
    SourceProcessor,
    instantiate,
)
from backstop_runtime.metrics import Metrics, MetricsWriter
from backstop_runtime.offloop import StoreWriter
from backstop_runtime.store import Store

log = logging.getLogger("backstop_runtime.task")

MAX_RECORDS_PER_BATCH = 4000
"""A source round's records at most (``config.maxRecordsPerBatch``). A round is cut every
``BACKSTOP_BATCH_INTERVAL`` too, so this bounds only a round read from a backlog (a bounded
input, a restart's catch-up): there a round's fixed costs (its frames, log entry and
barrier) are spread over this many records, and a round stays a small unit of replay."""


def until_paced(period: float, now: float) -> float:
    """Seconds a paced source (``config.maxRecordsPerSecond``) waits after a full round of
    ``period`` seconds' worth of records: until the next multiple of ``period`` on the
    wall clock, not ``period`` from now.

    A downstream round waits for every source's batch of that round, so its lag is the
    spread of the sources' cut times. Sources paced from when each started stay apart by
    whatever separated their starts, and one restarted after a node loss comes back out
    of phase for good: its consumers then lag by up to a whole period more than before the
    loss. On the shared clock every source cuts at the same moments, whenever it started
    (one round per period at most: the rate holds).

    >>> until_paced(1.25, 100.0), until_paced(1.25, 100.5), until_paced(1.25, 101.25)
    (1.25, 0.75, 1.25)
    """
    if period <= 0:
        return 0.0
    wait = (math.floor(now / period) + 1) * period - now
    return wait + period if wait < 1e-6 else wait  # on a grid point: the next one


class Task:
    """The task this process runs (see the module docstring for its life cycle)."""

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg
        self.store = Store(cfg)
        self.writes = StoreWriter(cfg.task)
        """The thread that performs the store writes of the running task, in order."""
        self.counters = Counters()
        self.metrics = Metrics()
        self.started = time.time()
        self.epoch = 0
        self.round = 0
        self.stepped = 0  # the last round the state holds
        self.eos = False
        self.replica = cfg.is_replica
        """An active replica (until promoted): it owns nothing in the store."""
        self.promotion = asyncio.Event()
        """Set when the operator promotes this replica (:meth:`promote`)."""
        self.promoted_epoch = 0
        self.subscription = 0
        """Counts the promotions: an input whose count is older subscribes again."""
        self.port = 0
        """The data port this copy serves on (known once it serves)."""
        self.session = sessions.read(cfg.recovery_dir, cfg.task)
        self.adaptive = self.session.adaptive
        self.behind_since = time.time()  # the last time the input had no backlog (a source)
        self.replayed_from: set[str] = set()  # where replays to this copy came from
        self.replay_checked = False
        recovering = self.session.recovering(cfg.task) and not cfg.is_replica
        self.planned = self.session.replay.get(cfg.task) if recovering else None
        if self.planned is not None and self.session.before is not None:
            self.metrics.restart_seconds = self.started - self.session.before
        self.caps = Caps.from_env()
        self.max_records = int(cfg.config.get("maxRecordsPerBatch", MAX_RECORDS_PER_BATCH))
        self.rate = float(cfg.config.get("maxRecordsPerSecond", 0))
        self.period = max(1, round(cfg.checkpoint_interval / cfg.batch_interval))
        self.catch_up_lag = float(os.environ.get("BACKSTOP_CAUGHT_UP_LAG", "0.5"))
        self.channels = {c: OutChannel(c, self.caps) for c, _ in cfg.consumers()}
        self.followers: dict[str, OutChannel] = {}  # the consumers' active replicas
        self.log = BatchLog(self.store.blobs if cfg.is_source else None, self.store.batches_key())
        self.logged_cond = asyncio.Condition()
        self.dead = DeadLetters(self.store, self.counters, cfg.task)
        # validate the user's class now: a config error must fail the start, not a replay
        self.sink: SinkWriter | None = None
        if cfg.is_source:
            self.source: Source = instantiate(cfg, Source)
        else:
            self.op: Operator = instantiate(cfg, Operator)
            self.sink = SinkWriter(cfg, self.store) if isinstance(self.op, Sink) else None
            if self.sink is None and not cfg.downstream:
                raise ConfigError(
                    f"{cfg.task} has no consumers (BACKSTOP_DOWNSTREAM is empty), so its "
                    "config.function must be a backstop_runtime.Sink"
                )

    @property
    def backup(self) -> bool:
        """Whether channels keep batches until the consumer's checkpoint (``M(v)=1``):
        the primary's duty, never a replica's."""
        return (self.cfg.keeps_backup or self.adaptive) and not self.replica

    async def logged(self, r: int) -> None:
        """Wait until the (source) batch log holds round ``r``."""
        async with self.logged_cond:
            await self.logged_cond.wait_for(lambda: self.log.last >= r)

    # ---- life cycle ---------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Start up (its store calls inline: nothing is served before they are done), then
        serve and work until ``stop``, the work's failure or a fence."""
        loop = asyncio.get_running_loop()
        self.store.pushed.on_promotion(
            lambda epoch: loop.call_soon_threadsafe(self._promoted, epoch)
        )
        web = None
        if self.replica and (self.cfg.is_source or self.sink is not None):
            # a source's replica would read input its primary logs, a sink's would write
            # output its primary commits: neither has a copy of its own to serve. It stands
            # by with its metrics port open: the operator promotes it there (PUT /peers).
            log.warning("%s: a replica of a source or a sink stands by", self.cfg.copy)
            web = await self._serve_metrics()
            if not await promotion.wait(self, stop):
                web.close()
                return
            promotion.become_primary(self)
            if self.cfg.is_source:  # the log as the dead primary left it, not as at start
                self.log = BatchLog(self.store.blobs, self.store.batches_key())
        if not self.replica:  # a replica claims no epoch: that would fence its primary out
            self.epoch = self.store.claim_epoch()
        log.info("%s: epoch %d, backup=%s", self.cfg.copy, self.epoch, self.cfg.keeps_backup)
        main = self._restore()
        serve = functools.partial(serving.serve, self)
        server = await asyncio.start_server(serve, host="0.0.0.0", port=self.cfg.port)
        self.port = server.sockets[0].getsockname()[1]
        if not self.replica:  # a replica is found through the operator's map alone
            self.store.publish_address(self.cfg.host, self.port)
        web = web or await self._serve_metrics()
        try:
            await self._work(main, stop)
        finally:
            server.close()
            web.close()

    async def _serve_metrics(self) -> asyncio.Server:
        """``/metrics``, ``/status``, ``/ready``, ``/suspects`` and ``PUT /peers``."""
        port = int(os.environ.get("BACKSTOP_METRICS_PORT", "9090"))
        return await httpmetrics.serve(port, self.cfg.copy, self._values)

    async def _work(self, main: Any, stop: asyncio.Event) -> None:
        """Run the main loop, the duties and (for a replica) the wait for a promotion,
        until ``stop``, a failure or a fence; then the final checkpoint and status."""
        writer = self.metrics_writer()
        helpers = set() if self.replica else set(self._duties(writer))
        work = asyncio.ensure_future(main)
        stopping = asyncio.ensure_future(stop.wait())
        promoting = asyncio.ensure_future(self.promotion.wait())
        fenced = False
        try:
            while True:
                done, _ = await asyncio.wait(
                    [work, stopping, promoting, *helpers], return_when=asyncio.FIRST_COMPLETED
                )
                for f in done:
                    if f not in (stopping, promoting) and f.exception() is not None:
                        raise f.exception()
                if promoting not in done or stopping in done:
                    break
                promoting = asyncio.ensure_future(asyncio.Event().wait())  # never again
                if self.replica:
                    writer = await promotion.promote(self)
                    helpers = set(self._duties(writer))
            if stopping in done:  # SIGTERM: the operator stops this pod on purpose
                work.cancel()  # the state stays at the round it holds now
                await asyncio.wait([work])
                if not self.replica:
                    await self.writes(stopping_.final_checkpoint, self)
        except Fenced:
            fenced = True  # the newer copy owns status.json now: write nothing more
            raise
        finally:
            for f in [work, stopping, promoting, *helpers]:
                f.cancel()
            try:
                if not fenced and not self.replica:
                    with contextlib.suppress(Exception):
                        await self.writes(writer.write)
                    await self.report_status()
            finally:
                await asyncio.to_thread(self.writes.close)

    # ---- promotion ------------------------------------------------------------------

    def _promoted(self, epoch: int) -> None:
        """A push promoted this copy (called on the loop)."""
        self.promoted_epoch = epoch
        self.promotion.set()

    def _duties(self, writer: MetricsWriter) -> list[asyncio.Future[Any]]:
        """The primary's periodic duties: the fence check, trimming the backups, the
        recovery session, the metrics rows."""
        return [
            asyncio.ensure_future(duties.fence_watch(self.store)),
            asyncio.ensure_future(duties.trim_loop(self)),
            asyncio.ensure_future(duties.session_watch(self)),
            asyncio.ensure_future(
                duties.metrics_loop(self.cfg, self.writes, writer, self.report_status)
            ),
        ]

    def metrics_writer(self) -> MetricsWriter:
        return MetricsWriter(
            self.store.blobs,
            self.cfg.metrics_key,
            self.cfg.topology,
            self.cfg.task,
            os.environ.get("BACKSTOP_NODE_NAME") or "localhost",
            self.epoch,
            self.cfg.checkpoint_interval,
            self.counters,
            self.metrics,
        )

    def _restore(self) -> Any:
        if self.cfg.is_source:
            ctx = Context(
                self.cfg.task, self.cfg.index, self.cfg.parallelism, lambda r: None, self.dead
            )
            self.source.open(ctx)
            if self.log.last < 0:
                self.log.append(0, self.source.snapshot(), -INF, False)
            else:
                last = self.log.entries[self.log.last]
                self.source.restore(last["state"])
                self.round, self.eos = self.log.last, bool(last["eos"])
                # the previous copy had read its input up to then at the latest: what was
                # written since is a backlog, and the lag counts from there
                self.behind_since = float(last["at"])
            self.proc_src = SourceProcessor(
                self.cfg,
                self.source,
                self.log,
                self.counters,
                store=self.store,
                before_log=self.dead.flush,  # a logged round's input is not read again
            )
            return self._source_loop()
        before = self.session.before if self.session.recovering(self.cfg.task) else None
        ckpt = self.store.load_checkpoint(taken_before=before)
        if before is not None:
            taken = float(ckpt.get("at", 0.0)) if ckpt else None
            log.info(
                "%s: recovering (session checkpoint.before %.3f): checkpoint %s taken at %s%s",
                self.cfg.task,
                before,
                ckpt["round"] if ckpt else "none",
                f"{taken:.3f}" if taken is not None else "-",
                " (none older is kept)" if taken is not None and taken > before else "",
            )
        self.proc = Processor(self.cfg, self.op, self.counters, self.dead, sink=self.sink)
        self.proc.restore(ckpt)
        self.round = self.stepped = int(ckpt["round"]) if ckpt else 0
        self.eos = self.proc.eos
        if self.sink is not None:
            self.sink.open(int(ckpt["round"]) if ckpt else 0)
        log.info("%s: restored round %d", self.cfg.copy, self.round)
        return self._process_loop()

    # ---- the live loops -------------------------------------------------------------

    async def _source_loop(self) -> None:
        while not self.eos:
            r = self.round + 1
            t0 = time.monotonic()
            before = self.counters.tuples_in
            # read and logged on the writer thread: the entry is stored before we publish
            outs = await self.writes(
                self.proc_src.step_live, r, self.max_records, self.behind_since, self.rate > 0
            )
            self.behind_since = float(self.log.entries[r]["at"])
            async with self.logged_cond:
                self.logged_cond.notify_all()
            self.metrics.checkpoint_seconds += time.monotonic() - t0
            self.metrics.checkpoints += 1
            await self._publish(outs)
            self.round = r
            await self._progress(time.time() - float(self.log.entries[r]["at"]))
            if any(b.eos for b in outs.values()) or self.log.entries[r]["eos"]:
                await self._ended()
                await self.report_status()
                break
            n = self.counters.tuples_in - before
            if n < self.max_records:
                if await asyncio.to_thread(self.store.leading_source_round) > r:
                    await asyncio.sleep(0)  # behind another source's rounds: catch up
                else:
                    await asyncio.sleep(self.cfg.batch_interval)  # no backlog: pace the batches
            elif self.rate:  # config.maxRecordsPerSecond, on the clock every source shares
                await asyncio.sleep(until_paced(n / self.rate, time.time()))
        await asyncio.Event().wait()  # keep serving replays

    async def _process_loop(self) -> None:
        if self.eos:  # restored after the end of the stream: only serve what was asked
            self.eos = False
            await self._ended()
            await asyncio.Event().wait()
        ahead = Caps.from_env(readahead=True)
        queues: list[ByteQueue[Batch]] = [ByteQueue(ahead) for _ in self.cfg.upstream]
        pumps = [
            asyncio.ensure_future(self._pump(u, q))
            for u, q in zip(self.cfg.upstream, queues, strict=True)
        ]
        ended = [False] * len(queues)
        try:
            while not self.proc.eos:
                r = self.round + 1
                batches = []
                for i, q in enumerate(queues):
                    if ended[i]:
                        batches.append(Batch.ended(r))
                        continue
                    b = await self._get(q, pumps[i])
                    ended[i] = b.eos
                    self.replayed_from.update(b.via)  # a replay: where it came from
                    batches.append(b)
                outs = self.proc.step(r, batches)
                self.stepped = r  # the state now holds round r (published or not)
                if (r % self.period == 0 or self.proc.eos) and not self.replica:
                    # before publishing: no consumer can checkpoint round r before we have
                    # (a regenerating replay restores our checkpoint at its round)
                    await self.writes(self._checkpoint, r)
                    await self.report_status()
                if self.channels:
                    await self._publish(outs)
                self.round = r  # after publishing: a subscriber regenerates up to self.round
                await self._progress(time.time() - min(b.at for b in batches))
            self.check_replay()
            await self._ended()
            await self.report_status()
            await asyncio.Event().wait()
        finally:
            for p in pumps:
                p.cancel()

    @staticmethod
    async def _get(q: ByteQueue[Batch], pump: asyncio.Future[None]) -> Batch:
        """The next batch, or the pump's error (e.g. :class:`Fenced`) if it died."""
        if not q.empty() or not pump.done():
            getter: asyncio.Future[Batch] = asyncio.ensure_future(q.get())
            waiting: set[asyncio.Future[Any]] = {getter, pump}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                return getter.result()
            getter.cancel()
        raise pump.exception() or RuntimeError("input ended")

    async def _pump(self, upstream: str, q: ByteQueue[Batch]) -> None:
        """Feed ``q`` with ``upstream``'s batches, each counted by its frame's size (the
        read-ahead is bounded in bytes); subscribe again after a promotion, from the batch
        after the last one fed (as the task itself, with its new epoch)."""
        nxt = self.round + 1
        while True:
            subscribed = self.subscription
            copies = inputs.stream_copies(
                self.store, upstream, consumer=self.cfg.copy, epoch=self.epoch, start=nxt
            )
            async with contextlib.aclosing(copies):
                async for b, size in copies:
                    await q.put(b, size)
                    nxt = b.r + 1
                    if self.subscription != subscribed and not b.eos:
                        break
                else:
                    await asyncio.Event().wait()  # ended with eos: stay done without raising

    async def _progress(self, lag: float) -> None:
        self.metrics.round, self.metrics.lag = self.round, lag
        if self.metrics.recovery_seconds is None and lag <= self.catch_up_lag:
            self.metrics.recovery_seconds = time.time() - self.started
            log.info(
                "%s: caught up after %.2fs (lag %.2fs)",
                self.cfg.copy,
                self.metrics.recovery_seconds,
                lag,
            )
            self.check_replay()
            await self.report_status()

    def check_replay(self) -> None:
        """Compare where the replay came from with where the session's plan said (once:
        when caught up, or at the end of the stream if that came first)."""
        planned = self.planned
        if planned is None or self.replay_checked:
            return
        self.replay_checked = True
        got = sorted(self.replayed_from)
        if got == sorted(planned):
            log.info("%s: replayed from %s, as the recovery plan says", self.cfg.task, got)
        else:
            log.warning(
                "%s: replayed from %s, but the recovery plan says %s (a buffer the plan "
                "counts on was lost, or one it does not count on was kept)",
                self.cfg.task,
                got,
                sorted(planned),
            )

    def _checkpoint(self, r: int) -> None:
        """Save round ``r``'s checkpoint (the state holds round ``r``): the sink's output
        first, then the dead letters, then the checkpoint. Blocking: the live task runs it
        on :attr:`writes`, while the one coroutine that steps the state waits."""
        t0 = time.monotonic()
        state = self.proc.snapshot()
        if self.sink is not None:
            state["sink"] = self.sink.commit(r)
        state.update(epoch=self.epoch, at=time.time())  # ``at``: for checkpoint.before
        self.dead.flush()
        self.store.save_checkpoint(r, state, list(self.channels))
        self.metrics.checkpoint_seconds += time.monotonic() - t0
        self.metrics.checkpoints += 1

    async def _publish(self, outs: dict[str, Batch]) -> None:
        if self.round == 0 and not self.backup:
            # A fresh start: wait until every consumer has subscribed, so what they need
            # is sent rather than regenerated (a consumer that is down later is the
            # failure case the replay exists for).
            for ch in self.channels.values():
                async with ch.cond:
                    await ch.cond.wait_for(lambda ch=ch: ch.connected)  # type: ignore[misc]
        for c, batch in outs.items():
            frame = wire.encode(batch.to_msg())
            await self.channels[c].append(batch.r, frame, self.backup)
            for f in self.followers.values():
                if f.consumer == c:
                    await f.append(batch.r, frame, False)

    async def _ended(self) -> None:
        """The stream ended: wake senders whose consumers wait past its end."""
        self.eos = True
        for ch in self.channels.values():
            async with ch.cond:
                ch.cond.notify_all()

    def _values(self) -> dict[str, Any]:
        """The live values of ``/metrics`` and ``/status``."""
        c, m = self.counters, self.metrics
        return {
            "tuples_in_total": c.tuples_in,
            "tuples_out_total": c.tuples_out,
            "dead_letters_total": c.dead_letters,
            "checkpoints_total": m.checkpoints,
            "checkpoint_seconds_total": m.checkpoint_seconds,
            "replayed_batches_total": m.replayed_batches,
            "replay_seconds_total": m.replay_seconds,
            "round": self.round,
            "lag_seconds": m.lag,
            "recovery_seconds": m.recovery_seconds,
            "epoch": self.epoch,
            "eos": self.eos,
            "unanswered": inputs.unanswered(),
            "inputs": inputs.received(),
        }

    async def report_status(self) -> None:
        """Write ``status.json`` as of now, on the writer thread (the primary's alone)."""
        if self.replica:
            return
        await self.writes(functools.partial(self.store.write_status, **self._status_fields()))

    def _status_fields(self) -> dict[str, Any]:
        """What ``status.json`` says now (read on the loop, which changes these)."""
        return dict(
            round=self.round,
            eos=self.eos,
            started=self.started,
            recoverySeconds=self.metrics.recovery_seconds,
            lag=self.metrics.lag,
            replayedBatches=self.metrics.replayed_batches,
            replaySeconds=self.metrics.replay_seconds,
            deadLetters=self.counters.dead_letters,
            unanswered=inputs.unanswered(),
            restartSeconds=self.metrics.restart_seconds,
            replaySources=sorted(self.replayed_from),
            plannedReplay=self.planned,
        )


__all__ = ["Fenced", "Task"]
