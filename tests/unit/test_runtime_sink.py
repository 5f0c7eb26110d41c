"""The sink's output when a superseded copy writes after the newer copy restored."""

from __future__ import annotations

from pathlib import Path

import pytest

from backstop_runtime.config import Fenced, TaskConfig, from_env
from backstop_runtime.engine import SinkWriter
from backstop_runtime.store import Store


def sink_config(tmp_path: Path) -> TaskConfig:
    return from_env(
        {
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": "sink-0",
            "BACKSTOP_OPERATOR": "sink",
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_UPSTREAM_TASKS": "count-0",
            "BACKSTOP_STORE": str(tmp_path / "store"),
            "BACKSTOP_CONFIG": f'{{"function": "m:S", "path": "{tmp_path / "out"}"}}',
        }
    )


def copy(cfg: TaskConfig) -> tuple[Store, SinkWriter]:
    store = Store(cfg)
    store.claim_epoch()
    return store, SinkWriter(cfg, store)


def write(sink: SinkWriter, *values: int) -> None:
    for v in values:
        sink.add(v)
    sink.flush()


def lines(cfg: TaskConfig) -> list[str]:
    return (Path(cfg.config["path"]) / "sink-0.jsonl").read_text().splitlines()


def test_a_write_in_flight_when_a_newer_copy_restored_is_not_duplicated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old copy passed its fence check before the new copy claimed; its write lands
    after the new copy truncated the file to the checkpoint, and the new copy writes the
    same rounds again: each line must still appear once, in order."""
    cfg = sink_config(tmp_path)
    old_store, old = copy(cfg)
    old.open(0)
    write(old, 1, 2)
    checkpointed = old.offset()
    _, new = copy(cfg)
    new.open(checkpointed)
    with pytest.raises(Fenced):  # the old copy's next check would stop it ...
        old_store.check_fence()
    monkeypatch.setattr(old_store, "check_fence", lambda: None)  # ... it checked before
    write(old, 3, 4)  # the write in flight
    write(new, 3, 4)  # the same rounds, replayed by the new copy
    write(new, 5)
    assert lines(cfg) == ["1", "2", "3", "4", "5"]


def test_a_copy_whose_output_was_truncated_under_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = sink_config(tmp_path)
    old_store, old = copy(cfg)
    old.open(0)
    write(old, 1, 2)
    checkpointed = old.offset()
    write(old, 3)  # after the checkpoint: the restore of the new copy drops it
    _, new = copy(cfg)
    new.open(checkpointed)
    monkeypatch.setattr(old_store, "check_fence", lambda: None)
    with pytest.raises(Fenced, match="truncated"):
        write(old, 4)
    write(new, 3, 4)
    assert lines(cfg) == ["1", "2", "3", "4"]
