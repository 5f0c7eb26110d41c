"""The shared store: checkpoints, epochs (fencing), the peer registry, source batch logs.

The store is a directory every task can read and write (a host directory shared by all
nodes locally, a ReadWriteMany volume on a cluster). Files are written whole and renamed
into place, so a reader never sees half a checkpoint and a task killed mid-write leaves
the previous one intact. Layout under ``<store>/<namespace>/<topology>/<uid>/``
(:attr:`TaskConfig.root <backstop_runtime.config.TaskConfig.root>`: the StreamTopology's
namespace and ``metadata.uid``, so topologies of one name in two namespaces, or a topology
deleted and created again, never share state)::

    peers/<task>.json              {"host", "port", "epoch"}: where the task listens now
    tasks/<task>/epochs/<n>        one file per start of the task; the highest n is current;
                                   {"operatorEpoch"}: the BACKSTOP_EPOCH it was claimed with
    tasks/<task>/ckpt/<round>.json the task's state after mini-batch <round>
    tasks/<task>/batches.jsonl     a source's mini-batch log: its read position per batch
    tasks/<task>/dead-letters.jsonl malformed input, kept aside with the reason
    tasks/<task>/status.json       round, epoch and whether the stream ended
    tasks/<task>/floor.json        {"round"}: the task never asks for a batch <= round again
    metrics/{tasks,nodes}/*.jsonl  rows for ``backstop reoptimize``
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from backstop_runtime.config import ConfigError, Fenced, TaskConfig
from backstop_runtime.fencing import OperatorFence, claim_rank, create_claim

log = logging.getLogger("backstop_runtime.store")


def write_json(path: Path, obj: Any, *, sync: bool = False) -> None:
    """Write ``obj`` to ``path`` atomically (a temporary file renamed into place).

    The temporary name is unique per write (a random suffix, not the process id: the
    task is PID 1 in every container, so two copies of one task would share a pid-named
    file and each could rename the other's half-written one into place).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with tmp.open("w") as f:
        json.dump(obj, f, separators=(",", ":"))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def newest_at_or_before(rounds: list[int], bound: int) -> int:
    """The largest of ``rounds`` that is ``<= bound`` (0 if none: the start)."""
    return max((r for r in rounds if r <= bound), default=0)


def last_logged_entry(path: Path) -> dict[str, Any] | None:
    """The last complete entry of a batch log (``None`` if none can be read): read from
    the end, a growing tail at a time, so a long log costs no more than its last line."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            span = 4096
            while True:
                f.seek(max(0, size - span))
                lines = f.read().split(b"\n")[:-1]  # the part after the last newline is cut
                whole = lines if span >= size else lines[1:]  # so may the first one be
                for line in reversed(whole):
                    try:
                        doc = json.loads(line)
                        int(doc["r"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if isinstance(doc, dict):
                        return doc
                if span >= size:
                    return None
                span *= 4
    except OSError:
        return None


def last_logged_round(path: Path) -> int:
    """The round of the last complete line of a batch log (0 if none can be read)."""
    entry = last_logged_entry(path)
    return int(entry["r"]) if entry is not None else 0


def read_json(path: Path) -> Any:
    with path.open() as f:
        return json.load(f)


class Store:
    """One task's view of the shared store."""

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg
        self.dir = cfg.task_dir
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a store volume the task's user cannot write, say
            raise ConfigError(
                f"BACKSTOP_STORE={cfg.store}: cannot create {self.dir} ({err.strerror}); the "
                f"store must be a shared directory writable by uid {os.getuid()}"
            ) from None
        self.epoch = 0
        self.operator_fence = OperatorFence(cfg.recovery_dir, cfg.task, cfg.epoch)

    # ---- epochs and fencing ---------------------------------------------------------

    def claim_epoch(self) -> int:
        """Take the next epoch of this task: a file created exclusively, so two copies
        starting at once still get different numbers and the later one wins.

        It checks first: a copy the operator superseded, or one outranked by a claim made
        with a higher operator epoch, raises :class:`Fenced` without claiming (see
        :mod:`backstop_runtime.fencing`). It checks again after claiming, for a claim of
        a higher rank made while it claimed.
        """
        self._check_operator_fence()
        epochs = self.dir / "epochs"
        epochs.mkdir(exist_ok=True)
        self._check_outranked(self.claims())
        n = self.latest_epoch() + 1
        while not create_claim(epochs / str(n), self.cfg.epoch):
            n += 1
        self.epoch = n
        self._check_outranked(self.claims())
        return n

    def claims(self) -> list[int]:
        """The store epochs claimed so far, in order."""
        epochs = self.dir / "epochs"
        if not epochs.is_dir():
            return []
        return sorted(int(p.name) for p in epochs.iterdir() if p.name.isdigit())

    def latest_epoch(self) -> int:
        return max(self.claims(), default=0)

    def _check_outranked(self, claims: list[int]) -> None:
        for n in claims:
            rank = claim_rank(self.dir / "epochs" / str(n))
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
        itself), or one the operator published a higher epoch for."""
        n = self.epoch + 1
        while (self.dir / "epochs" / str(n)).exists():
            if claim_rank(self.dir / "epochs" / str(n)) >= self.cfg.epoch:
                raise Fenced(f"{self.cfg.task}: epoch {self.epoch} superseded by a newer copy")
            n += 1
        self._check_operator_fence()

    # ---- the peer registry --------------------------------------------------------------

    def publish_address(self, host: str, port: int) -> None:
        """Tell consumers and producers where this copy listens (after :meth:`claim_epoch`)."""
        self.check_fence()
        write_json(
            self.cfg.peers_dir / f"{self.cfg.task}.json",
            {"host": host, "port": port, "epoch": self.epoch},
        )

    def peer(self, task: str) -> dict[str, Any] | None:
        """The registered address of ``task`` (``None`` until it has started once)."""
        try:
            doc = read_json(self.cfg.peers_dir / f"{task}.json")
        except (OSError, ValueError):  # not there yet, or torn (JSON, UTF-8)
            return None
        return doc if isinstance(doc, dict) else None

    # ---- checkpoints --------------------------------------------------------------------

    def save_checkpoint(self, round_: int, state: dict[str, Any], consumers: list[str]) -> None:
        """Write the checkpoint of ``round_``, then delete those no replay can restore
        any more: the ones before our replay floor (see :meth:`replay_floor`)."""
        self.check_fence()
        ckpt = self.dir / "ckpt"
        write_json(ckpt / f"{round_:012d}.json", {**state, "round": round_}, sync=True)
        floor = self.replay_floor(consumers)
        for old in self.checkpoint_rounds():
            if old < floor:
                (ckpt / f"{old:012d}.json").unlink(missing_ok=True)

    def checkpoint_rounds(self, task: str | None = None) -> list[int]:
        """Checkpointed rounds of this task (or of ``task``)."""
        base = self.dir if task is None else self.dir.parent / task
        ckpt = base / "ckpt"
        if not ckpt.is_dir():
            return []
        return sorted(int(p.stem) for p in ckpt.glob("*.json") if p.stem.isdigit())

    # ---- replay floors: what may still be asked for ------------------------------------

    def published_floor(self, task: str) -> int:
        """The floor ``task`` published; 0 while it has published none (not started yet)."""
        try:
            doc = read_json(self.dir.parent / task / "floor.json")
            return int(doc["round"])
        except (OSError, ValueError, KeyError, TypeError):
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
        a stale (lower) one read from a file only keeps more.

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
        write_json(self.dir / "floor.json", {"round": floor})

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
                path = self.dir / "ckpt" / f"{r:012d}.json"
                try:
                    doc = read_json(path)
                except FileNotFoundError:  # trimmed meanwhile by the live task
                    continue
                except (OSError, ValueError) as err:  # torn: JSONDecodeError, UnicodeError
                    log.warning(
                        "%s: skipping unreadable checkpoint %s (%s)", self.cfg.task, path, err
                    )
                    continue
                if not isinstance(doc, dict):
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
        rounds while it is behind.
        """
        best = 0
        for path in self.dir.parent.glob("*/batches.jsonl"):
            if path.parent != self.dir:
                best = max(best, last_logged_round(path))
        return best

    def source_watermark(self, tasks: list[str]) -> float | None:
        """The lowest watermark that the newest batch-log entries of the source tasks
        ``tasks`` logged, idle ones left out (``None`` if every one is idle); a task that
        has logged nothing yet counts as ``-inf``: it has not said how far it is."""
        marks = []
        for task in tasks:
            entry = last_logged_entry(self.dir.parent / task / "batches.jsonl")
            if entry is None:
                marks.append(float("-inf"))
            elif not entry.get("idle"):
                marks.append(float(entry["wm"]))
        return min(marks, default=None)

    # ---- status and dead letters --------------------------------------------------------

    def write_status(self, **fields: Any) -> None:
        write_json(self.dir / "status.json", {"task": self.cfg.task, "epoch": self.epoch, **fields})

    def dead_letter_path(self) -> Path:
        return self.dir / "dead-letters.jsonl"
