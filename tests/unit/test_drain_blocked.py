"""A blocked drain is told once, again when it changes, and every few minutes.

:func:`backstop.controller.drain.blocked` posts the ``DrainBlocked`` Warning Event a
supervision tick asks for; ticks come every second, so it keeps what it last said in the
topology's memo. (The cluster test ``test_a_drain_that_cannot_keep_the_bound_says_so``
drives the real path.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from backstop.controller.drain import BLOCKED_EVERY, blocked, release, unrelease
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


def _released_tick(timeout: float | None) -> tuple[Any, list[Any], list[tuple[str, str, bool]]]:
    """A tick of a 3-task topology, ``b-0`` and ``c-0`` on the cordoned node: the budgets
    it puts, and its Events."""
    from backstop.domain.spec import expand, parse_spec
    from backstop.domain.status import PlanStatus, TopologyStatus

    spec = parse_spec({
        "image": "x", "recoveryLatencyBound": 10,
        "recovery": {} if timeout is None else {"drainTimeoutSeconds": timeout},
        "operators": [{"name": n, "reprocessingLatency": 1} for n in ("a", "b", "c")],
    })  # fmt: skip
    plan = PlanStatus(generation=1, assignment={"a-0": "n0", "b-0": "n1", "c-0": "n1"})
    puts: list[Any] = []
    t, told = _tick()
    t.model, t.graph, t.generation = spec, expand(spec), 1
    t.status = TopologyStatus(plan=plan)
    t.kube = SimpleNamespace(put_pdb=puts.append)
    return t, puts, told


def test_a_drain_blocked_past_its_timeout_lets_the_evictions_through() -> None:
    t, puts, told = _released_tick(timeout=60.0)
    release(t, {"n1"}, ["b-0", "c-0"], now=100.0)
    release(t, {"n1"}, ["b-0", "c-0"], now=159.0)
    assert puts == [] and told == []  # not yet
    release(t, {"n1"}, ["b-0", "c-0"], now=160.0)
    [pdb] = puts
    assert pdb["spec"]["minAvailable"] == 1  # of 3 pods, the 2 on n1 may go
    [(reason, msg, warning)] = told
    assert reason == "DrainReleased" and warning and "blocked for 60s" in msg
    release(t, {"n1"}, ["b-0", "c-0"], now=500.0)  # said and done once
    assert len(puts) == 1 and len(told) == 1
    unrelease(t)  # the drain is over: the whole budget again
    assert puts[-1]["spec"]["minAvailable"] == 3
    unrelease(t)
    assert len(puts) == 2


def test_without_a_timeout_a_blocked_drain_waits() -> None:
    t, puts, told = _released_tick(timeout=None)
    release(t, {"n1"}, ["b-0", "c-0"], now=100.0)
    release(t, {"n1"}, ["b-0", "c-0"], now=100000.0)
    assert puts == [] and told == []
