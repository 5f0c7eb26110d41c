"""Reading the compact task lists of the session ConfigMap (``session.json`` format 2).

The operator writes lists of task ids as runs of indices per operator
(``map:0-299;reduce:4,7-9``), so the file of a 300x300 shuffle or of a 10,000-task
topology stays far below a ConfigMap's 1 MiB; the grammar is in ``docs/scale.md`` and
in the operator's ``backstop.domain.tasksets``. This is the one decoder, kept stdlib-only
(the runtime imports nothing of the operator); the operator's ``decode_tasks`` calls it, and
``tests/unit/test_object_sizes.py`` checks the round trip.
"""

from __future__ import annotations


def decode(text: str, own: int | None = None) -> list[str]:
    """The task ids of a task-list text, in order; a run ``@`` is the index ``own``.

    Raises ``ValueError`` on text that is not a task list.

    >>> decode("a:0-2;b:5;a:9,3")
    ['a-0', 'a-1', 'a-2', 'b-5', 'a-9', 'a-3']
    >>> decode("up:@", own=4), decode("")
    (['up-4'], [])
    """
    out: list[str] = []
    if not text:
        return out
    for group in text.split(";"):
        op, sep, runs = group.partition(":")
        if not sep or not op or not runs:
            raise ValueError(f"not a task list group: {group!r}")
        for run in runs.split(","):
            if run == "@" and own is not None:
                out.append(f"{op}-{own}")
                continue
            lo, dash, hi = run.partition("-")
            first, last = int(lo), int(hi) if dash else int(lo)
            if first < 0 or last < first:
                raise ValueError(f"not a run of indices: {run!r}")
            out.extend(f"{op}-{i}" for i in range(first, last + 1))
    return out


def index_of(task: str) -> int | None:
    """The index of a task id ``<operator>-<index>``.

    >>> index_of("stage-2-17"), index_of("x")
    (17, None)
    """
    _, _, tail = task.rpartition("-")
    return int(tail) if tail.isdigit() else None


def contains(text: str, task: str) -> bool:
    """Whether the task list ``text`` holds ``task``, without listing it.

    >>> contains("a:0-2;b:5", "a-1"), contains("a:0-2;b:5", "b-4"), contains("a:3", "ab-3")
    (True, False, False)
    """
    op, _, tail = task.rpartition("-")
    if not tail.isdigit():
        return False
    i = int(tail)
    for group in text.split(";") if text else []:
        name, _, runs = group.partition(":")
        if name != op:
            continue
        for run in runs.split(","):
            lo, dash, hi = run.partition("-")
            if lo.isdigit() and int(lo) <= i <= (int(hi) if dash and hi.isdigit() else int(lo)):
                return True
    return False
