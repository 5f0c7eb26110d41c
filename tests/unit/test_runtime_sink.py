"""The sink's output objects (one per checkpoint round) when copies of a sink task race:
a superseded copy writing late, a replay after a restore, another checkpoint schedule.
Each case runs on a directory and on S3 (SeaweedFS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backstop_runtime.blobs import open_blobs
from backstop_runtime.config import Fenced, TaskConfig, from_env
from backstop_runtime.engine import SinkWriter
from backstop_runtime.output import read_lines, round_key
from backstop_runtime.store import Store

Where = tuple[str, dict[str, str]]


def sink_config(tmp_path: Path, location: str) -> TaskConfig:
    return from_env(
        {
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": "sink-0",
            "BACKSTOP_OPERATOR": "sink",
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_UPSTREAM_TASKS": "count-0",
            "BACKSTOP_STORE": str(tmp_path / "store"),
            "BACKSTOP_CONFIG": json.dumps({"function": "m:S", "path": location}),
        }
    )


@pytest.fixture
def cfg(tmp_path: Path, data_location: Where, monkeypatch: pytest.MonkeyPatch) -> TaskConfig:
    location, env = data_location
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the sink opens its location from the environment
    return sink_config(tmp_path, location)


def copy(cfg: TaskConfig) -> tuple[Store, SinkWriter]:
    store = Store(cfg)
    store.claim_epoch()
    return store, SinkWriter(cfg, store)


def commit(sink: SinkWriter, r: int, *values: int) -> int:
    for v in values:
        sink.add(v)
    return sink.commit(r)


def lines(cfg: TaskConfig) -> list[str]:
    return read_lines(cfg.config["path"])


def test_each_checkpoint_commits_the_lines_since_the_previous_one(cfg: TaskConfig) -> None:
    _, sink = copy(cfg)
    sink.open(0)
    assert commit(sink, 10, 1, 2) == 10
    assert commit(sink, 20) == 20  # nothing new: no object
    commit(sink, 30, 3)
    blobs = open_blobs(cfg.config["path"])
    assert blobs.list() == [round_key("sink-0", 10), round_key("sink-0", 30)]
    assert blobs.get(round_key("sink-0", 30)) == b"3\n"
    assert lines(cfg) == ["1", "2", "3"]


def test_a_late_write_of_a_superseded_copy_changes_nothing(
    cfg: TaskConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old copy passed its fence check before the new copy claimed; its write of round
    20 lands after the new copy restored round 10 and committed round 20 itself: the same
    bytes stay, and no line appears twice."""
    old_store, old = copy(cfg)
    old.open(0)
    commit(old, 10, 1, 2)
    _, new = copy(cfg)
    new.open(10)
    with pytest.raises(Fenced):  # the old copy's next check would stop it ...
        old_store.check_fence()
    commit(new, 20, 3, 4)
    blobs = open_blobs(cfg.config["path"])
    committed = blobs.get(round_key("sink-0", 20))
    monkeypatch.setattr(old_store, "check_fence", lambda: None)  # ... it checked before
    commit(old, 20, 3, 4)  # the write in flight
    assert blobs.get(round_key("sink-0", 20)) == committed == b"3\n4\n"
    commit(new, 30, 5)
    assert lines(cfg) == ["1", "2", "3", "4", "5"]


def test_a_restore_deletes_the_output_no_checkpoint_covers(cfg: TaskConfig) -> None:
    """Round 20's object was written but its checkpoint never saved (the copy died in
    between); the new copy restores round 10, commits at other rounds (a stop at round 15)
    and the lines of rounds 11..20 still appear once."""
    _, old = copy(cfg)
    old.open(0)
    commit(old, 10, 1, 2)
    commit(old, 20, 3, 4)
    _, new = copy(cfg)
    new.open(10)
    assert lines(cfg) == ["1", "2"]
    commit(new, 15, 3)
    commit(new, 20, 4)
    assert lines(cfg) == ["1", "2", "3", "4"]


def test_an_object_of_another_schedule_at_a_round_is_replaced(
    cfg: TaskConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A superseded copy that checkpointed at other rounds writes round 20 late, holding
    rounds 11..20; the new copy, which committed round 15, commits round 20 with rounds
    16..20 only: its content replaces the other, so no line repeats."""
    old_store, old = copy(cfg)
    old.open(0)
    commit(old, 10, 1)
    _, new = copy(cfg)
    new.open(10)
    commit(new, 15, 2)
    monkeypatch.setattr(old_store, "check_fence", lambda: None)
    commit(old, 20, 2, 3)
    commit(new, 20, 3)
    assert lines(cfg) == ["1", "2", "3"]


def test_a_fenced_copy_commits_nothing(cfg: TaskConfig) -> None:
    _, old = copy(cfg)
    old.open(0)
    old.add(1)
    copy(cfg)
    with pytest.raises(Fenced):
        old.commit(10)
    assert lines(cfg) == []


def test_cat_prints_the_committed_lines_in_task_and_round_order(
    tmp_path: Path, data_location: Where
) -> None:
    location, env = data_location
    blobs = open_blobs(location, env)
    blobs.put(round_key("sink-10", 5), b'{"a":3}\n')
    blobs.put(round_key("sink-2", 30), b'{"a":2}\n')
    blobs.put(round_key("sink-2", 4), b'{"a":1}\n')
    blobs.put(round_key("other-0", 4), b'{"b":0}\n')
    blobs.put("notes/readme.txt", b"not output\n")
    cmd = [sys.executable, "-m", "backstop_runtime.output", "cat", location]
    full = {**os.environ, **env}
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ['{"b":0}', '{"a":1}', '{"a":2}', '{"a":3}']
    only = subprocess.run(
        [*cmd, "--task", "sink"], env=full, capture_output=True, text=True, check=True
    )
    assert only.stdout.splitlines() == ['{"a":1}', '{"a":2}', '{"a":3}']
    assert read_lines(location, ["sink-10"], env) == ['{"a":3}']
