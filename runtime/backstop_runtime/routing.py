"""Where a task's output goes: the groupings, a round at a time, and the combiner.

Routing is a pure function of the producer task, the round and a record's place in the
round's output, so a replayed round routes every record as the original did: hashes are
CRC-32 (never Python's per-process salted ``hash``), and ``rebalance`` deals by place.
A round's output is routed whole: ``forward`` and ``global`` pass the columns through,
``rebalance`` slices them, the hash groupings hash the keys in one pass and select per
target, each target's records keeping their order.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from backstop_runtime.api import Columns, Combiner, Record
from backstop_runtime.config import ConfigError, TaskConfig


def stable_hash(rec: Record) -> int:
    """CRC-32 of the key (or of the value when there is none): the same in every process."""
    text = rec.key if rec.key is not None else json.dumps(rec.value, sort_keys=True)
    return zlib.crc32(text.encode())


def _hashes(cols: Columns, parallelism: int) -> list[int]:
    """The target index of every record under a hash grouping (:func:`stable_hash`)."""
    crc = zlib.crc32
    if None not in cols.keys:
        return [crc(k.encode()) % parallelism for k in cols.keys]  # type: ignore[union-attr]
    return [
        crc((k if k is not None else json.dumps(v, sort_keys=True)).encode()) % parallelism
        for k, v in zip(cols.keys, cols.values, strict=True)
    ]


def _select(cols: Columns, targets: list[int], t: int) -> Columns:
    """The records whose target is ``t``, in order."""
    keep = [i for i, x in enumerate(targets) if x == t]
    if len(keep) == len(targets):
        return cols
    k, v, ts = cols.keys, cols.values, cols.ts
    return Columns([k[i] for i in keep], [v[i] for i in keep], [ts[i] for i in keep])


def _slice(cols: Columns, start: int, step: int) -> Columns:
    if step == 1:
        return cols
    return Columns(cols.keys[start::step], cols.values[start::step], cols.ts[start::step])


class Partitioner:
    """Routes each output record to the consumer tasks the groupings say.

    ``rebalance`` deals the records of a round out in turn, round-robin over the consumer's
    tasks from an offset of the producer's index plus the round: record ``n`` of round
    ``r`` (its place among the records this task sends that consumer operator in the
    round) goes to task ``(index + r + n) mod parallelism``. A pure function of the producer
    task and the record's place in its output, never random: a replayed round is the same
    records in the same order, so it routes every record as the original did, and the
    consumers' duplicate filtering by round keeps exactly-once. Within a round each task
    gets its share to within one record; the offset moving with the round evens out small
    rounds, and with the index spreads producers that start together.
    """

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg
        self.consumers = [t for t, _ in cfg.consumers()]
        self.round = 0
        self.dealt = [0] * len(cfg.downstream)
        """Records dealt to each consumer operator in this round (``rebalance``)."""

    def begin(self, r: int) -> None:
        """Start routing round ``r``: ``rebalance`` deals from this round's offset."""
        self.round = r
        self.dealt = [0] * len(self.cfg.downstream)

    def route(self, rec: Record, out: dict[str, list[Record]]) -> None:
        """Route one record (the round's next) into ``out``'s lists."""
        routed = self.route_batch(Columns.of([rec]))
        for t, cols in routed.items():
            out[t].extend(cols.records())

    def route_batch(self, cols: Columns) -> dict[str, Columns]:
        """Route the round's next records ``cols``: the records of every consumer task,
        in their order (as :meth:`route` one at a time would)."""
        out: dict[str, list[Columns]] = {t: [] for t in self.consumers}
        n = len(cols)
        if n == 0:
            return {t: Columns() for t in self.consumers}
        for k, d in enumerate(self.cfg.downstream):
            p = d.parallelism
            if d.grouping == "forward":
                out[f"{d.operator}-{self.cfg.index}"].append(cols)
            elif d.grouping == "global":
                out[f"{d.operator}-0"].append(cols)
            elif d.grouping == "broadcast":
                for t in d.tasks():
                    out[t].append(cols)
            elif d.grouping == "rebalance":
                base = self.cfg.index + self.round + self.dealt[k]
                self.dealt[k] += n
                for i in range(p):  # record j goes to (base + j) mod p
                    out[f"{d.operator}-{i}"].append(_slice(cols, (i - base) % p, p))
            else:  # key, fields, shuffle: the hash of the record key
                targets = _hashes(cols, p)
                for i in range(p):
                    out[f"{d.operator}-{i}"].append(_select(cols, targets, i))
        return {t: _concat(parts) for t, parts in out.items()}


def _concat(parts: list[Columns]) -> Columns:
    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0]
    out = Columns()
    for p in parts:
        out.keys.extend(p.keys)
        out.values.extend(p.values)
        out.ts.extend(p.ts)
    return out


def load_combiner(config: Mapping[str, Any]) -> Combiner | None:
    """The operator's ``config.combiner`` (``"module:Class"``, a :class:`Combiner`),
    built with its config; ``None`` without one."""
    from backstop_runtime.api import load_class

    spec = config.get("combiner")
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise ConfigError(f"config.combiner must be 'module:Class', got {spec!r}")
    cls = load_class(spec)
    if not issubclass(cls, Combiner):
        raise ConfigError(f"config.combiner {cls.__name__} is not a backstop_runtime.Combiner")
    factory: Any = cls
    combiner: Combiner = factory(config)
    return combiner


def combined(combiner: Combiner | None, cols: Columns) -> Columns:
    """``cols`` through ``combiner`` (unchanged without one, or when empty)."""
    if combiner is None or not len(cols):
        return cols
    keys, values, ts = combiner.combine(cols.keys, cols.values, cols.ts)
    if not len(keys) == len(values) == len(ts):
        name = type(combiner).__name__
        raise ValueError(f"{name}.combine returned lists of different lengths")
    return Columns(list(keys), list(values), list(ts))
