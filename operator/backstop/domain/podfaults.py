"""Task pods that died or never started: which are replaced in place, which count as lost.

A task pod can end without its node being lost: the kubelet evicts it (memory or disk
pressure), refuses it at admission (``OutOfcpu``), or the container's pod reaches a
terminal phase. And a pod can be created but never run: the scheduler finds no room on
its planned node (``PodScheduled=False``, reason ``Unschedulable``). Kubernetes replaces
none of these for a bare pod, so the operator must:

* a terminal (``Failed``/``Succeeded``) pod on a healthy node is deleted and recreated on
  the same node (:func:`backstop.domain.planning.diff_pods` does it: nothing of a
  terminal pod runs any more, so it is removed at once);
* a terminal pod whose node is the cause (the node no longer takes pods: a pressure
  taint, say) and a pod Unschedulable for longer than :data:`UNSCHEDULABLE_GRACE` are
  *lost*: :func:`lost_tasks` names them, and the controller re-places those tasks on
  other nodes like failed ones (never counting them as running meanwhile).

Pods on NotReady nodes are the node-loss recovery's, and pods on cordoned nodes the
drain's; neither is reported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from backstop.domain.constants import LABEL_ROLE, LABEL_TASK
from backstop.domain.incidents import NodeInfo

TERMINAL_PHASES = ("Failed", "Succeeded")
"""Pod phases after which no container of the pod runs again."""
UNSCHEDULABLE_GRACE = 10.0
"""Seconds a task pod may stay Unschedulable before its task counts as lost (the
scheduler retries meanwhile: capacity freed by a terminating pod is used)."""


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Whether the pod (a dict, as the API sends it) has ended for good.

    >>> is_terminal({"status": {"phase": "Failed", "reason": "Evicted"}})
    True
    >>> is_terminal({"status": {"phase": "Running"}})
    False
    """
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    """Epoch seconds since which the scheduler finds no node for the pod, or ``None``.

    >>> unschedulable_since({"status": {"phase": "Pending", "conditions": [{"type":
    ...     "PodScheduled", "status": "False", "reason": "Unschedulable",
    ...     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    1767225600.0
    >>> unschedulable_since({"status": {"phase": "Pending"}}) is None
    True
    """
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for c in status.get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            since = _epoch(c.get("lastTransitionTime"))
            return 0.0 if since is None else since
    return None


def pod_loss(
    pod: Mapping[str, Any],
    planned: str,
    nodes: Mapping[str, NodeInfo],
    *,
    now: float,
    grace: float = UNSCHEDULABLE_GRACE,
) -> str | None:
    """Why the task of ``pod`` (planned on node ``planned``) is lost, or ``None``.

    ``None`` also when the pod is simply replaced where it is (a terminal pod on a
    healthy node) or when node loss or drain handle it (``planned`` NotReady, gone or
    cordoned).

    Examples
    --------
    >>> ok = NodeInfo("a", ready=True, since=0, cpu=2, schedulable=True, cordoned=False)
    >>> sick = NodeInfo("b", ready=True, since=0, cpu=2, schedulable=False, cordoned=False)
    >>> evicted = {"status": {"phase": "Failed", "reason": "Evicted",
    ...     "message": "The node was low on resource: memory."}}
    >>> pod_loss(evicted, "a", {"a": ok}, now=0) is None   # recreated on a
    True
    >>> pod_loss(evicted, "b", {"b": sick}, now=0)
    'Evicted on b, which takes no pods now: The node was low on resource: memory.'
    >>> stuck = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
    ...     "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available",
    ...     "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}
    >>> pod_loss(stuck, "a", {"a": ok}, now=5) is None     # within the grace
    True
    >>> pod_loss(stuck, "a", {"a": ok}, now=60)
    'Unschedulable on a for 60s: 0/3 nodes are available'
    """
    info = nodes.get(planned)
    if info is None or not info.ready or info.cordoned:
        return None  # node loss (recovery) or maintenance (drain)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    if is_terminal(pod):
        if info.schedulable:
            return None  # the node is fine: the pod is recreated there
        reason = status.get("reason") or status.get("phase")
        text = (status.get("message") or "").strip()
        return f"{reason} on {planned}, which takes no pods now" + (f": {text}" if text else "")
    since = unschedulable_since(pod)
    if since is None or now - since < grace:
        return None
    message = next(
        (
            c.get("message") or ""
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled"
        ),
        "",
    )
    return f"Unschedulable on {planned} for {now - since:.0f}s" + (
        f": {message}" if message else ""
    )


def lost_tasks(
    pods: Iterable[Mapping[str, Any]],
    assignment: Mapping[str, str],
    nodes: Mapping[str, NodeInfo],
    *,
    now: float,
    grace: float = UNSCHEDULABLE_GRACE,
) -> dict[str, str]:
    """``{task: why}`` of the primary task pods that are lost (see :func:`pod_loss`).

    Only pods of the recorded plan count: a pod whose task is planned elsewhere is
    already being moved.

    >>> ok = NodeInfo("a", ready=True, since=0, cpu=2, schedulable=False, cordoned=False)
    >>> pod = {"metadata": {"labels": {"streams.backstop.dev/task": "x-0",
    ...     "streams.backstop.dev/role": "primary"}},
    ...     "spec": {"nodeName": "a"}, "status": {"phase": "Failed", "reason": "Evicted"}}
    >>> lost_tasks([pod], {"x-0": "a"}, {"a": ok}, now=0)
    {'x-0': 'Evicted on a, which takes no pods now'}
    >>> lost_tasks([pod], {"x-0": "c"}, {"a": ok}, now=0)
    {}
    """
    out: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        task = str(labels.get(LABEL_TASK) or "")
        if labels.get(LABEL_ROLE, "primary") != "primary" or task not in assignment:
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node != assignment[task]:
            continue
        why = pod_loss(pod, assignment[task], nodes, now=now, grace=grace)
        if why is not None:
            out[task] = why
    return out


DRAIN_HOLD_SECONDS = 7.0
"""A task moved off a cordoned node is recreated (under the same pod name) only this
long after its old pod was deleted. ``kubectl drain`` retries a refused eviction every
5 s and then evicts *by name*: the pause makes its next attempt find the old pod gone
or terminating (done) instead of the new copy on another node (which the topology's
PodDisruptionBudget would protect forever, or which it would evict while Pending)."""


def drain_held(drain: Mapping[str, Any], now: float) -> set[str]:
    """Tasks moved by the last drain step whose new pod must not be created yet.

    >>> sorted(drain_held({"moving": ["a-0", "b-1"], "holdUntil": 10.0}, now=3.0))
    ['a-0', 'b-1']
    >>> drain_held({"moving": ["a-0"], "holdUntil": 10.0}, now=10.5)
    set()
    """
    if now >= float(drain.get("holdUntil") or 0.0):
        return set()
    return set(drain.get("moving") or [])
