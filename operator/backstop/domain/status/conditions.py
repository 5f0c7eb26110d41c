"""Pure helpers for what the operator writes into a status: condition objects, their
merge (keeping ``lastTransitionTime``), RFC 3339 stamps, and the JSON merge patch
between two status documents.

They sit in the domain layer because the condition derivation (:mod:`backstop.domain.status.derive`)
and the recovery decisions need them, and nothing here talks to the API server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def now_rfc3339(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_condition(
    ctype: str, ok: bool | None, reason: str, message: str, generation: int
) -> dict[str, Any]:
    """A ``metav1.Condition`` (without its transition time, set by :func:`merge_conditions`)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def merge_conditions(
    current: Sequence[Mapping[str, Any]] | None,
    updates: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Apply condition updates, keeping ``lastTransitionTime`` when the status is unchanged."""
    stamp = now_rfc3339(now)
    by_type = {c["type"]: dict(c) for c in current or []}
    for u in updates:
        old = by_type.get(u["type"])
        new = dict(u)
        if old is not None and old.get("status") == new["status"]:
            new["lastTransitionTime"] = old.get("lastTransitionTime", stamp)
        else:
            new["lastTransitionTime"] = stamp
        by_type[u["type"]] = new
    order = ["Planned", "Placed", "BoundSatisfied", "Recovering", "Ready"]
    return sorted(
        by_type.values(),
        key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"]),
    )


def conditions_changed(
    current: Sequence[Mapping[str, Any]] | None, merged: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether merging changed anything but timestamps."""

    def key(cs: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted(
            (
                c.get("type"),
                c.get("status"),
                c.get("reason"),
                c.get("message"),
                c.get("observedGeneration"),
            )
            for c in cs or []
        )

    return key(current) != key(merged)


def merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) turning ``old`` into ``new``.

    Merge patches merge maps key by key, so keys that disappear must be sent as
    ``null`` (e.g. tasks removed from ``status.plan.assignment``).

    Examples
    --------
    >>> merge_patch({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"x": 1}})
    {'b': None, 'a': {'y': None}}
    """
    old = old or {}
    out: dict[str, Any] = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                out[key] = sub
        elif before != value or key not in old:
            out[key] = value
    return out
