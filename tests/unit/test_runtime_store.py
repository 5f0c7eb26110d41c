"""The shared store under concurrent copies: temporary names, torn checkpoints."""

from __future__ import annotations

import json
import os
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime import store as store_mod
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.store import Store, write_json


def task_config(store: Path, task: str = "sink-0", **env: str) -> TaskConfig:
    return from_env(
        {
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": task,
            "BACKSTOP_OPERATOR": task.rsplit("-", 1)[0],
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_STORE": str(store),
            **env,
        }
    )


def test_two_writers_with_the_same_pid_do_not_share_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies of a task are both PID 1 in their containers: a write of one that is
    half done when the other writes the same file must still land whole."""
    monkeypatch.setattr(os, "getpid", lambda: 1)
    halfway, resume = threading.Event(), threading.Event()

    def dump(obj: Any, f: Any, **kw: Any) -> None:
        text = json.dumps(obj, **kw)
        f.write(text[:3])
        if obj.get("who") == "first":  # the first writer pauses mid-file
            f.flush()
            halfway.set()
            resume.wait(5)
        f.write(text[3:])

    monkeypatch.setattr(store_mod, "json", types.SimpleNamespace(dump=dump, load=json.load))
    target = tmp_path / "status.json"
    errors: list[BaseException] = []

    def first() -> None:
        try:
            write_json(target, {"who": "first", "pad": "x" * 100})
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    t = threading.Thread(target=first)
    t.start()
    assert halfway.wait(5)
    write_json(target, {"who": "second"})
    resume.set()
    t.join(5)
    assert errors == []
    assert json.loads(target.read_text()) == {"who": "first", "pad": "x" * 100}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_a_torn_newest_checkpoint_is_skipped_for_the_one_before(tmp_path: Path) -> None:
    s = Store(task_config(tmp_path / "store"))
    s.claim_epoch()
    # a consumer that has published no floor yet: both checkpoints are kept
    s.save_checkpoint(10, {"op": "ten"}, ["next-0"])
    s.save_checkpoint(20, {"op": "twenty"}, ["next-0"])
    assert s.checkpoint_rounds() == [10, 20]
    newest = s.dir / "ckpt" / f"{20:012d}.json"
    newest.write_text('{"op": "twen')  # cut mid-write
    doc = s.load_checkpoint()
    assert doc is not None and doc["round"] == 10 and doc["op"] == "ten"
    newest.write_bytes(b"\xff\xfe\x00")  # not even text
    doc = s.load_checkpoint()
    assert doc is not None and doc["round"] == 10


def copy_of(store: Path, namespace: str, uid: str) -> Store:
    return Store(task_config(store, BACKSTOP_NAMESPACE=namespace, BACKSTOP_TOPOLOGY_UID=uid))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("team-a", "uid-1"), ("team-b", "uid-2")),  # one name in two namespaces
        (("team-a", "uid-1"), ("team-a", "uid-2")),  # deleted and created again
    ],
)
def test_topologies_of_one_name_share_no_state(
    tmp_path: Path, first: tuple[str, str], second: tuple[str, str]
) -> None:
    store = tmp_path / "store"
    a = copy_of(store, *first)
    a.claim_epoch()
    a.claim_epoch()
    a.save_checkpoint(10, {"op": "a"}, [])
    a.publish_address("10.0.0.1", 7077)
    a.publish_floor(10)
    b = copy_of(store, *second)
    assert b.latest_epoch() == 0 and b.checkpoint_rounds() == []
    assert b.load_checkpoint() is None and b.peer("sink-0") is None
    assert b.published_floor("sink-0") == 0
    assert b.claim_epoch() == 1
    a.check_fence()  # b's claim fences no copy of the other topology
    b.save_checkpoint(5, {"op": "b"}, [])
    doc = a.load_checkpoint()
    assert doc is not None and doc["op"] == "a"
    assert a.dir != b.dir and a.cfg.metrics_dir != b.cfg.metrics_dir
    assert a.cfg.peers_dir != b.cfg.peers_dir
