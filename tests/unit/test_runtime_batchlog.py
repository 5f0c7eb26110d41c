"""The source's batch log in the store: stored before a batch leaves, compacted below the floor.

A consumer that holds batch ``r`` may ask for it again after the source crashed, so the
log entry of ``r`` must be stored before the batch is sent; and a replay never asks for a
batch at or before the consumers' floor, so the store keeps nothing older (a restart reads
only what it keeps). These tests drive a real ``JsonlSource`` through its log, and the
live source loop of a ``Task`` with the network replaced by a recorder.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime.api import Context
from backstop_runtime.batchlog import logged_rounds
from backstop_runtime.blobs import Blobs, DirBlobs
from backstop_runtime.config import from_env
from backstop_runtime.engine import Batch, BatchLog, Counters, SourceProcessor
from backstop_runtime.sources import JsonlSource
from backstop_runtime.task import Task

INF = float("inf")
LINES = 60


def env(tmp_path: Path) -> dict[str, str]:
    inp = tmp_path / "in"
    if not inp.exists():
        inp.mkdir()
        with (inp / "part-00.jsonl").open("w") as f:
            for i in range(LINES):
                f.write(json.dumps({"id": i, "ts": i * 0.1}) + "\n")
    config = {
        "function": "backstop_runtime.sources:JsonlSource",
        "path": str(inp),
        "bounded": True,
        "maxRecordsPerBatch": 10,
    }
    return {
        "BACKSTOP_TOPOLOGY": "t",
        "BACKSTOP_TASK_ID": "source-0",
        "BACKSTOP_OPERATOR": "source",
        "BACKSTOP_TASK_INDEX": "0",
        "BACKSTOP_STORE": str(tmp_path / "store"),
        "BACKSTOP_CONFIG": json.dumps(config),
        "BACKSTOP_DOWNSTREAM": json.dumps(
            [{"operator": "tok", "parallelism": 1, "grouping": "forward"}]
        ),
    }


def processor(tmp_path: Path, log: BatchLog, restore: bool = False) -> SourceProcessor:
    """A source over the test input logging to ``log``, restored from its last entry (as
    ``Task._restore`` does) or fresh with its entry 0."""
    cfg = from_env(env(tmp_path))
    src = JsonlSource(cfg.config)
    src.open(Context("source-0", 0, 1, lambda r: None, lambda why, x: None))
    if restore:
        src.restore(log.entries[log.last]["state"])
    else:
        log.append(0, src.snapshot(), -INF, False)
    return SourceProcessor(cfg, src, log, Counters())


def rounds_in(blobs: Blobs) -> list[int]:
    return logged_rounds(blobs, "batches")


def store(tmp_path: Path) -> DirBlobs:
    return DirBlobs(tmp_path / "store")


def ids(batches: list[dict[str, Batch]]) -> Counter[int]:
    return Counter(int(rec.value["id"]) for out in batches for b in out.values() for rec in b.recs)


def test_the_store_keeps_only_the_entries_from_the_floor_on(tmp_path: Path) -> None:
    path = store(tmp_path)
    proc = processor(tmp_path, BatchLog(path))
    for r in range(1, 11):
        proc.step_live(r, 4, behind_since=0.0)
    assert rounds_in(path) == list(range(11))
    proc.log.forget_before(6)  # the consumers' floor is 6: batch 7 needs entry 6
    assert rounds_in(path) == [6, 7, 8, 9, 10]
    for r in range(11, 14):  # appends go on after the compaction
        proc.step_live(r, 4, behind_since=0.0)
    proc.log.forget_before(9)
    assert rounds_in(path) == [9, 10, 11, 12, 13]
    assert [p.name for p in path.root.rglob("*") if p.name.endswith(".tmp")] == []
    assert sorted(BatchLog(path).entries) == [9, 10, 11, 12, 13]


def test_a_restart_after_compaction_replays_and_resumes_exactly(tmp_path: Path) -> None:
    path = store(tmp_path)
    proc = processor(tmp_path, BatchLog(path))
    live = [proc.step_live(r, 4, behind_since=0.0) for r in range(1, 9)]
    proc.log.forget_before(5)
    # the source is killed and starts again from its log
    again = processor(tmp_path, BatchLog(path), restore=True)
    assert sorted(again.log.entries) == [5, 6, 7, 8]
    replayed = [again.step_replay(r) for r in (6, 7, 8)]
    unmarked = [{t: Batch(b.r, b.cols, b.wm, b.eos, b.at) for t, b in o.items()} for o in replayed]
    assert unmarked == live[5:]
    again = processor(tmp_path, again.log, restore=True)  # a replay moved the source
    rest = []
    r = 9
    while not again.log.entries[again.log.last]["eos"]:
        rest.append(again.step_live(r, 4, behind_since=0.0))
        r += 1
    assert ids(live + rest) == Counter(range(LINES))  # every line once, none lost


def test_an_unreadable_entry_is_dropped_and_the_log_goes_on(tmp_path: Path) -> None:
    path = store(tmp_path)
    proc = processor(tmp_path, BatchLog(path))
    proc.step_live(1, 4, behind_since=0.0)
    path.path("batches/000000000002").write_text('{"r":2,"state":{"offs')  # lost half
    log = BatchLog(path)
    assert log.last == 1
    again = processor(tmp_path, log, restore=True)
    again.step_live(2, 4, behind_since=0.0)
    assert rounds_in(path) == [0, 1, 2]


class Sent(Exception):
    """Stops the source loop at the end of the stream."""


def test_an_entry_is_stored_before_its_batch_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live loop of a source task: every batch it sends had its log entry stored
    before (the store's ``put`` of the entry had returned)."""
    task = Task(from_env(env(tmp_path)))
    task.epoch = task.store.claim_epoch()
    blobs = task.store.blobs
    events: list[tuple[str, int]] = []
    real_put = blobs.put

    def put(key: str, data: bytes) -> None:
        real_put(key, data)
        if "/batches/" in key:
            events.append(("stored", int(json.loads(data)["r"])))

    async def publish(outs: dict[str, Batch]) -> None:
        (batch,) = outs.values()
        events.append(("sent", batch.r))
        if batch.eos:
            raise Sent

    monkeypatch.setattr(blobs, "put", put)
    monkeypatch.setattr(task, "_publish", publish)
    loop: Any = task._restore()
    with pytest.raises(Sent):
        asyncio.run(loop)
    sent = [r for kind, r in events if kind == "sent"]
    assert sent == list(range(1, len(sent) + 1)) and len(sent) > 3
    for r in sent:
        stored = events.index(("stored", r))
        assert stored < events.index(("sent", r)), (r, events)


