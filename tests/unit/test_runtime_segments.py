"""JSONL sources on immutable segments (``s3://`` objects, or whole files written by the
input command into a folder): every line read exactly once by one of the source tasks,
whatever segments appear, and restarts resume from a snapshot. Each case runs on a
directory and on S3 (SeaweedFS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime.api import Context
from backstop_runtime.blobs import Blobs, open_blobs
from backstop_runtime.input import SegmentExists, put_segment, segment_name
from backstop_runtime.segments import BlobSegments
from backstop_runtime.sources import JsonlSource

Where = tuple[str, dict[str, str]]


@pytest.fixture
def where(data_location: Where, monkeypatch: pytest.MonkeyPatch) -> Where:
    for name, value in data_location[1].items():
        monkeypatch.setenv(name, value)  # sources open their location from the environment
    return data_location


def lines(name: str, ids: range, t0: float = 0.0) -> bytes:
    return "".join(json.dumps({"id": f"{name}:{i}", "ts": t0 + i}) + "\n" for i in ids).encode()


class Tasks:
    """``n`` source tasks of one operator reading ``location``, and what they read."""

    def __init__(self, location: str, n: int) -> None:
        self.location, self.n = location, n
        self.dead: list[tuple[str, Any]] = []
        self.tasks = [self.new(i) for i in range(n)]
        self.read: Counter[str] = Counter()

    def new(self, i: int) -> JsonlSource:
        src = JsonlSource({"path": self.location, "listIntervalSeconds": 0})
        src.open(Context(f"source-{i}", i, self.n, lambda r: None, self._dead))
        return src

    def _dead(self, why: str, payload: Any) -> None:
        self.dead.append((why, payload))

    def drain(self, batch: int = 7) -> None:
        while got := [r for src in self.tasks for r in src.read(batch)]:
            self.read.update(str(r.value["id"]) for r in got)


def written(blobs: Blobs) -> Counter[str]:
    """Every id in the location's segments (read here, not by the source)."""
    return Counter(
        json.loads(x)["id"] for k in blobs.list() for x in (blobs.get(k) or b"").splitlines()
    )


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_segment_sorting_between_two_others_is_read_once(where: Where, n: int) -> None:
    blobs = open_blobs(where[0])
    put_segment(blobs, segment_name(10), lines("a", range(20)))
    put_segment(blobs, segment_name(30), lines("b", range(20)))
    tasks = Tasks(where[0], n)
    tasks.drain()
    put_segment(blobs, segment_name(20), lines("c", range(20)))
    put_segment(blobs, segment_name(40), lines("d", range(5)))
    tasks.drain()
    assert tasks.read == written(blobs) and set(tasks.read.values()) == {1}
    assert sum(tasks.read.values()) == 65 and tasks.dead == []


def test_a_restart_resumes_inside_a_segment_from_the_snapshot(where: Where) -> None:
    blobs = open_blobs(where[0])
    for k in range(3):
        put_segment(blobs, segment_name(k), lines(str(k), range(30)))
    tasks = Tasks(where[0], 2)
    for src in tasks.tasks:
        tasks.read.update(str(r.value["id"]) for r in src.read(10))
    snaps = [json.loads(json.dumps(src.snapshot())) for src in tasks.tasks]  # as logged
    assert any(0 < o < 30 * 20 for s in snaps for o in s["offsets"].values())
    put_segment(blobs, segment_name(3), lines("3", range(30)))  # while the tasks are down
    tasks.tasks = [tasks.new(i) for i in range(2)]
    for src, snap in zip(tasks.tasks, snaps, strict=True):
        src.restore(snap)
    tasks.drain()
    assert tasks.read == written(blobs) and set(tasks.read.values()) == {1}


