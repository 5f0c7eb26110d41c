"""The shared store: checkpoints, epochs (fencing), the peer registry, source batch logs.

The store is a blob store every task reaches (:mod:`backstop_runtime.blobs`): a bucket of
an object store (``BACKSTOP_STORE=s3://bucket/prefix``) or a directory shared by all nodes
(a host directory locally, a ReadWriteMany volume on a cluster). Objects are written whole,
so a reader never sees half a checkpoint and a task killed mid-write leaves the previous
one intact. Keys under ``<namespace>/<topology>/<uid>/``
(:attr:`TaskConfig.root <backstop_runtime.config.TaskConfig.root>`: the StreamTopology's
namespace and ``metadata.uid``, so topologies of one name in two namespaces, or a topology
deleted and created again, never share state)::

    peers/<task>.json              {"host", "port", "epoch"}: where the task listens now
                                   (a fallback: see :meth:`Store.peer`)
    tasks/<task>/epochs/<n>        one object per start of the task; the highest n is
                                   current; {"operatorEpoch", "token"}: the BACKSTOP_EPOCH
                                   it was claimed with, and the claiming copy's own token
    tasks/<task>/ckpt/<round>.json the task's state after mini-batch <round>
    tasks/<task>/batches/<round>   a source's mini-batch log: its read position per batch
    tasks/<task>/dead-letters/<epoch>-<seq>.jsonl  malformed input, kept aside with the reason
    tasks/<task>/status.json       round, epoch and whether the stream ended
    tasks/<task>/floor.json        {"round"}: the task never asks for a batch <= round again
    metrics/{tasks,nodes}/*.jsonl  rows for ``backstop reoptimize``

An operation on an object store that cannot reach it retries until its deadline
(``BACKSTOP_S3_DEADLINE``), then raises
:class:`~backstop_runtime.blobs.StoreUnavailable`; the task stops there, with nothing sent
that its store does not hold, and the process exits (see :mod:`backstop_runtime.main`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from backstop_runtime import peermap
from backstop_runtime.batchlog import last_logged_entry
from backstop_runtime.blobs import Blobs, DirBlobs, open_blobs
from backstop_runtime.config import ConfigError, Fenced, TaskConfig
from backstop_runtime.fencing import OperatorFence, claim_rank, create_claim

log = logging.getLogger("backstop_runtime.store")

PEER_TTL = 0.25
"""Seconds :meth:`Store.peer` and :meth:`Store.leading_source_round` reuse what they read
from an object store."""
SOURCES_REFRESH = 5.0
"""Seconds :meth:`Store.leading_source_round` keeps the list of the other sources."""


def dump(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


def load(data: bytes | None) -> Any:
    """The JSON document ``data`` (``None`` if absent); :class:`ValueError` if torn."""
    return None if data is None else json.loads(data)


def newest_at_or_before(rounds: list[int], bound: int) -> int:
    """The largest of ``rounds`` that is ``<= bound`` (0 if none: the start)."""
    return max((r for r in rounds if r <= bound), default=0)


def key_rounds(keys: list[str], suffix: str = "") -> list[int]:
    """The rounds that keys named ``<round><suffix>`` hold, ascending; other keys skipped.

    >>> key_rounds(["t/ckpt/000000000040.json", "t/ckpt/000000000008.json", "t/x"], ".json")
    [8, 40]
    """
    names = (k.rpartition("/")[2].removesuffix(suffix) for k in keys)
    return sorted(int(n) for n in names if n.isdigit())


def _writable(blobs: Blobs, cfg: TaskConfig) -> None:
    """Refuse, with one line naming ``BACKSTOP_STORE``, a store directory this task
    cannot create (a volume the task's user cannot write, say)."""
    if not isinstance(blobs, DirBlobs):
        return
    path = blobs.root / cfg.task_key
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"BACKSTOP_STORE={cfg.store}: cannot create {path} ({err.strerror}); the "
            f"store must be a shared directory writable by uid {os.getuid()}"
        ) from None


