"""The groupings as the task runtime routes them: ``key`` by the hash of the record key,
``rebalance`` evenly and not by key, the same on a replay as live.

The unit tests route records through :class:`~backstop_runtime.engine.Partitioner` and the
engine's two processors; the last test runs the word count as OS processes with its
tokenizer fed by ``rebalance`` and SIGKILLs tasks mid-stream: the counts must be those
computed here from the input (exactly-once across the replays).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backstop_runtime.api import Context, Operator, Record
from backstop_runtime.config import TaskConfig, from_env
from backstop_runtime.engine import (
    Batch,
    BatchLog,
    Counters,
    Partitioner,
    Processor,
    SourceProcessor,
)
from backstop_runtime.sources import JsonlSource
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology


def config(task: str, index: int, grouping: str, parallelism: int = 3, **extra: str) -> TaskConfig:
    down = [{"operator": "next", "parallelism": parallelism, "grouping": grouping}]
    return from_env({
        "BACKSTOP_TOPOLOGY": "t", "BACKSTOP_TASK_ID": task,
        "BACKSTOP_OPERATOR": task.rsplit("-", 1)[0], "BACKSTOP_TASK_INDEX": str(index),
        "BACKSTOP_STORE": "/nowhere", "BACKSTOP_DOWNSTREAM": json.dumps(down), **extra,
    })  # fmt: skip


def routed(part: Partitioner, r: int, recs: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {t: [] for t in part.consumers}
    part.begin(r)
    for rec in recs:
        part.route(rec, out)
    return out


def test_rebalance_spreads_one_key_evenly_where_key_sends_it_to_one_task() -> None:
    recs = [Record(i, "the") for i in range(10)]  # one key: a hash sends all to one task
    by_key = routed(Partitioner(config("p-0", 0, "key")), 1, recs)
    assert sorted(len(v) for v in by_key.values()) == [0, 0, 10]
    for grouping in ("shuffle", "fields"):  # the key hash's other names route alike
        assert routed(Partitioner(config("p-0", 0, grouping)), 1, recs) == by_key
    spread = routed(Partitioner(config("p-0", 0, "rebalance")), 1, recs)
    assert sorted(len(v) for v in spread.values()) == [3, 3, 4]  # each within one of 10/3
    assert sorted(r.value for v in spread.values() for r in v) == list(range(10))


def test_rebalance_evens_out_rounds_of_one_record_and_producers_of_one_round() -> None:
    part = Partitioner(config("p-1", 1, "rebalance"))
    per_task: Counter[str] = Counter()
    for r in range(1, 31):  # thirty rounds of one record each
        out = routed(part, r, [Record(r, "k")])
        per_task.update({t: len(v) for t, v in out.items()})
    assert per_task == {"next-0": 10, "next-1": 10, "next-2": 10}
    firsts = set()  # three producers, one record each in the same round: three tasks
    for i in range(3):
        out = routed(Partitioner(config(f"p-{i}", i, "rebalance")), 5, [Record(0, "k")])
        firsts |= {t for t, v in out.items() if v}
    assert firsts == {"next-0", "next-1", "next-2"}


def test_rebalance_routes_a_round_the_same_whatever_came_before() -> None:
    recs = [Record(i, str(i)) for i in range(7)]
    fresh = routed(Partitioner(config("p-0", 0, "rebalance")), 4, recs)
    busy = Partitioner(config("p-0", 0, "rebalance"))
    for r in (1, 2, 3):  # a live task routed earlier rounds; a replay starts at round 4
        routed(busy, r, [Record(r, "x")] * (r * 5))
    assert routed(busy, 4, recs) == fresh


class Words(Operator):
    """Emits every word of its input's text, and one more record on each watermark."""

    def __init__(self, config: dict[str, Any]) -> None:
        pass

    def process(self, record: Record, ctx: Context) -> None:
        for word in str(record.value).split():
            ctx.emit(word, key=word)

    def on_watermark(self, wm: float, ctx: Context) -> None:
        ctx.emit(f"wm-{wm}", key="wm")


def step(proc: Processor, r: int) -> dict[str, Batch]:
    text = " ".join(f"w{r}-{i}" for i in range(r + 3))
    return proc.step(r, [Batch(r, [Record(text, "line", float(r))], wm=float(r))])


def processor(only: str | None = None) -> Processor:
    cfg = config("tok-1", 1, "rebalance", parallelism=4)
    return Processor(cfg, Words({}), Counters(), lambda why, x: None, only=only)


def test_a_replayed_channel_of_a_processor_is_the_live_one() -> None:
    live = processor()
    rounds = {r: step(live, r) for r in range(1, 9)}
    assert {len(b.recs) for b in rounds[8].values()} == {3}  # 11 + 1 records over 4 tasks
    for consumer in live.part.consumers:  # regenerating one consumer's channel only
        alone = processor(only=consumer)
        for r in range(1, 9):
            assert step(alone, r) == {consumer: rounds[r][consumer]}


def test_a_source_replay_routes_rebalance_as_live(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    inp.mkdir()
    with (inp / "part-00.jsonl").open("w") as f:
        for i in range(60):
            f.write(json.dumps({"id": str(i % 2), "ts": i * 0.1, "text": f"w{i}"}) + "\n")
    cfg = config(
        "source-0", 0, "rebalance",
        BACKSTOP_CONFIG=json.dumps({"function": "x:y", "path": str(inp), "bounded": True}),
    )  # fmt: skip
    src = JsonlSource(cfg.config)
    src.open(Context("source-0", 0, 1, lambda r: None, lambda why, x: None))
    log = BatchLog(None)
    log.append(0, src.snapshot(), float("-inf"), False)
    proc = SourceProcessor(cfg, src, log, Counters())
    live = [proc.step_live(r, 7, behind_since=0.0) for r in range(1, 9)]
    assert all(max(n) - min(n) <= 1 for n in ([len(b.recs) for b in o.values()] for o in live))
    replayed = [proc.step_replay(r) for r in range(1, 9)]
    unmarked = [{t: Batch(b.r, b.cols, b.wm, b.eos, b.at) for t, b in o.items()} for o in replayed]
    assert unmarked == live


@pytest.mark.timeout(180)
def test_wordcount_fed_by_rebalance_counts_every_word_once_across_kills(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_input(inp, files=2, per_file=1500, seed=5)
    spec = wordcount_spec(inp, tmp_path / "out", rate=1500.0, batch=40)
    doc = spec.model_dump(by_alias=True, exclude_none=True)
    tokenize = next(op for op in doc["operators"] if op["name"] == "tokenize")
    tokenize["inputs"] = [{"operator": "source", "grouping": "rebalance"}]
    topo = LocalTopology("wordcount", type(spec).model_validate(doc), tmp_path / "store")
    topo.start_all()
    try:
        topo.wait("the stream to be under way", lambda: bool(output_lines(tmp_path / "out")))
        assert not topo.status("sink-0").get("eos"), "the kill came too late"
        for t in ("source-1", "tokenize-0", "count-1"):
            topo.kill(t)
        for t in ("source-1", "tokenize-0", "count-1"):
            topo.start(t)
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
        assert topo.crashed() == {}
    finally:
        topo.stop_all()
    lines = output_lines(tmp_path / "out")
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(inp))
