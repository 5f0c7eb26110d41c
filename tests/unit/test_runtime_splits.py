"""Balanced splits: every line read exactly once over the tasks, each task within one
line of its share, and the source reading its split through its segments the same way."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backstop_runtime.api import Context
from backstop_runtime.blobs import open_blobs
from backstop_runtime.config import ConfigError
from backstop_runtime.input import put_segment
from backstop_runtime.sources import JsonlSource
from backstop_runtime.splits import Split, plan, read_split

# A file: lines of random lengths, the last one maybe without its newline.
line_st = st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x"))
file_st = st.tuples(st.lists(line_st, max_size=30), st.booleans()).map(
    lambda t: b"\n".join(t[0]) + (b"\n" if t[0] and t[1] else b"")
)


def lines_of(data: bytes) -> list[bytes]:
    """The file's lines with their newlines, split here independently of the module."""
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    return out + ([parts[-1]] if parts[-1] else [])


@settings(max_examples=300, deadline=None)
@given(st.lists(file_st, min_size=0, max_size=5), st.integers(1, 7))
def test_every_line_is_read_once_and_each_task_gets_its_share(
    files: list[bytes], parallelism: int
) -> None:
    data = {f"f{k}.jsonl": d for k, d in enumerate(files)}
    tasks = plan([(n, len(d)) for n, d in data.items()], parallelism)
    assert len(tasks) == parallelism
    total = sum(map(len, data.values()))
    longest = max((len(x) for d in data.values() for x in lines_of(d)), default=0)
    for name, d in data.items():
        # in name order over tasks, then splits, the lines come back as the file holds them
        got = [x for t in tasks for s in t if s.name == name for x in read_split(d, s)]
        assert got == lines_of(d)
    for t in tasks:
        share = sum(s.end - s.start for s in t)
        assert abs(share - total / parallelism) < 1
        read = sum(len(x) for s in t for x in read_split(data[s.name], s))
        assert abs(read - share) <= longest


def test_the_plan_cuts_the_files_end_to_end_in_name_order() -> None:
    # 30 bytes over 4 tasks: cuts at 0, 7, 15, 22, 30 of "a" (10 bytes) then "b" (20)
    assert plan([("b", 20), ("a", 10)], 4) == [
        [Split("a", 0, 7)],
        [Split("a", 7, 10), Split("b", 0, 5)],
        [Split("b", 5, 12)],
        [Split("b", 12, 20)],
    ]
    assert plan([], 2) == [[], []]
    with pytest.raises(ValueError):
        plan([("a", 1)], 0)


def test_a_split_starting_on_a_line_start_leaves_that_line_to_the_one_before() -> None:
    data = b"aaa\nbbb\nccc\n"
    assert read_split(data, Split("x", 0, 4)) == [b"aaa\n", b"bbb\n"]
    assert read_split(data, Split("x", 4, 12)) == [b"ccc\n"]
    assert read_split(data, Split("x", 5, 6)) == []


def write(folder: Path, name: str, n: int, width: int, even: bool = False) -> None:
    """``n`` lines of varied lengths, or all of one length (``even``: cuts fall on line
    starts)."""
    with (folder / name).open("w") as f:
        for i in range(n):
            pad = "x" * (width - 2 * len(str(i)) if even else i * 7 % width)
            f.write(json.dumps({"id": f"{name}:{i}", "ts": i, "pad": pad}) + "\n")


def sources(folder: Path, n: int) -> list[JsonlSource]:
    out = []
    for i in range(n):
        src = JsonlSource({"path": str(folder), "bounded": True, "splits": "ranges"})
        src.open(Context(f"source-{i}", i, n, lambda r: None, lambda w, p: None))
        out.append(src)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("even", [False, True])
def test_source_tasks_read_every_line_once_in_balanced_shares(
    tmp_path: Path, n: int, even: bool
) -> None:
    for k, lines in enumerate([300, 50, 170] if not even else [100, 100, 100]):
        write(tmp_path, f"part-{k:02d}.jsonl", lines, 60, even)
    tasks = sources(tmp_path, n)
    read: Counter[str] = Counter()
    volume = []
    for src in tasks:
        got = []
        while not src.at_end():
            got += src.read(37)
        read.update(str(r.value["id"]) for r in got)
        volume.append(sum(len(json.dumps(r.value)) + 1 for r in got))
    written = Counter(
        json.loads(x)["id"] for p in tmp_path.glob("*.jsonl") for x in p.read_text().splitlines()
    )
    assert read == written
    total = sum(p.stat().st_size for p in tmp_path.glob("*.jsonl"))
    longest = max(len(x) + 1 for p in tmp_path.glob("*.jsonl") for x in p.read_text().splitlines())
    for v in volume:
        assert abs(v - total / n) <= longest + 1


def test_a_restart_and_a_replay_read_the_same_records(tmp_path: Path) -> None:
    for k in range(3):
        write(tmp_path, f"part-{k:02d}.jsonl", 200, 40)
    first = sources(tmp_path, 2)[1]
    start = first.snapshot()
    a = first.read(50)
    mid = first.snapshot()
    b = first.read(50)
    end = first.snapshot()
    # a restarted task, restored from the middle, reads what the first read after it
    again = sources(tmp_path, 2)[1]
    again.restore(json.loads(json.dumps(mid)))
    assert [r.value for r in again.read(50)] == [r.value for r in b]
    # a replay from the very start (nothing planned yet) up to the middle, then on
    replay = sources(tmp_path, 2)[1]
    replay.restore(json.loads(json.dumps(start)))
    assert [r.value for r in replay.read(2**62, until=mid)] == [r.value for r in a]
    replay.restore(json.loads(json.dumps(mid)))
    assert [r.value for r in replay.read(2**62, until=end)] == [r.value for r in b]


def test_ranges_need_a_bounded_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        JsonlSource({"path": str(tmp_path), "splits": "ranges"})
    with pytest.raises(ConfigError):
        JsonlSource({"path": str(tmp_path), "bounded": True, "splits": "halves"})


def test_ranges_of_objects_in_a_bucket_or_files_in_a_directory_are_read_once(
    data_location: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    location, env = data_location
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # sources open their location from the environment
    blobs = open_blobs(location)
    written: Counter[str] = Counter()
    for k, n in enumerate([120, 30, 90]):
        body = "".join(
            json.dumps({"id": f"{k}:{i}", "ts": i, "p": "x" * (i % 9)}) + "\n" for i in range(n)
        )
        put_segment(blobs, f"part-{k:02d}.jsonl", body.encode())
        written.update(f"{k}:{i}" for i in range(n))
    read: Counter[str] = Counter()
    for i in range(3):
        src = JsonlSource({"path": location, "bounded": True, "splits": "ranges"})
        src.open(Context(f"source-{i}", i, 3, lambda r: None, lambda w, p: None))
        ends = src.snapshot().get("ends", {})  # before any read: nothing planned or held
        assert not ends and not any(src.segs.held(n) for n in src.segs.names())
        while not src.at_end():
            read.update(str(r.value["id"]) for r in src.read(11))
            # a task fetches (holds) only the files of its own splits
            ends = src.snapshot()["ends"]
            assert {n for n in src.segs.names() if src.segs.held(n)} <= set(ends)
        assert ends, "each task has a share of the input"
    assert read == written