class Store:
    """One task's view of the shared store.

    ``blobs`` is the store itself, opened once per task: the sink and the sources may
    keep their own objects in it too.
    """

    def __init__(self, cfg: TaskConfig, blobs: Blobs | None = None) -> None:
        self.cfg = cfg
        self.blobs = open_blobs(cfg.store) if blobs is None else blobs
        self.key = cfg.task_key
        _writable(self.blobs, cfg)
        self.epoch = 0
        self._sources: tuple[float, list[str]] | None = None
        self._peers: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._leading: tuple[float, int] | None = None
        self._peer_ttl = 0.0 if isinstance(self.blobs, DirBlobs) else PEER_TTL
        self.pushed = peermap.PUSHED
        """The peer map the operator pushes (:mod:`backstop_runtime.peermap`)."""
        self.operator_fence = OperatorFence(cfg.recovery_dir, cfg.task, cfg.epoch)

    def _task(self, task: str | None) -> str:
        return self.key if task is None else self.cfg.task_key_of(task)

    def get_json(self, key: str) -> Any:
        """The JSON document at ``key`` (``None`` if absent or unreadable)."""
        try:
            return load(self.blobs.get(key))
        except ValueError:
            return None

    def put_json(self, key: str, obj: Any) -> None:
        self.blobs.put(key, dump(obj))

    # ---- epochs and fencing ---------------------------------------------------------

    def claim_epoch(self) -> int:
        """Take the next epoch of this task: an object created only if absent, so two
        copies starting at once still get different numbers and the later one wins.

        It checks first: a copy the operator superseded, or one outranked by a claim made
        with a higher operator epoch, raises :class:`Fenced` without claiming (see
        :mod:`backstop_runtime.fencing`). It checks again after claiming, for a claim of
        a higher rank made while it claimed.
        """
        self._check_operator_fence()
        self._check_outranked(self.claims())
        n = self.latest_epoch() + 1
        while not create_claim(self.blobs, self._epoch_key(n), self.cfg.epoch):
            n += 1
        self.epoch = n
        self._check_outranked(self.claims())
        return n

    def _epoch_key(self, n: int) -> str:
        return f"{self.key}/epochs/{n}"

    def claims(self) -> list[int]:
        """The store epochs claimed so far, in order."""
        return key_rounds(self.blobs.list(f"{self.key}/epochs/"))

    def latest_epoch(self) -> int:
        return max(self.claims(), default=0)

    def claim_rank(self, n: int) -> int:
        """The operator epoch store epoch ``n`` was claimed with (0 if none)."""
        return claim_rank(self.blobs, self._epoch_key(n))

    def _check_outranked(self, claims: list[int]) -> None:
        for n in claims:
            rank = self.claim_rank(n)
            if rank > self.cfg.epoch:
                raise Fenced(
                    f"{self.cfg.task}: BACKSTOP_EPOCH={self.cfg.epoch} is outranked by store "
                    f"epoch {n}, claimed with operator epoch {rank}; this copy stays fenced"
                )

    def _check_operator_fence(self) -> None:
        newer = self.operator_fence.superseded_by()
        if newer is not None:
            raise Fenced(
                f"{self.cfg.task}: BACKSTOP_EPOCH={self.cfg.epoch} superseded by epoch {newer} "
                "published by the operator (session.json)"
            )

    def check_fence(self) -> None:
        """Raise :class:`Fenced` if a newer copy of this task has started: one that claimed
        a later store epoch with an operator epoch at least ours (a lower one fences
        itself), or one the operator published a higher epoch for. One ``exists`` of
        the next epoch's key while no newer copy has claimed."""
        n = self.epoch + 1
        while self.blobs.exists(self._epoch_key(n)):
            if self.claim_rank(n) >= self.cfg.epoch:
                raise Fenced(f"{self.cfg.task}: epoch {self.epoch} superseded by a newer copy")
            n += 1
        self._check_operator_fence()

    # ---- the peer registry --------------------------------------------------------------

    def publish_address(self, host: str, port: int) -> None:
        """Tell consumers and producers where this copy listens (after :meth:`claim_epoch`)."""
        self.check_fence()
        doc = {"host": host, "port": port, "epoch": self.epoch}
        self.put_json(f"{self.cfg.peers_key}/{self.cfg.task}.json", doc)

    def peer(self, task: str) -> dict[str, Any] | None:
        """Where ``task`` listens: ``{"host", "port"}`` from the map the operator pushed,
        else its registered address ``{"host", "port", "epoch"}`` (``None`` until it has
        started once).

        The pushed map comes first: it is in memory, and the operator rewrites it as soon
        as a pod moves. The registry is the fallback for a task the map does not name
        (no operator, or no push yet). Readers poll this every 50 ms; on an object store,
        where each read of the registry is a request over the network that the task's
        loop waits for, an answer is reused for :data:`PEER_TTL` seconds.
        """
        pushed = self.pushed.address(task)
        if pushed is not None:
            return {"host": pushed[0], "port": pushed[1]}
        now = time.monotonic()
        cached = self._peers.get(task)
        if cached is not None and now - cached[0] < self._peer_ttl:
            return cached[1]
        doc = self.get_json(f"{self.cfg.peers_key}/{task}.json")
        found = doc if isinstance(doc, dict) else None
        self._peers[task] = (now, found)
        return found

    # ---- checkpoints --------------------------------------------------------------------

    def _ckpt_key(self, round_: int, task: str | None = None) -> str:
        return f"{self._task(task)}/ckpt/{round_:012d}.json"

    def save_checkpoint(self, round_: int, state: dict[str, Any], consumers: list[str]) -> None:
        """Write the checkpoint of ``round_``, then delete those no replay can restore
        any more: the ones before our replay floor (see :meth:`replay_floor`)."""
        self.check_fence()
        self.put_json(self._ckpt_key(round_), {**state, "round": round_})
        floor = self.replay_floor(consumers)
        for old in self.checkpoint_rounds():
            if old < floor:
                self.blobs.delete(self._ckpt_key(old))

    def checkpoint_rounds(self, task: str | None = None) -> list[int]:
        """Checkpointed rounds of this task (or of ``task``)."""
        return key_rounds(self.blobs.list(f"{self._task(task)}/ckpt/"), ".json")

    # ---- replay floors: what may still be asked for ------------------------------------

    def published_floor(self, task: str) -> int:
        """The floor ``task`` published; 0 while it has published none (not started yet)."""
        doc = self.get_json(f"{self._task(task)}/floor.json")
        try:
            return int(doc["round"])
        except (ValueError, KeyError, TypeError):
            return 0

    def consumer_floor(self, consumers: list[str]) -> int:
        """The lowest floor of ``consumers``: no consumer will ask us for a batch at or
        before it, so buffers and a source's batch log may drop those (and keep the rest)."""
        return min((self.published_floor(c) for c in consumers), default=0)

    def replay_floor(self, consumers: list[str]) -> int:
        """The round after which this task may still ask its producers for batches.

        A restart asks from our newest checkpoint on; a regeneration for a consumer asks
        from our newest checkpoint at or before the consumer's request, which is after the
        consumer's floor. So the floor is our newest checkpoint at or before the lowest
        floor of our consumers (a sink: its newest checkpoint), and every checkpoint from
        it on must be kept. A consumer that has not published a floor counts as 0, so a
        task that has not started yet keeps everything it will need. Floors only grow, and
        a stale (lower) one read from the store only keeps more.

        Examples
        --------
        >>> # our checkpoints 10, 20, 30; the consumer's floor 25: a regeneration for it
        >>> # restores our checkpoint 20 and asks our producers from batch 21 on
        >>> newest_at_or_before([10, 20, 30], 25)
        20
        """
        rounds = self.checkpoint_rounds()
        bound = self.consumer_floor(consumers) if consumers else (rounds[-1] if rounds else 0)
        return newest_at_or_before(rounds, bound)

    def publish_floor(self, floor: int) -> None:
        self.put_json(f"{self.key}/floor.json", {"round": floor})

    def load_checkpoint(
        self, at_most: int | None = None, taken_before: float | None = None
    ) -> dict[str, Any] | None:
        """The latest checkpoint whose round is ``<= at_most`` (any if ``None``) and that
        was taken before the Unix time ``taken_before`` if given. If every checkpoint is
        younger than that (a copy that kept running after its loss was declared wrote
        them), the oldest one kept: any checkpoint is consistent, and older ones are gone.
        A checkpoint that cannot be read (torn, or not JSON) is skipped with a warning:
        the one before it is as consistent, and failing the start would only restart the
        task into the same file again.
        """
        oldest = None
        for r in reversed(self.checkpoint_rounds()):
            if at_most is None or r <= at_most:
                key = self._ckpt_key(r)
                try:
                    doc = load(self.blobs.get(key))
                except ValueError as err:  # torn: JSONDecodeError, UnicodeError
                    log.warning(
                        "%s: skipping unreadable checkpoint %s (%s)", self.cfg.task, key, err
                    )
                    continue
                if not isinstance(doc, dict):  # None: trimmed meanwhile by the live task
                    continue
                if taken_before is None or float(doc.get("at", 0.0)) <= taken_before:
                    return doc
                oldest = doc
        return oldest

    # ---- sources keep their rounds together -------------------------------------------

    def leading_source_round(self) -> int:
        """The newest round any other source of the topology has logged (0 if none).

        A task processes round ``r`` once it has round ``r`` of every upstream task, so a
        source whose rounds fall behind another's (it restarted, or was slowed down) delays
        every task that merges both, by the gap; it closes the gap by not pausing between
        rounds while it is behind. On an object store the answer is reused for
        :data:`PEER_TTL` seconds: a stale one costs at most one pause.
        """
        now = time.monotonic()
        if self._leading is not None and now - self._leading[0] < self._peer_ttl:
            return self._leading[1]
        best = 0
        for task in self._other_sources():
            entry = last_logged_entry(self.blobs, self.batches_key(task))
            best = max(best, int(entry["r"]) if entry is not None else 0)
        self._leading = (now, best)
        return best

    def _other_sources(self) -> list[str]:
        """The other tasks of the topology that keep a batch log, found by listing the
        topology's tasks at most every :data:`SOURCES_REFRESH` seconds (a listing of
        every task's objects is too dear for every round)."""
        now = time.monotonic()
        if self._sources is None or now - self._sources[0] > SOURCES_REFRESH:
            prefix = f"{self.cfg.root}/tasks/"
            found = {
                k[len(prefix) :].partition("/")[0]
                for k in self.blobs.list(prefix)
                if "/batches/" in k
            }
            found.discard(self.cfg.task)
            self._sources = (now, sorted(found))
        return self._sources[1]

    def batches_key(self, task: str | None = None) -> str:
        """The key prefix of the batch log of this task (or of ``task``)."""
        return f"{self._task(task)}/batches"

    def source_watermark(self, tasks: list[str]) -> float | None:
        """The lowest watermark that the newest batch-log entries of the source tasks
        ``tasks`` logged, idle ones left out (``None`` if every one is idle); a task that
        has logged nothing yet counts as ``-inf``: it has not said how far it is."""
        marks = []
        for task in tasks:
            entry = last_logged_entry(self.blobs, self.batches_key(task))
            if entry is None:
                marks.append(float("-inf"))
            elif not entry.get("idle"):
                marks.append(float(entry["wm"]))
        return min(marks, default=None)

    # ---- status ---------------------------------------------------------------------

    def write_status(self, **fields: Any) -> None:
        self.put_json(
            f"{self.key}/status.json", {"task": self.cfg.task, "epoch": self.epoch, **fields}
        )
