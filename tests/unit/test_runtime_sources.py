"""Which source task reads which input file: every line once, whatever files come and go.

The source tasks of one operator split the files among themselves without talking to
each other. These tests run several ``JsonlSource`` instances side by side, as the tasks
of one operator would, add and delete files between reads, and check that every line
written is read exactly once over all of them, restarts from snapshots included.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime.api import Context
from backstop_runtime.config import from_env
from backstop_runtime.engine import BatchLog, Counters, SourceProcessor
from backstop_runtime.sources import JsonlSource
from backstop_runtime.store import Store

INF = float("inf")


def write(folder: Path, name: str, ids: range, t0: float = 0.0) -> None:
    """Append lines ``{"id": "<name>:<i>", "ts"}`` to ``folder/name``."""
    with (folder / name).open("a") as f:
        for i in ids:
            f.write(json.dumps({"id": f"{name}:{i}", "ts": t0 + i}) + "\n")


def ids_in(folder: Path) -> Counter[str]:
    """Every id written to the folder's files (read here, not by the source)."""
    return Counter(
        json.loads(line)["id"]
        for p in folder.glob("*.jsonl")
        for line in p.read_text().splitlines()
    )


class Tasks:
    """``n`` source tasks of one operator reading ``folder``, and what they have read."""

    def __init__(self, folder: Path, n: int) -> None:
        self.folder, self.n = folder, n
        self.dead: list[tuple[str, Any]] = []
        self.tasks = [self.new(i) for i in range(n)]
        self.read: Counter[str] = Counter()

    def new(self, i: int) -> JsonlSource:
        src = JsonlSource({"path": str(self.folder)})
        src.open(Context(f"source-{i}", i, self.n, lambda r: None, self._dead))
        return src

    def _dead(self, why: str, payload: Any) -> None:
        self.dead.append((why, payload))

    def drain(self, batch: int = 1000) -> None:
        """Read until no task gets anything more."""
        while True:
            got = [r for src in self.tasks for r in src.read(batch)]
            self.read.update(str(r.value["id"]) for r in got)
            if not got:
                return


@pytest.mark.parametrize("n", [2, 3])
def test_a_new_file_sorting_between_two_others_is_read_once(tmp_path: Path, n: int) -> None:
    write(tmp_path, "part-00.jsonl", range(20))
    write(tmp_path, "part-02.jsonl", range(20))
    tasks = Tasks(tmp_path, n)
    tasks.drain()
    write(tmp_path, "part-01.jsonl", range(20))
    write(tmp_path, "part-00.jsonl", range(20, 30))  # the old files go on growing
    write(tmp_path, "part-02.jsonl", range(20, 30))
    tasks.drain()
    assert tasks.read == ids_in(tmp_path)
    assert set(tasks.read.values()) == {1}


def test_deleting_a_file_moves_no_other_file(tmp_path: Path) -> None:
    for k in range(4):
        write(tmp_path, f"part-{k:02d}.jsonl", range(10))
    tasks = Tasks(tmp_path, 2)
    tasks.drain()
    owned = [set(src.offsets) for src in tasks.tasks]
    expected = ids_in(tmp_path)
    (tmp_path / "part-01.jsonl").unlink()  # fully read: it leaves its owner's state
    for k in (0, 2, 3):
        write(tmp_path, f"part-{k:02d}.jsonl", range(10, 15))
    tasks.drain()
    expected.update(ids_in(tmp_path) - expected)
    assert tasks.read == expected and set(tasks.read.values()) == {1}
    assert [set(src.offsets) for src in tasks.tasks] == [o - {"part-01.jsonl"} for o in owned]
    assert tasks.dead == []


def test_a_deleted_file_stops_holding_back_its_owners_watermark(tmp_path: Path) -> None:
    """Event time of a task is the lowest over its files; a file deleted once fully read
    no longer counts, one deleted before that is still read to its end first."""
    src = Tasks(tmp_path, 1)
    write(tmp_path, "slow.jsonl", range(5))  # ts 0..4
    write(tmp_path, "fast.jsonl", range(100), t0=100.0)  # ts 100..199
    expected = ids_in(tmp_path)
    with (tmp_path / "slow.jsonl").open("a") as f:
        f.write(json.dumps({"id": "slow.jsonl:5", "ts": 5}))  # its writer stopped here
    expected["slow.jsonl:5"] = 1
    only = src.tasks[0]
    first = only.read(4)  # two lines of each: "slow" is half read
    src.read.update(str(r.value["id"]) for r in first)
    assert only.watermark() == 1.0
    (tmp_path / "slow.jsonl").unlink()
    src.drain()
    assert src.read == expected and set(src.read.values()) == {1}
    assert only.watermark() == 199.0
    assert set(only.offsets) == {"fast.jsonl"}


def test_a_restart_from_a_snapshot_resumes_exactly(tmp_path: Path) -> None:
    write(tmp_path, "part-00.jsonl", range(30))
    write(tmp_path, "part-02.jsonl", range(30))
    tasks = Tasks(tmp_path, 2)
    for src in tasks.tasks:
        tasks.read.update(str(r.value["id"]) for r in src.read(7))
    snaps = [json.loads(json.dumps(src.snapshot())) for src in tasks.tasks]  # as logged
    write(tmp_path, "part-01.jsonl", range(30))  # appears while the tasks are down
    tasks.tasks = [tasks.new(i) for i in range(2)]
    for src, snap in zip(tasks.tasks, snaps, strict=True):
        src.restore(snap)
    tasks.drain()
    assert tasks.read == ids_in(tmp_path)
    assert set(tasks.read.values()) == {1}


