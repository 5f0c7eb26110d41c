"""When a lost task counts as caught up again (``backstop_testkit.support.catchup``).

The real-node tests assert the recovery bound with it and the benchmarks measure with it,
so what it accepts is pinned here on scripted ``status.json`` sequences: the old copy never
counts, nor the new copy's restored round, nor a round that lags beyond the steady median
plus the slack; the steady lag is the median of what was sampled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from backstop_testkit.support.catchup import (
    CAUGHT_UP_SLACK,
    CatchUp,
    ContainerDeath,
    caught_up,
    steady_lags,
)


class Script:
    """Each task's ``status.json`` as a sequence: every read returns the next one (the
    last one again once the sequence is through)."""

    def __init__(self, **seqs: list[dict[str, Any]]) -> None:
        self.iters: dict[str, Iterator[dict[str, Any]]] = {t: iter(v) for t, v in seqs.items()}
        self.last: dict[str, dict[str, Any]] = {}

    def __call__(self, task: str) -> Mapping[str, Any]:
        self.last[task] = next(self.iters[task], self.last.get(task, {}))
        return self.last[task]


def test_only_a_new_epoch_past_its_restored_round_within_the_steady_lag_counts() -> None:
    first: dict[str, int] = {}
    old = {"epoch": 3, "round": 90, "lag": 0.1}
    assert not caught_up(old, "a", 3, 0.2, first), "the old copy is not back"
    assert first == {}
    restored = {"epoch": 4, "round": 80, "lag": 0.0}  # before its first batch: lag 0
    assert not caught_up(restored, "a", 3, 0.2, first), "its restored round is not a batch"
    assert first == {"a": 80}
    replaying = {"epoch": 4, "round": 85, "lag": 6.0}
    assert not caught_up(replaying, "a", 3, 0.2, first)
    edge = 0.2 + CAUGHT_UP_SLACK
    assert caught_up({"epoch": 4, "round": 86, "lag": edge}, "a", 3, 0.2, first)
    assert not caught_up({"epoch": 4, "round": 86, "lag": edge + 0.01}, "a", 3, 0.2, first)


def test_the_watch_records_when_each_lost_task_was_back_and_names_the_late_ones() -> None:
    status = Script(
        a=[{"epoch": 1, "round": 50, "lag": 0.1}, {"epoch": 2, "round": 40},
           {"epoch": 2, "round": 41, "lag": 3.0}, {"epoch": 2, "round": 45, "lag": 0.3}],
        b=[{"epoch": 5, "round": 50, "lag": 0.1}, {"epoch": 5, "round": 50, "lag": 0.1}],
        c=[{"epoch": 1, "round": 50, "lag": 0.1}, {"epoch": 2, "round": 49, "lag": 0.1}],
    )  # fmt: skip
    catch = CatchUp(status, ["a", "b", "c"], {"a": 0.1, "b": 0.1, "c": 0.1})
    assert catch.epochs == {"a": 1, "b": 5, "c": 1}
    start = time.time()
    assert not catch.watch(start + 0.3, interval=0.01)
    assert set(catch.back) == {"a"}
    assert start <= catch.back["a"] <= time.time()
    assert catch.since(start)["a"] == pytest.approx(catch.back["a"] - start)
    assert catch.late() == (
        "no new copy of ['b'], new copies not caught up: "
        "c (round 49 from 49, lag 0.10 s, steady 0.10 s)"
    )


def test_a_new_copy_that_came_to_the_end_of_its_input_lagging_is_named_so() -> None:
    ended = {"epoch": 2, "round": 60, "lag": 0.92, "eos": True}  # the run's last round
    status = Script(a=[{"epoch": 1, "round": 44, "lag": 0.3}, {"epoch": 2, "round": 40}, ended])
    catch = CatchUp(status, ["a"], {"a": 0.3})
    assert not catch.watch(time.time() + 0.1, interval=0.01)
    assert catch.late() == (
        "no new copy of none, new copies not caught up: a (round 60 from 40, lag 0.92 s, "
        "steady 0.30 s, at the end of its input: its lag stays as it was)"
    )


def test_the_steady_lag_is_the_median_of_the_samples() -> None:
    lags = [0.3, 9.0, 0.1, 0.2, 0.4, 7.0]  # five read, one an outlier: a slow round
    status = Script(a=[{"lag": x} for x in lags], b=[{}])
    got = steady_lags(status, ["a", "b"], seconds=0.05, interval=0.01)
    assert got == {"a": 0.3, "b": 0.0}


def test_no_container_of_an_unknown_node_is_watched_and_no_failure_is_seen() -> None:
    death = ContainerDeath("no-such-node-here")
    assert death.pids == []
    death.start()
    assert death.moment(1.0) is None
