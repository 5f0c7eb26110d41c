"""Fencing epochs: which copy of a task is the current one, decided by the operator.

A pod on a NotReady node is force-deleted and its task recreated elsewhere; the old copy
may still run behind a partition. So every task copy carries an *epoch*: ``0`` for the
first copy (no ``BACKSTOP_EPOCH`` in the pod), one more each time the operator recreates
the task while an old copy may still run (its pod force-removed from a lost node). The
epochs live in ``status.plan.epochs`` (written before the pods are touched), in the pod
(``BACKSTOP_EPOCH`` and the ``streams.backstop.dev/epoch`` annotation) and in the session
ConfigMap (``epochs``), and the runtime refuses to write once the published epoch of its
task is newer than its own (README, "Runtime contract").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from backstop.domain.constants import LABEL_TASK


def bump_epochs(epochs: Mapping[str, int] | None, tasks: Iterable[str]) -> dict[str, int]:
    """``epochs`` with every task of ``tasks`` one epoch further (absent means 0).

    >>> bump_epochs({"a-0": 2}, ["a-0", "b-1"])
    {'a-0': 3, 'b-1': 1}
    >>> bump_epochs(None, [])
    {}
    """
    out = {str(k): int(v) for k, v in (epochs or {}).items()}
    for task in tasks:
        out[task] = out.get(task, 0) + 1
    return dict(sorted(out.items()))


def fenced_tasks(
    existing: Iterable[Mapping[str, Any]],
    desired: Mapping[str, Mapping[str, Any]],
    lost_nodes: Collection[str],
) -> set[str]:
    """Tasks whose pod (a dict) is still on a lost node while the plan wants it back:
    recreating them needs a new epoch, since the old copy may still run.

    >>> pod = {"metadata": {"name": "t-a-0", "labels": {"streams.backstop.dev/task": "a-0"}},
    ...        "spec": {"nodeName": "dead"}}
    >>> fenced_tasks([pod], {"t-a-0": {}}, {"dead"}), fenced_tasks([pod], {"t-a-0": {}}, set())
    ({'a-0'}, set())
    """
    out: set[str] = set()
    for pod in existing:
        meta = pod.get("metadata") or {}
        task = (meta.get("labels") or {}).get(LABEL_TASK)
        node = (pod.get("spec") or {}).get("nodeName")
        if task and node in lost_nodes and meta.get("name") in desired:
            out.add(task)
    return out
