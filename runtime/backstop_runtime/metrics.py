"""Per-task metrics, one JSON line per interval, in the rows ``backstop reoptimize`` reads.

Each interval's row is an object of its own (a store has no append), in JSON Lines:
``<root>/metrics/tasks/<task>.e<epoch>.<seq>.jsonl`` (the columns of
``backstop.domain.estimates.TASK_COLUMNS`` plus the runtime's own) and, for the node the task
runs on, ``metrics/nodes/<task>.e<epoch>.<seq>.jsonl``; ``backstop reoptimize --metrics
<root>/metrics`` reads both folders (a directory store holds them as files).
``<root>`` is ``<namespace>/<topology>/<uid>`` in the store
(:attr:`backstop_runtime.config.TaskConfig.root`). ``failures`` is 1 in the first interval
of a copy that replaced a failed one (epoch > 1), so failure rates come from real restarts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from backstop_runtime.blobs import Blobs
from backstop_runtime.engine import Counters


@dataclass
class Metrics:
    """Durations and gauges the task updates; :class:`MetricsWriter` turns them into rows."""

    checkpoint_seconds: float = 0.0
    checkpoints: int = 0
    replay_seconds: float = 0.0
    replayed_batches: int = 0
    recovery_seconds: float | None = None
    restart_seconds: float | None = None
    """A recovered copy: from the session's start (the loss detected) to this process
    starting, the restart term ``recovery.restartSeconds`` of the model, measured."""
    lag: float = 0.0
    round: int = 0


def rfc3339(t: float) -> str:
    """RFC 3339 with milliseconds: rows a short run writes within one second must still
    span a nonzero time (the Spark job divides by a task's observed seconds).

    >>> rfc3339(100.25)
    '1970-01-01T00:01:40.250Z'
    """
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class MetricsWriter:
    """Writes a row per :meth:`write` under the key prefix ``root`` of ``blobs``."""

    def __init__(
        self,
        blobs: Blobs,
        root: str,
        topology: str,
        task: str,
        node: str,
        epoch: int,
        checkpoint_interval: float,
        counters: Counters,
        metrics: Metrics,
    ) -> None:
        self.blobs = blobs
        self.task_key = f"{root}/tasks/{task}.e{epoch}"
        self.node_key = f"{root}/nodes/{task}.e{epoch}"
        self.seq = 0
        self.topology, self.task, self.node, self.epoch = topology, task, node, epoch
        self.interval = checkpoint_interval
        self.counters, self.metrics = counters, metrics
        self.last_wall = time.time()
        self.last_cpu = time.process_time()
        self.last: dict[str, float] = {}
        self.first = True

    def _delta(self, name: str, value: float) -> float:
        d = value - self.last.get(name, 0.0)
        self.last[name] = value
        return d

    def row(self) -> dict[str, Any]:
        now, cpu = time.time(), time.process_time()
        elapsed = max(1e-6, now - self.last_wall)
        c, m = self.counters, self.metrics
        ckpts = self._delta("checkpoints", m.checkpoints)
        ckpt_s = self._delta("checkpoint_seconds", m.checkpoint_seconds)
        out = {
            "topology": self.topology,
            "task": self.task,
            "timestamp": rfc3339(now),
            "tuples_in": int(self._delta("tuples_in", c.tuples_in)),
            "tuples_out": int(self._delta("tuples_out", c.tuples_out)),
            "cpu": (cpu - self.last_cpu) / elapsed,
            "checkpoint_interval": self.interval,
            "checkpoint_duration": ckpt_s / ckpts if ckpts else 0.0,
            "failures": 1 if self.first and self.epoch > 1 else 0,
            "epoch": self.epoch,
            "interval_seconds": elapsed,
            "replay_seconds": self._delta("replay_seconds", m.replay_seconds),
            "replayed_batches": int(self._delta("replayed_batches", m.replayed_batches)),
            "recovery_seconds": m.recovery_seconds,
            "restart_seconds": m.restart_seconds,
            "dead_letters": int(self._delta("dead_letters", c.dead_letters)),
            "lag_seconds": m.lag,
            "round": m.round,
        }
        self.last_wall, self.last_cpu, self.first = now, cpu, False
        return out

    def write(self) -> dict[str, Any]:
        row = self.row()
        self.seq += 1
        node = {"node": self.node, "timestamp": row["timestamp"], "failures": 0}
        self.blobs.put(f"{self.task_key}.{self.seq:06d}.jsonl", _line(row))
        self.blobs.put(f"{self.node_key}.{self.seq:06d}.jsonl", _line(node))
        return row


def _line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row) + "\n").encode()
