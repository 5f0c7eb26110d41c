"""The wordcount example as OS processes with balanced splits (``config.splits: ranges``):
three files on two source tasks, each task reading about half the bytes, and the exact
counts with and without a source task SIGKILLed in the middle of its range.

Counts are computed here from the input (``runtime_data.expected_counts``); the bytes each
task read come from the offsets its batch log recorded last.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inp = tmp_path_factory.mktemp("input")
    write_input(inp, files=3, per_file=2000)
    return inp


def run(base: Path, inp: Path, kill: str | None) -> tuple[list[str], list[dict[str, int]]]:
    """Run to the end of the input, SIGKILLing and restarting ``kill`` once the stream is
    under way; the output lines, and each source task's last logged offsets."""
    spec = wordcount_spec(inp, base / "out", rate=1500.0, batch=40, splits="ranges")
    topo = LocalTopology("wordcount", spec, base / "store")
    topo.start_all()
    try:
        if kill is not None:

            def under_way() -> bool:
                offsets = last_state(topo, kill).get("offsets", {})
                return topo.status("sink-0").get("round", 0) >= 25 and bool(offsets)

            topo.wait("the stream to be under way", under_way)
            assert not topo.status(kill).get("eos"), "the kill came after the task's range"
            topo.kill(kill)
            topo.start(kill)
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
        assert topo.crashed() == {}
        offsets = [last_state(topo, f"source-{i}")["offsets"] for i in range(2)]
    finally:
        topo.stop_all()
    return output_lines(base / "out"), offsets


def last_state(topo: LocalTopology, task: str) -> dict[str, dict[str, int]]:
    """The source state in the newest entry of ``task``'s batch log."""
    entries = topo.objects(f"tasks/{task}/batches/")
    return dict(json.loads(entries[-1])["state"]) if entries else {}


def bytes_read(offsets: list[dict[str, int]], inp: Path) -> list[int]:
    """Per task, the bytes it read: the tasks read each file in contiguous, task-ordered
    pieces, so a task's piece of a file starts where the task before it stopped."""
    read = [0] * len(offsets)
    for p in sorted(inp.glob("*.jsonl")):
        at = 0
        for i, offs in enumerate(offsets):
            if p.name in offs:
                read[i] += offs[p.name] - at
                at = offs[p.name]
        assert at == p.stat().st_size, f"{p.name} was not read to its end"
    return read


@pytest.fixture(scope="module")
def reference(data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    lines, offsets = run(tmp_path_factory.mktemp("reference"), data, None)
    total = sum(p.stat().st_size for p in data.glob("*.jsonl"))
    longest = max(len(x) + 1 for p in data.glob("*.jsonl") for x in p.read_text().splitlines())
    read = bytes_read(offsets, data)
    assert sum(read) == total
    for r in read:
        assert abs(r - total / 2) <= longest + 1, (read, total)
    return lines


def test_two_sources_read_half_the_bytes_each_and_count_exactly(
    reference: list[str], data: Path
) -> None:
    assert len(reference) == len(set(reference))
    assert counts_of(reference) == dict(expected_counts(data))


@pytest.mark.parametrize("task", ["source-0", "source-1"])
def test_a_source_killed_mid_range_changes_nothing(
    task: str, reference: list[str], data: Path, tmp_path: Path
) -> None:
    lines, _ = run(tmp_path, data, task)
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert lines == reference
    assert counts_of(lines) == dict(expected_counts(data))
