"""A blocked drain is told once, again when it changes, and every few minutes.

:func:`backstop.controller.drain.blocked` posts the ``DrainBlocked`` Warning Event a
supervision tick asks for; ticks come every second, so it keeps what it last said in the
topology's memo. (The cluster test ``test_a_drain_that_cannot_keep_the_bound_says_so``
drives the real path.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from backstop.controller.drain import BLOCKED_EVERY, blocked
from backstop.controller.memo import TopologyMemo
from backstop.k8s.manifests import Owner


def _tick() -> tuple[Any, list[tuple[str, str, bool]]]:
    told: list[tuple[str, str, bool]] = []
    t = SimpleNamespace(
        memory=TopologyMemo(),
        owner=Owner("wc", "prod", "u1"),
        emit=lambda reason, msg, warning: told.append((reason, msg, warning)),
    )
    return t, told


def test_told_once_then_on_change_then_after_a_while() -> None:
    t, told = _tick()
    blocked(t, {"n1"}, ["b-0", "a-0"], now=100.0)
    blocked(t, {"n1"}, ["a-0", "b-0"], now=101.0)  # the same: not again
    assert len(told) == 1
    reason, msg, warning = told[0]
    assert (reason, warning) == ("DrainBlocked", True)
    assert msg.startswith("cordoned n1: 2 tasks (a-0, b-0) cannot move off")
    assert "PodDisruptionBudget wc" in msg and "delete that budget" in msg
    blocked(t, {"n1"}, ["a-0"], now=102.0)  # one moved after all: what is left changed
    assert len(told) == 2 and "1 tasks (a-0)" in told[1][1]
    blocked(t, {"n1"}, ["a-0"], now=102.0 + BLOCKED_EVERY)
    assert len(told) == 3


def test_many_tasks_are_named_up_to_eight() -> None:
    t, told = _tick()
    blocked(t, {"n1", "n2"}, [f"t-{i}" for i in range(12)], now=0.0)
    msg = told[0][1]
    assert msg.startswith("cordoned n1, n2: 12 tasks (t-0, t-1, t-10, t-11, t-2, t-3, t-4, t-5, …)")