def test_an_unterminated_last_line_of_a_segment_is_complete(where: Where) -> None:
    blobs = open_blobs(where[0])
    put_segment(blobs, segment_name(1), lines("a", range(3)) + b'{"id": "a:3", "ts": 3}')
    tasks = Tasks(where[0], 1)
    tasks.drain()
    if where[0].startswith("s3://"):  # an object never grows
        assert tasks.read == Counter({f"a:{i}": 1 for i in range(4)})
    else:  # a file may: its writer may still be writing the line
        assert tasks.read == Counter({f"a:{i}": 1 for i in range(3)})


def test_read_out_objects_do_not_hold_the_watermark_back(
    object_store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in object_store_env.items():
        monkeypatch.setenv(name, value)
    location = f"s3://{object_store_env['BACKSTOP_S3_BUCKET']}/wm-{uuid.uuid4().hex[:8]}"
    blobs = open_blobs(location)
    put_segment(blobs, segment_name(0), lines("a", range(10)))  # ts 0..9
    put_segment(blobs, segment_name(1), lines("b", range(10), t0=10.0))  # ts 10..19
    put_segment(blobs, segment_name(2), lines("c", range(10), t0=20.0))  # ts 20..29
    tasks = Tasks(location, 1)
    src = tasks.tasks[0]
    src.read(15)  # five of each: none read out yet
    assert src.watermark() == 4.0
    tasks.drain()
    assert src.watermark() == 29.0
    put_segment(blobs, segment_name(3), lines("d", range(10), t0=30.0))
    src.read(1)  # lists the new segment and reads its first line
    assert src.watermark() == 29.0  # the read-out ones hold at 29 until it passes them
    tasks.drain()
    assert src.watermark() == 39.0


def test_a_bucket_is_listed_at_most_once_per_interval(object_store_env: dict[str, str]) -> None:
    env = object_store_env
    blobs = open_blobs(f"s3://{env['BACKSTOP_S3_BUCKET']}/ls-{uuid.uuid4().hex[:8]}", env)
    put_segment(blobs, segment_name(0), b"{}\n")
    slow, fast = BlobSegments(blobs, list_seconds=3600.0), BlobSegments(blobs)
    assert slow.names() == fast.names() == {segment_name(0)}
    put_segment(blobs, segment_name(1), b"{}\n")
    assert slow.names() == {segment_name(0)}  # listed less than an hour ago
    assert fast.names() == {segment_name(0), segment_name(1)}


def test_a_segment_never_changes(where: Where) -> None:
    blobs = open_blobs(where[0])
    assert put_segment(blobs, "in.jsonl", b"1\n") is True
    assert put_segment(blobs, "in.jsonl", b"1\n") is False  # a retried upload
    with pytest.raises(SegmentExists):
        put_segment(blobs, "in.jsonl", b"2\n")
    assert blobs.get("in.jsonl") == b"1\n"


def test_the_input_command_and_the_tweet_generator_write_segments(
    tmp_path: Path, where: Where
) -> None:
    location, env = where
    full = {**os.environ, **env}
    (tmp_path / "a.jsonl").write_bytes(lines("a", range(3)))
    put = [sys.executable, "-m", "backstop_runtime.input", "put", location]
    done = subprocess.run(
        [*put, str(tmp_path / "a.jsonl"), "--prefix", "up/"],
        env=full,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["up/a.jsonl"]
    (tmp_path / "a.jsonl").write_bytes(b"changed\n")
    again = subprocess.run(
        [*put, str(tmp_path / "a.jsonl"), "--prefix", "up/"],
        env=full,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "other content" in again.stderr
    gen = [sys.executable, "-m", "backstop_runtime.examples.tweets", f"{location}/tw"]
    args = ["--rate", "20", "--seconds", "3", "--partitions", "2", "--segments"]
    subprocess.run([*gen, *args], env=full, check=True)
    blobs = open_blobs(location)
    names = blobs.list("tw/")
    assert names == [f"tw/{segment_name(s, k)}" for s in range(3) for k in range(2)]
    tasks = Tasks(f"{location}/tw", 2)
    tasks.drain()
    assert tasks.read == Counter({f"t{i}": 1 for i in range(60)})
