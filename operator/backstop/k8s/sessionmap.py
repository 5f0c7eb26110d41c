"""The ``<topology>-recovery`` session ConfigMap: the operator's contract with the runtime.

Every task pod mounts it (:func:`backstop.k8s.manifests.build_task_pod`); the task
runtime reads ``session.json`` (``backstop_runtime.session``, ``backstop_runtime.
fencing``). Its own module because its size matters: a ConfigMap holds at most 1 MiB,
and what it says grows with the failure (``docs/scale.md``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from backstop.domain.constants import GROUP, SESSION_CONFIGMAP_SUFFIX
from backstop.domain.incidents import replay_sources
from backstop.domain.tasksets import encode_tasks, relative, split_task, tasks_of
from backstop.k8s.manifests import Owner
from planners import TaskGraph

SESSION_FORMAT = 2
"""``session.json``'s format: 2 writes task lists as runs of indices per operator
(:mod:`backstop.domain.tasksets`; the runtime reads both)."""


def build_session_configmap(
    owner: Owner,
    graph: TaskGraph,
    backups: Collection[str],
    recovery: Mapping[str, Any],
    epochs: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The ConfigMap every task pod mounts: the contract with the stream runtime.

    ``session.json`` holds the recovery step, the checkpoint to restore from,
    whether adaptive buffering and order-preserving processing are on (from the
    first plan until the session completes), and, for each recovered task, the
    upstream tasks that replay to it. See the README's "Runtime contract".

    Every per-task part is a compact task list (:mod:`backstop.domain.tasksets`), and
    the recovered tasks that replay from the same places share one ``replayGroups``
    entry, so the file stays small at any size the spec admits (``docs/scale.md``): a
    300x300 shuffle whose reducers all recover lists one group, not 90,000 names.
    ``recovery`` may hold its task lists in either form (the typed status's plain
    dump, or the compact form the API stores).
    """
    active = bool(recovery.get("active"))
    session_failed = set(tasks_of(recovery.get("sessionFailed")))
    recovered = sorted(t for t in tasks_of(recovery.get("recovered")) if t in graph._index)
    doc = {
        "format": SESSION_FORMAT,
        "session": recovery.get("session"),
        "phase": "Recovering" if active else "Completed",
        "step": recovery.get("step", 0),
        "lostNodes": sorted(recovery.get("lost") or {}),
        "checkpoint": {
            "restore": "latest-before",
            "before": recovery.get("startedAt"),
        },
        "adaptiveBuffering": active and recovery.get("step", 0) > 0,
        "orderPreserving": active and recovery.get("step", 0) > 0,
        "replayGroups": replay_groups(graph, backups, session_failed, recovered),
        "pendingTasks": _tasks_text(sorted(tasks_of(recovery.get("failed")))),
        # the current fencing epoch of every task recreated while an old copy may run:
        # a copy with an older BACKSTOP_EPOCH stops writing (backstop.domain.fencing)
        "epochTasks": {
            str(n): _tasks_text([t for t, m in sorted((epochs or {}).items()) if m == n])
            for n in sorted({int(m) for m in (epochs or {}).values()})
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": owner.name + SESSION_CONFIGMAP_SUFFIX,
            "namespace": owner.namespace,
            "labels": {f"{GROUP}/topology": owner.name},
            "ownerReferences": [owner.reference()],
        },
        "data": {"session.json": json.dumps(doc, separators=(",", ":"), sort_keys=True)},
    }


def _tasks_text(tasks: Sequence[str]) -> str:
    text = encode_tasks(tasks)
    if text is None:  # never for ids from the spec; refuse rather than write a wrong file
        raise ValueError(f"not task ids: {[t for t in tasks if split_task(t) is None][:3]}")
    return text


def replay_groups(
    graph: TaskGraph, backups: Collection[str], failed: Collection[str], recovered: Sequence[str]
) -> list[dict[str, str]]:
    """``session.json``'s ``replayGroups``: the recovered tasks grouped by where they replay
    from (:func:`backstop.domain.incidents.replay_sources`), written relative to each
    task's own index (``@``) so a forward chain's tasks share a group.

    Examples
    --------
    >>> g = TaskGraph.build(["s-0", "s-1", "a-0", "a-1"], [("s-0", "a-0"), ("s-1", "a-1")],
    ...                     latency={"s-0": 1, "s-1": 1, "a-0": 1, "a-1": 1})
    >>> replay_groups(g, [], ["a-0", "a-1"], ["a-0", "a-1"])
    [{'from': '', 'logs': 's:@', 'tasks': 'a:0-1'}]
    """
    groups: dict[tuple[str, str], list[str]] = {}
    backups, failed = frozenset(backups), frozenset(failed)  # once, not per task
    for task in recovered:
        parts = split_task(task)
        if parts is None:
            raise ValueError(f"not a task id: {task!r}")
        sources = replay_sources(graph, backups, failed, task)
        ups = _tasks_text([s for s in sources if not s.startswith("log:")])
        logs = _tasks_text([s.removeprefix("log:") for s in sources if s.startswith("log:")])
        key = (relative(ups, parts[1]), relative(logs, parts[1]))
        groups.setdefault(key, []).append(task)
    return [
        {"from": ups, "logs": logs, "tasks": _tasks_text(members)}
        for (ups, logs), members in groups.items()
    ]
