"""Names the cluster checks: topology names, registered algorithm names, field paths.

Helpers of :mod:`backstop.domain.spec` that need no model: what a topology's name must be
(it is the label value of every object the topology owns), a validator and CRD ``enum`` for
a field restricted to a planner registry, and the dotted path of a pydantic error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from pydantic import Field, ValidationError

from backstop.domain.constants import DNS_LABEL, TOPOLOGY_NAME_MAX
from planners import InvalidTopology


def one_of(kind: str, names: Collection[str]) -> Callable[[str], str]:
    """A validator that accepts only a registered algorithm name (the message lists them)."""

    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(names)}")
        return value

    return check


def registered(default: str, names: Collection[str], description: str) -> Any:
    """A string field restricted to a planner registry's names: an ``enum`` in the CRD."""
    return Field(
        default,
        description=description,
        json_schema_extra={"enum": list(names)},
    )


def check_topology_name(name: str) -> None:
    """Refuse a topology name its objects cannot carry (the CRD refuses it too).

    The name is the value of the ``topology`` label of every pod, ConfigMap and
    RecoveryPlan, so it is a DNS-1123 label of at most 63 characters. An object
    created before the CRD said so gets an ``InvalidSpec`` condition naming the field
    instead of a pod create that fails forever.

    Examples
    --------
    >>> check_topology_name("senti")
    >>> check_topology_name("x" * 64)
    Traceback (most recent call last):
    ...
    planners.errors.InvalidTopology: metadata.name: at most 63 characters (a label value), got 64
    """
    if len(name) > TOPOLOGY_NAME_MAX:
        raise InvalidTopology(
            f"metadata.name: at most {TOPOLOGY_NAME_MAX} characters (a label value), "
            f"got {len(name)}"
        )
    if not re.match(DNS_LABEL, name):
        raise InvalidTopology(f"metadata.name: {name!r} is not a DNS-1123 label")


def field_path(loc: tuple[int | str, ...], prefix: str) -> str:
    """``spec.operators[1].name`` from a pydantic error location."""
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<root>"


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line per problem, each naming the field path: ``spec.operators[1].name: ...``."""
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{field_path(e['loc'], prefix)}: {msg}")
    return "\n".join(lines)
