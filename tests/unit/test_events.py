"""Only deliberate Events, each posted once per window per object.

Why: Kopf would otherwise post every log line of a handler or daemon as an Event (the
supervisor's loop: about one a second), and ``post_event`` would post every call.
"""

from __future__ import annotations

import typing
from typing import Any

import kopf
import pytest

from backstop.controller import context, kopf_config
from backstop.domain.events import EventFilter


def test_fault10_log_lines_do_not_become_events() -> None:
    settings = kopf.OperatorSettings()
    settings.posting.loggers = True  # switched on: the operator must switch it off
    kopf_config.apply_kopf_settings(settings)
    assert settings.posting.loggers is False
    assert settings.posting.enabled is True  # post_event's kopf.info/kopf.warn still post


def test_fault10_a_repeated_event_is_posted_once_and_counted(monkeypatch: Any) -> None:
    posted: list[tuple[str, str]] = []

    def record(_body: Any, *, reason: str, message: str) -> None:
        posted.append((reason, message))

    monkeypatch.setattr(kopf, "warn", record)
    monkeypatch.setattr(kopf, "info", record)
    body: Any = {"metadata": {"uid": "u-events-1", "name": "t", "namespace": "ns"}}
    other: Any = {"metadata": {"uid": "u-events-2", "name": "t", "namespace": "ns"}}
    for _ in range(5):  # five supervisor ticks hitting the same problem
        context.post_event(body, "NodeLost", "node n1 lost: 3 tasks failed", warning=True)
    context.post_event(body, "NodeLost", "node n2 lost: 1 tasks failed", warning=True)
    context.post_event(other, "NodeLost", "node n1 lost: 3 tasks failed", warning=True)
    assert posted == [
        ("NodeLost", "node n1 lost: 3 tasks failed"),
        ("NodeLost", "node n2 lost: 1 tasks failed"),
        ("NodeLost", "node n1 lost: 3 tasks failed"),  # another object: its own Event
    ]


@pytest.mark.parametrize("held", [0, 3])
def test_fault10_after_the_window_the_event_comes_again_with_the_count(held: int) -> None:
    f = EventFilter(window=10)
    key = ("u", "InvalidSpec", "spec.image: required")
    assert f.admit(key, now=100) == "spec.image: required"
    for i in range(held):
        assert f.admit(key, now=101 + i) is None
    again = f.admit(key, now=110)
    if held:
        assert again == f"spec.image: required ({held} more times in 10s)"
    else:
        assert again == "spec.image: required"


def test_an_unknown_reason_is_posted_not_raised(monkeypatch: Any, caplog: Any) -> None:
    """ops-polish item 4: a reason missing from the set (Suspending, Suspended, Resumed,
    RolloutStep and RolloutComplete were, between d405fba and aa96b85) raised ValueError in
    the supervise daemon, which Kopf retried only after 60 s. Now mypy refuses it at the call
    site, and at run time it is logged and posted, never raised."""
    posted: list[tuple[str, str]] = []

    def record(_body: Any, *, reason: str, message: str) -> None:
        posted.append((reason, message))

    monkeypatch.setattr(kopf, "info", record)
    body: Any = {"metadata": {"uid": "u-events-3", "name": "t", "namespace": "ns"}}
    reason: Any = "NotAReason"  # what mypy refuses at a typed call site
    context.post_event(body, reason, "something happened")
    assert posted == [("NotAReason", "something happened")]
    assert "NotAReason" in caplog.text


def test_every_event_path_takes_the_reason_type() -> None:
    """The reason is ``EventReason`` (a Literal) wherever an Event is asked for, so that
    ``make typecheck`` catches a reason outside the set before it runs."""
    from backstop.controller import tick
    from backstop.domain import recovery
    from backstop.domain.constants import EVENT_REASONS, EventReason

    hints = {
        "post_event": typing.get_type_hints(context.post_event)["reason"],
        "Notice": typing.get_type_hints(recovery.Notice)["reason"],
        "Tick.emit": typing.get_args(typing.get_type_hints(tick.Tick)["emit"])[0][0],
    }
    assert hints == dict.fromkeys(hints, EventReason)
    assert set(typing.get_args(EventReason)) == EVENT_REASONS
    assert {"Suspending", "RolloutStep", "TaskLost", "Recovered"} <= EVENT_REASONS
