"""The shared store: torn checkpoints, topologies kept apart, configuration errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backstop_runtime import store as store_mod
from backstop_runtime.blobs import Blobs, DirBlobs, open_blobs
from backstop_runtime.config import ConfigError, TaskConfig, from_env
from backstop_runtime.store import Store


def task_config(store: Path | str, task: str = "sink-0", **env: str) -> TaskConfig:
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


def test_a_torn_newest_checkpoint_is_skipped_for_the_one_before(tmp_path: Path) -> None:
    s = Store(task_config(tmp_path / "store"))
    s.claim_epoch()
    # a consumer that has published no floor yet: both checkpoints are kept
    s.save_checkpoint(10, {"op": "ten"}, ["next-0"])
    s.save_checkpoint(20, {"op": "twenty"}, ["next-0"])
    assert s.checkpoint_rounds() == [10, 20]
    assert isinstance(s.blobs, DirBlobs)
    newest = s.blobs.path(f"{s.key}/ckpt/{20:012d}.json")
    newest.write_text('{"op": "twen')  # cut mid-write
    doc = s.load_checkpoint()
    assert doc is not None and doc["round"] == 10 and doc["op"] == "ten"
    newest.write_bytes(b"\xff\xfe\x00")  # not even text
    doc = s.load_checkpoint()
    assert doc is not None and doc["round"] == 10


def copy_of(location: tuple[str, dict[str, str]], namespace: str, uid: str) -> Store:
    """A task of topology ``wc`` in ``namespace`` (uid ``uid``) on the store at ``location``."""
    where, env = location
    cfg = task_config(where, BACKSTOP_NAMESPACE=namespace, BACKSTOP_TOPOLOGY_UID=uid)
    return Store(cfg, open_blobs(where, env))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("team-a", "uid-1"), ("team-b", "uid-2")),  # one name in two namespaces
        (("team-a", "uid-1"), ("team-a", "uid-2")),  # deleted and created again
    ],
)
def test_topologies_of_one_name_share_no_state(
    data_location: tuple[str, dict[str, str]], first: tuple[str, str], second: tuple[str, str]
) -> None:
    """On one directory or one bucket (and prefix)."""
    store = data_location
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
    assert a.key != b.key and a.cfg.metrics_key != b.cfg.metrics_key
    assert a.cfg.peers_key != b.cfg.peers_key


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ("gs://bucket/x", "BACKSTOP_STORE='gs://bucket/x': use s3://bucket/prefix or a directory"),
        ("s3://", "BACKSTOP_STORE='s3://' has no bucket"),
    ],
)
def test_a_store_location_of_another_form_is_refused_naming_the_variable(
    tmp_path: Path, store: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        task_config(store)


def test_an_s3_location_keeps_the_same_keys_as_a_directory(tmp_path: Path) -> None:
    s3 = from_env(
        {
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": "sink-0",
            "BACKSTOP_OPERATOR": "sink",
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_STORE": "s3://state/prod",
        }
    )
    local = task_config(tmp_path)
    assert (s3.store, local.store) == ("s3://state/prod", str(tmp_path))
    assert s3.task_key == local.task_key == "default/wc/local/tasks/sink-0"


class MemoryBlobs(Blobs):
    """A store in memory that is not a directory (as an object store is), counting reads."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets = 0

    def get(self, key: str) -> bytes | None:
        self.gets += 1
        return self.objects.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def create(self, key: str, data: bytes) -> bool:
        return self.objects.setdefault(key, data) is data

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def test_an_object_store_reuses_a_peer_address_briefly_and_a_directory_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr("backstop_runtime.store.time.monotonic", lambda: clock[0])
    remote = MemoryBlobs()
    a = Store(task_config(tmp_path, "a-0"), remote)
    b = Store(task_config(tmp_path, "b-0"), remote)
    b.claim_epoch()
    b.publish_address("10.0.0.1", 1)
    assert a.peer("b-0") == {"host": "10.0.0.1", "port": 1, "epoch": 1}
    b.publish_address("10.0.0.2", 2)
    reads = remote.gets
    assert a.peer("b-0") == {"host": "10.0.0.1", "port": 1, "epoch": 1}
    assert remote.gets == reads, "read again within the reuse time"
    clock[0] += store_mod.PEER_TTL
    assert a.peer("b-0") == {"host": "10.0.0.2", "port": 2, "epoch": 1}
    local_a, local_b = Store(task_config(tmp_path, "a-0")), Store(task_config(tmp_path, "b-0"))
    local_b.claim_epoch()
    local_b.publish_address("10.0.0.1", 1)
    assert local_a.peer("b-0") == {"host": "10.0.0.1", "port": 1, "epoch": 1}
    local_b.publish_address("10.0.0.2", 2)
    assert local_a.peer("b-0") == {"host": "10.0.0.2", "port": 2, "epoch": 1}
