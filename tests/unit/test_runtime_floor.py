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
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.engine import BatchLog, Counters, ReplayGone, SourceProcessor
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


def source(tmp_path: Path, log_path: Path | None) -> SourceProcessor:
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
    log = BatchLog(log_path)
    log.append(0, src.snapshot(), float("-inf"), False)  # as Task._restore does
    return SourceProcessor(cfg, src, log, Counters())


@pytest.mark.parametrize("on_disk", [True, False], ids=["log-file", "memory-only"])
def test_a_replay_right_after_a_trim(tmp_path: Path, on_disk: bool) -> None:
    proc = source(tmp_path, tmp_path / "batches.jsonl" if on_disk else None)
    live = [proc.step_live(r, 5) for r in range(1, 8)]
    # a consumer whose floor is 4 asks for batch 5 and later: entry 4 must stay
    proc.log.forget_before(4)
    assert [proc.step_replay(r) for r in (5, 6, 7)] == live[4:]
    proc.log.forget_before(6)  # later floors only ever grow; an older request is a
    if on_disk:  # protocol error, served from the file that keeps every entry
        assert proc.step_replay(4) == live[3]
    else:
        with pytest.raises(ReplayGone, match="batch 3 of the source"):
            proc.step_replay(4)


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