def test_a_file_deleted_while_its_owner_was_down_is_kept_aside(tmp_path: Path) -> None:
    write(tmp_path, "part-00.jsonl", range(10))
    tasks = Tasks(tmp_path, 1)
    tasks.tasks[0].read(3)
    snap = tasks.tasks[0].snapshot()
    (tmp_path / "part-00.jsonl").unlink()
    tasks.tasks = [tasks.new(0)]
    tasks.tasks[0].restore(snap)
    tasks.drain()
    assert tasks.dead == [
        (
            "file deleted: nothing after this offset can be read",
            {"file": "part-00.jsonl", "offset": snap["offsets"]["part-00.jsonl"]},
        )
    ]
    assert tasks.tasks[0].idle()


def test_assignment_is_balanced_on_average(tmp_path: Path) -> None:
    for k in range(60):
        write(tmp_path, f"seg-{k:04d}.jsonl", range(1))
    tasks = Tasks(tmp_path, 3)
    tasks.drain()
    sizes = [len(src.offsets) for src in tasks.tasks]
    assert sum(sizes) == 60 and min(sizes) >= 10, sizes


def source_task(store: Path, folder: Path, index: int, n: int) -> SourceProcessor:
    env = {
        "BACKSTOP_TOPOLOGY": "t",
        "BACKSTOP_TASK_ID": f"source-{index}",
        "BACKSTOP_OPERATOR": "source",
        "BACKSTOP_TASK_INDEX": str(index),
        "BACKSTOP_PARALLELISM": str(n),
        "BACKSTOP_STORE": str(store),
        "BACKSTOP_CONFIG": json.dumps({"function": "x:y", "path": str(folder)}),
        "BACKSTOP_DOWNSTREAM": json.dumps(
            [{"operator": "tok", "parallelism": n, "grouping": "forward"}]
        ),
    }
    cfg = from_env(env)
    st = Store(cfg)
    src = JsonlSource(cfg.config)
    src.open(Context(cfg.task, index, n, lambda r: None, lambda why, x: None))
    log = BatchLog(st.blobs, st.batches_key())
    log.append(0, src.snapshot(), -INF, False)
    return SourceProcessor(cfg, src, log, Counters(), store=st)


def test_a_source_without_files_follows_the_others_watermark(tmp_path: Path) -> None:
    """Two files, both owned by source task 1 of 2 (see ``owner``): task 0 owns nothing,
    and its watermark must not stay at -inf, or no window downstream would ever close."""
    folder = tmp_path / "in"
    folder.mkdir()
    write(folder, "part-00.jsonl", range(50))
    write(folder, "part-03.jsonl", range(50), t0=10.0)
    empty, busy = (source_task(tmp_path / "store", folder, i, 2) for i in (0, 1))
    busy.step_live(1, 1000, 0.0)
    assert busy.log.entries[1]["wm"] == 49.0  # the slower of its two files
    empty.step_live(1, 1000, 0.0)
    assert empty.source.idle() and empty.log.entries[1]["wm"] == 49.0
    assert empty.log.entries[1]["idle"] is True
    write(folder, "part-00.jsonl", range(50, 70))
    write(folder, "part-03.jsonl", range(50, 70), t0=10.0)
    busy.step_live(2, 1000, 0.0)
    empty.step_live(2, 1000, 0.0)
    assert empty.log.entries[2]["wm"] == busy.log.entries[2]["wm"] == 69.0


def test_an_idle_source_alone_keeps_its_watermark(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    proc = source_task(tmp_path / "store", folder, 0, 1)
    proc.step_live(1, 10, 0.0)
    assert proc.log.entries[1]["wm"] == -INF and proc.log.entries[1]["idle"] is True


def test_restored_offsets_skip_what_was_read(tmp_path: Path) -> None:
    """The snapshot names the files the task owns with their offsets, nothing else."""
    write(tmp_path, "part-00.jsonl", range(4))
    tasks = Tasks(tmp_path, 1)
    tasks.drain()
    snap = tasks.tasks[0].snapshot()
    size = os.path.getsize(tmp_path / "part-00.jsonl")
    assert snap["offsets"] == {"part-00.jsonl": size}


@pytest.mark.parametrize("splits", ["files", "ranges"])
def test_a_file_at_its_end_leaves_its_share_to_the_others(tmp_path: Path, splits: str) -> None:
    """A round is short only when the task has no backlog: a short round paces the source
    (it waits a batch interval), so a file that ends must not halve the rounds of a task
    whose other file has plenty left."""
    write(tmp_path, "a.jsonl", range(10))
    write(tmp_path, "b.jsonl", range(500))
    src = JsonlSource({"path": str(tmp_path), "bounded": True, "splits": splits})
    src.open(Context("source-0", 0, 1, lambda r: None, lambda *_: None))
    sizes = [len(src.read(100)) for _ in range(5)]
    assert sizes == [100, 100, 100, 100, 100]
    assert len(src.read(1000)) == 10  # all that is left
    assert src.at_end()
