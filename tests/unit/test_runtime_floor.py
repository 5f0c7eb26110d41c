"""What a replay may still ask for, and what trimming therefore must keep.

A consumer restored at round ``f`` asks for batches ``f + 1, …``; a source replays batch
``r`` from its batch-log entries ``r - 1`` and ``r``. These tests trim exactly as the live
task does and then replay, without processes or timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backstop_runtime.api import Context
from backstop_runtime.blobs import DirBlobs
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.engine import Batch, BatchLog, Counters, ReplayGone, SourceProcessor
from backstop_runtime.sources import JsonlSource
from backstop_runtime.store import Store


def config(store: Path, task: str, **extra: str) -> TaskConfig:
    env = {
        "BACKSTOP_TOPOLOGY": "t",
        "BACKSTOP_TASK_ID": task,
        "BACKSTOP_OPERATOR": task.rsplit("-", 1)[0],
        "BACKSTOP_TASK_INDEX": "0",
        "BACKSTOP_STORE": str(store),
        **extra,
    }
    return from_env(env)


def source(tmp_path: Path, blobs: DirBlobs | None) -> SourceProcessor:
    inp = tmp_path / "in"
    inp.mkdir()
    with (inp / "part-00.jsonl").open("w") as f:
        for i in range(50):
            f.write(json.dumps({"id": str(i), "ts": i * 0.1, "text": f"w{i}"}) + "\n")
    down = json.dumps([{"operator": "tok", "parallelism": 2, "grouping": "shuffle"}])
    cfg = config(
        tmp_path / "store",
        "source-0",
        BACKSTOP_DOWNSTREAM=down,
        BACKSTOP_CONFIG=json.dumps({"function": "x:y", "path": str(inp), "bounded": True}),
    )
    src = JsonlSource(cfg.config)
    src.open(Context("source-0", 0, 1, lambda r: None, lambda why, x: None))
    log = BatchLog(blobs)
    log.append(0, src.snapshot(), float("-inf"), False)  # as Task._restore does
    return SourceProcessor(cfg, src, log, Counters())


def unmarked(out: dict[str, Batch]) -> dict[str, Batch]:
    """A replayed batch without its ``via`` mark (where the replay came from)."""
    return {t: Batch(b.r, b.cols, b.wm, b.eos, b.at) for t, b in out.items()}


@pytest.mark.parametrize("on_disk", [True, False], ids=["log-file", "memory-only"])
def test_a_replay_right_after_a_trim(tmp_path: Path, on_disk: bool) -> None:
    proc = source(tmp_path, DirBlobs(tmp_path / "log") if on_disk else None)
    live = [proc.step_live(r, 5, behind_since=0.0) for r in range(1, 8)]
    # a consumer whose floor is 4 asks for batch 5 and later: entry 4 must stay
    proc.log.forget_before(4)
    replayed = [proc.step_replay(r) for r in (5, 6, 7)]
    assert [unmarked(b) for b in replayed] == live[4:]
    assert {b.via for out in replayed for b in out.values()} == {("log:source-0",)}
    proc.log.forget_before(6)  # later floors only ever grow; an older request is a
    with pytest.raises(ReplayGone, match="batch 3 of the source"):  # protocol error
        proc.step_replay(4)
    if on_disk:  # a restart keeps what the log kept, and no more
        assert sorted(BatchLog(proc.log.blobs).entries) == [6, 7]


def checkpoints(store: Store, rounds: list[int], consumers: list[str]) -> None:
    for r in rounds:
        store.save_checkpoint(r, {}, consumers)


def test_a_consumer_that_has_not_started_keeps_everything_upstream(tmp_path: Path) -> None:
    """source → mid → sink, sink not started: mid's floor stays 0, so the source keeps
    its whole log and mid every checkpoint, whatever mid has checkpointed."""
    root = tmp_path / "store"
    src, mid = Store(config(root, "source-0")), Store(config(root, "mid-0"))
    checkpoints(mid, [10, 20, 30], ["sink-0"])
    assert mid.checkpoint_rounds() == [10, 20, 30]
    mid.publish_floor(mid.replay_floor(["sink-0"]))
    assert src.consumer_floor(["mid-0"]) == 0


def test_floors_follow_the_consumers_through_a_chain(tmp_path: Path) -> None:
    root = tmp_path / "store"
    src = Store(config(root, "source-0"))
    mid, sink = Store(config(root, "mid-0")), Store(config(root, "sink-0"))
    checkpoints(sink, [10, 25], [])
    sink.publish_floor(sink.replay_floor([]))
    assert sink.checkpoint_rounds() == [25]  # a sink restores its newest only
    # mid's consumer may ask from 26: mid regenerates from its checkpoint 20
    checkpoints(mid, [10, 20, 30], ["sink-0"])
    assert mid.checkpoint_rounds() == [20, 30]
    mid.publish_floor(mid.replay_floor(["sink-0"]))
    assert src.consumer_floor(["mid-0"]) == 20
    # a consumer never published yet (e.g. a second one) holds everything back
    assert src.consumer_floor(["mid-0", "mid-1"]) == 0


def test_a_recovered_task_restores_a_checkpoint_taken_before_the_session(tmp_path: Path) -> None:
    """``checkpoint.before``: the newest checkpoint taken before it; if a copy that kept
    running after its loss was declared wrote only newer ones, the oldest one kept."""
    mid = Store(config(tmp_path / "store", "mid-0"))
    for r, at in ((10, 100.0), (20, 200.0), (30, 300.0)):
        mid.save_checkpoint(r, {"at": at}, ["sink-0"])  # sink not started: all kept
    assert mid.load_checkpoint()["round"] == 30  # type: ignore[index]
    assert mid.load_checkpoint(taken_before=250.0)["round"] == 20  # type: ignore[index]
    assert mid.load_checkpoint(taken_before=50.0)["round"] == 10  # type: ignore[index]
    assert mid.load_checkpoint(at_most=15, taken_before=250.0)["round"] == 10  # type: ignore[index]


def test_a_source_sees_the_newest_round_of_the_other_sources(tmp_path: Path) -> None:
    """Downstream tasks merge round r of every source: a source behind another's rounds
    must know it (it then produces its next rounds without pausing)."""
    root = tmp_path / "store"
    a, b = Store(config(root, "source-0")), Store(config(root, "source-1"))
    log_a = BatchLog(a.blobs, a.batches_key())
    log_b = BatchLog(b.blobs, b.batches_key())
    for r in range(6):
        log_a.append(r, {}, 0.0, False)
    for r in range(3):
        log_b.append(r, {}, 0.0, False)
    b.blobs.put(f"{b.batches_key()}/{3:012d}", b'{"r":3,"sta')  # unreadable: not logged
    assert b.leading_source_round() == 5
    assert a.leading_source_round() == 2
