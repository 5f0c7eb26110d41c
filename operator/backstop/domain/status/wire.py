"""The status as the API stores it: per-task lists and maps compact once they are large.

A 10,000-task topology's status mid-recovery that lists every task by name, in
``plan.assignment``, the failed sets and the last step, takes 1.3-2.0 MB, and etcd
refuses a write over 1.5 MiB, so the status write would fail exactly during a correlated
failure. The API server also records every key of a map in the object's
``managedFields``, which doubles what a ``{task: node}`` map costs. Written compact
(:mod:`backstop.domain.tasksets`: runs of indices per operator), the same status is a
few tens of kB (``docs/scale.md``).

Small collections stay plain (at most :data:`COMPACT_ABOVE` entries), so a topology of
a few dozen tasks reads plainly in ``kubectl get st -o yaml``. The typed status
(:mod:`backstop.domain.status.types`) never sees the compact form: :func:`plain_status`
decodes a raw status before it is parsed, :func:`compact_status` encodes the dump that is
written (through the one merge path, ``status_patch``). Code that reads the raw status
from the API (a Kopf handler's ``status``) goes through :func:`plain_status` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from backstop.domain.tasksets import (
    decode_task_map,
    decode_tasks,
    encode_task_map,
    encode_tasks,
    is_task_map,
)

_STALE = object()  # equal to no JSON value
COMPACT_ABOVE = 256
"""Collections with more entries than this are written compact."""

TASK_LISTS: tuple[tuple[str, ...], ...] = (
    ("plan", "backups"),
    ("plan", "replicated"),
    ("recovery", "failed"),
    ("recovery", "sessionFailed"),
    ("recovery", "recovered"),
    ("recovery", "lastStep", "pending"),
    ("restore", "movedTasks"),
    ("suspend", "stopped"),
    ("suspend", "missing"),
    ("rollout", "pending"),
    ("rollout", "batch"),
    ("rollout", "oldBackups"),
)
"""Where the status holds lists of task ids (camelCase, as on the wire)."""
TASK_MAPS: tuple[tuple[str, ...], ...] = (
    ("plan", "assignment"),
    ("plan", "epochs"),
    ("recovery", "lastStep", "recover"),
    ("suspend", "placement"),
    ("rollout", "oldAssignment"),
)
"""Where the status holds ``{task: node}`` (or ``{task: epoch}``) maps."""


def _compact_list(value: Any) -> Any:
    if isinstance(value, list) and len(value) > COMPACT_ABOVE:
        text = encode_tasks(value) if all(isinstance(v, str) for v in value) else None
        return value if text is None else text
    return value


def _compact_map(value: Any) -> Any:
    if isinstance(value, Mapping) and len(value) > COMPACT_ABOVE:
        packed = encode_task_map(value)
        return value if packed is None else packed
    return value


def _plain_list(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return decode_tasks(value)
        except ValueError:
            return value  # not ours: the typed status drops it and names it
    return value


def _plain_map(value: Any) -> Any:
    if is_task_map(value):
        try:
            return decode_task_map(value)
        except ValueError:
            return value
    return value


def _rewrite(doc: Mapping[str, Any], how: Callable[[Any], Any], path: tuple[str, ...]) -> Any:
    """``doc`` with the value at ``path`` replaced by ``how(value)`` (copies only the
    dicts on the way; ``doc`` itself is not changed)."""
    head, rest = path[0], path[1:]
    if head not in doc:
        return doc
    value = doc[head]
    if rest:
        if not isinstance(value, Mapping):
            return doc
        new = _rewrite(value, how, rest)
    else:
        new = how(value)
    if new is value:
        return doc
    return {**doc, head: new}


def _at(doc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = doc
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _keep(value: Any) -> Callable[[Any], Any]:
    return lambda _: value


def compact_status(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The status to write: every large task list and map of ``doc`` (a plain dump) compact.

    Examples
    --------
    >>> doc = {"plan": {"assignment": {f"a-{i}": "n1" for i in range(300)},
    ...                 "backups": ["a-0"]}, "recovery": {"failed": []}}
    >>> wire = compact_status(doc)
    >>> wire["plan"]["assignment"], wire["plan"]["backups"]
    (['a:0-299', ['n1'], '0*300'], ['a-0'])
    >>> plain_status(wire) == doc
    True
    """
    out: Mapping[str, Any] = doc
    for path in TASK_LISTS:
        out = _rewrite(out, _compact_list, path)
    for path in TASK_MAPS:
        out = _rewrite(out, _compact_map, path)
    return dict(out)


def patch_base(
    old: Mapping[str, Any], new_wire: Mapping[str, Any], compact: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a merge patch to ``new_wire`` is computed from, given the old status ``old``
    (a plain dump): its compact form (``compact``, when the caller kept it), except where
    a compact map becomes plain again.

    A compact map is an array, which a merge patch replaces whole, but a plain map is
    merged key by key, and the API may hold either form (an operator of another version
    may have written large maps plain). So when a compact map becomes plain, the patch
    must set every new key and null every old one, which is right for both stored forms
    (a merge patch applied to an array starts from an empty object): the base holds the
    old keys with a value no new one equals.

    >>> old = {"plan": {"assignment": {f"a-{i}": "n" for i in range(300)}}}
    >>> base = patch_base(old, {"plan": {"assignment": {"a-0": "n"}}})
    >>> len(base["plan"]["assignment"]), base["plan"]["assignment"]["a-0"] == "n"
    (300, False)
    >>> patch_base(old, compact_status(old)) == compact_status(old)
    True
    """
    base: Mapping[str, Any] = compact_status(old) if compact is None else compact
    for path in TASK_MAPS:
        if isinstance(_at(new_wire, path), Mapping) and is_task_map(_at(base, path)):
            stale = dict.fromkeys(_at(old, path) or {}, _STALE)
            base = _rewrite(base, _keep(stale), path)
    return dict(base)


def plain_status(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """A raw status (as the API returns it) with every compact task list and map decoded;
    either form is read, and what does not decode is left for the typed status to drop."""
    out: Mapping[str, Any] = doc or {}
    for path in TASK_LISTS:
        out = _rewrite(out, _plain_list, path)
    for path in TASK_MAPS:
        out = _rewrite(out, _plain_map, path)
    return dict(out)


def compact_value(value: Any) -> Any:
    """One task map or list as :func:`compact_status` would write it (for a patch that
    writes just one field, e.g. the fencing epochs).

    >>> compact_value({"a-0": 1}), compact_value({f"a-{i}": 1 for i in range(257)})
    ({'a-0': 1}, ['a:0-256', [1], '0*257'])
    """
    return _compact_map(value) if isinstance(value, Mapping) else _compact_list(value)
