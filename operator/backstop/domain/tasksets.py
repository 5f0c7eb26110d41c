"""Compact, order-preserving text for lists and maps of task ids.

Per-task data grows with the topology. A 10,000-task status that lists every task
by name (``plan.assignment``, the failed sets, the last step) is over a megabyte, and
etcd refuses objects over 1.5 MiB; a 300x300 shuffle's session ConfigMap that lists, for
each recovered task, every upstream task that replays to it is 1.9 MB, and a ConfigMap
holds at most 1 MiB. Task ids are ``<operator>-<index>`` (:func:`backstop.domain.spec.
task_id`), and the tasks a plan groups together are runs of consecutive indices of one
operator, so a list of ids is written as runs per operator: ``map:0-299;reduce:4,7-9``.

The grammar (also in ``docs/scale.md``; the task runtime's decoder,
``backstop_runtime.tasksets``, reads the same):

- a **task list** is ``;``-separated groups ``<operator>:<runs>``; ``<runs>`` is
  ``,``-separated ``<i>`` or ``<i>-<j>`` (``i < j``: the ids ``i, i+1, …, j``). The list
  is the groups' ids in order, so any list (any order, repeats) round-trips exactly;
  the empty list is ``""``. Operator names contain no ``:``, ``;`` or ``,``.
- in the session ConfigMap's replay sources a run may be ``@``: the index of the task
  that replays (``stage2:@`` for ``stage3-7`` is ``stage2-7``), so the tasks of a
  forward chain share one entry.
- a **task map** ``{task: value}`` is the array ``[<task list>, [v0, v1, …], <runs of
  value indices>]``: the keys in order, the distinct values in order of first use, and
  for each key the index of its value, as ``k`` or ``k*n`` (``n`` keys in a row with
  value ``k``). An array, not an object, so a JSON merge patch replaces it whole.

A name that is not ``<operator>-<index>`` (no task id ever is) has no compact form:
:func:`encode_tasks` returns ``None`` and the caller keeps the plain list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import backstop_runtime.tasksets

V = TypeVar("V")

TASK_ID = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)-(0|[1-9][0-9]*)$")
"""A task id: an operator name (the spec's pattern) and an index without leading zeros."""


def split_task(task: str) -> tuple[str, int] | None:
    """``(operator, index)`` of a task id, or ``None`` for another name.

    >>> split_task("stage-2-17"), split_task("a-01"), split_task("log:a-0")
    (('stage-2', 17), None, None)
    """
    m = TASK_ID.match(task)
    return (m.group(1), int(m.group(2))) if m else None


def _runs(indices: Sequence[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(indices):
        j = i
        while j + 1 < len(indices) and indices[j + 1] == indices[j] + 1:
            j += 1
        out.append(str(indices[i]) if i == j else f"{indices[i]}-{indices[j]}")
        i = j + 1
    return ",".join(out)


def encode_tasks(tasks: Iterable[str]) -> str | None:
    """The task-list text of ``tasks`` (in their order), or ``None`` if a name is no task id.

    >>> encode_tasks(["a-0", "a-1", "a-2", "b-5", "a-3", "a-9", "a-8"])
    'a:0-2;b:5;a:3,9,8'
    >>> encode_tasks([]), encode_tasks(["a-0", "node-x"])
    ('', None)
    """
    groups: list[tuple[str, list[int]]] = []
    for task in tasks:
        parts = split_task(task)
        if parts is None:
            return None
        op, index = parts
        if groups and groups[-1][0] == op:
            groups[-1][1].append(index)
        else:
            groups.append((op, [index]))
    return ";".join(f"{op}:{_runs(ix)}" for op, ix in groups)


def decode_tasks(text: str, own: int | None = None) -> list[str]:
    """The task ids of a task-list text, in order (inverse of :func:`encode_tasks`);
    a run ``@`` is the index ``own``.

    Raises
    ------
    ValueError
        On text that is not a task list.

    >>> decode_tasks("a:0-2;b:5;a:3,9,8")
    ['a-0', 'a-1', 'a-2', 'b-5', 'a-3', 'a-9', 'a-8']
    >>> decode_tasks("a:@;b:0", own=7)
    ['a-7', 'b-0']
    """
    return backstop_runtime.tasksets.decode(text, own)  # one decoder for operator and tasks


def relative(text: str, own: int) -> str:
    """``text`` with each group that is exactly the index ``own`` written ``@``.

    >>> relative("a:7;b:0-9;c:7", 7)
    'a:@;b:0-9;c:@'
    """
    mine = str(own)
    return ";".join(
        g.partition(":")[0] + ":@" if g.partition(":")[2] == mine else g
        for g in (text.split(";") if text else [])
    )


def encode_task_map(mapping: Mapping[str, V]) -> list[Any] | None:
    """The compact form of ``{task: value}`` (keys in order), or ``None`` if a key is no
    task id. Values are compared by equality (use hashable ones: names, numbers).

    >>> encode_task_map({"a-0": "n1", "a-1": "n1", "a-2": "n2", "b-0": "n1"})
    ['a:0-2;b:0', ['n1', 'n2'], '0*2,1,0']
    """
    tasks = encode_tasks(mapping)
    if tasks is None:
        return None
    values: list[V] = []
    index: dict[Any, int] = {}
    at: list[list[int]] = []
    for value in mapping.values():
        k = index.get(value)
        if k is None:
            k = index[value] = len(values)
            values.append(value)
        if at and at[-1][0] == k:
            at[-1][1] += 1
        else:
            at.append([k, 1])
    runs = ",".join(str(k) if n == 1 else f"{k}*{n}" for k, n in at)
    return [tasks, values, runs]


def is_task_map(raw: Any) -> bool:
    """Whether ``raw`` is the compact form of a task map (a plain one is an object)."""
    return (
        isinstance(raw, list)
        and len(raw) == 3
        and isinstance(raw[0], str)
        and isinstance(raw[1], list)
        and isinstance(raw[2], str)
    )


def decode_task_map(raw: Sequence[Any]) -> dict[str, Any]:
    """``{task: value}`` of a compact task map (inverse of :func:`encode_task_map`).

    Raises
    ------
    ValueError
        When the parts do not fit together (a value index or a count out of range).

    >>> decode_task_map(["a:0-2;b:0", ["n1", "n2"], "0*2,1,0"])
    {'a-0': 'n1', 'a-1': 'n1', 'a-2': 'n2', 'b-0': 'n1'}
    """
    tasks = decode_tasks(str(raw[0]))
    values = list(raw[1])
    at: list[Any] = []
    for run in str(raw[2]).split(",") if raw[2] else []:
        k, star, n = run.partition("*")
        if not 0 <= int(k) < len(values):
            raise ValueError(f"value index {k} of {len(values)} values")
        at.extend([values[int(k)]] * (int(n) if star else 1))
    if len(at) != len(tasks):
        raise ValueError(f"a task map of {len(tasks)} tasks has {len(at)} values")
    return dict(zip(tasks, at, strict=True))


def tasks_of(raw: Any) -> list[str]:
    """A task list as either form holds it: a plain list, or its text.

    >>> tasks_of(["a-0"]), tasks_of("a:0-1"), tasks_of(None)
    (['a-0'], ['a-0', 'a-1'], [])
    """
    if isinstance(raw, str):
        return decode_tasks(raw)
    return [str(t) for t in raw or []]


def task_map_of(raw: Any) -> dict[str, Any]:
    """A task map as either form holds it: a plain mapping, or its compact form.

    >>> task_map_of({"a-0": "n1"}), task_map_of(["a:0", [2], "0"])
    ({'a-0': 'n1'}, {'a-0': 2})
    """
    if is_task_map(raw):
        return decode_task_map(raw)
    return dict(raw or {})