def test_a_sources_dead_letters_are_stored_before_the_round_that_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted source resumes after its last logged round and never reads that input
    again: the malformed lines of a round must be in the store before its log entry."""
    inp = tmp_path / "in"
    inp.mkdir()
    lines = [json.dumps({"id": i, "ts": i * 0.1}) for i in range(LINES)]
    lines[15] = '{"id": 15, "ts": '  # malformed, in round 2 (10 records a round)
    (inp / "part-00.jsonl").write_text("\n".join(lines) + "\n")
    task = Task(from_env(env(tmp_path)))
    task.epoch = task.store.claim_epoch()
    blobs = task.store.blobs
    events: list[str] = []
    real_put = blobs.put

    def put(key: str, data: bytes) -> None:
        real_put(key, data)
        if "/dead-letters/" in key:
            events.append(f"dead:{data.decode().count(chr(10))}")
        elif "/batches/" in key:
            events.append(f"logged:{json.loads(data)['r']}")

    async def publish(outs: dict[str, Batch]) -> None:
        if next(iter(outs.values())).eos:
            raise Sent

    monkeypatch.setattr(blobs, "put", put)
    monkeypatch.setattr(task, "_publish", publish)
    loop: Any = task._restore()
    with pytest.raises(Sent):
        asyncio.run(loop)
    assert events.count("dead:1") == 1
    dead = events.index("dead:1")
    assert events[dead + 1] == "logged:2", events
