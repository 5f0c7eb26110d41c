"""What one supervision round of a topology works with, and its one way to write status.

Every writer of the supervisor (recovery, drain, restore, conditions) computes a new
typed status from the one it read and calls :func:`write_status`: the merge patch
(:func:`backstop.domain.status.types.status_patch`) goes out with the
``resourceVersion`` the status was read at, so a write computed from a stale status
fails with 409 instead of undoing someone else's write. On a conflict the tick
re-reads the object and the caller decides again from what is there now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from backstop.controller.capacity import reserve
from backstop.controller.memo import TopologyMemo
from backstop.controller.metrics import OperatorMetrics
from backstop.domain.constants import ANN_HASH, EventReason
from backstop.domain.incidents import NodeInfo
from backstop.domain.podfaults import is_terminal
from backstop.domain.spec import StreamTopologySpec
from backstop.domain.status import (
    Condition,
    PlanStatus,
    PodState,
    TopologyStatus,
    derive_conditions,
    merge_conditions,
    parse_status,
    pod_failure,
    status_patch,
    with_changes,
)
from backstop.k8s import taskprobe
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import Booking, CapacityLedger
from backstop.k8s.manifests import Owner, desired_pods
from planners import TaskGraph

Emit = Callable[[EventReason, str, bool], None]
"""``emit(reason, message, warning)`` posts an Event on the topology."""


@dataclass
class Tick:
    """Everything one supervision round works with."""

    kube: Kube
    owner: Owner
    model: StreamTopologySpec
    graph: TaskGraph
    generation: int
    """The generation whose plan the pods follow (the last good one while an edit is
    rejected, see ``fallback``)."""
    status: TopologyStatus
    nodes: dict[str, NodeInfo]
    emit: Emit
    ledger: CapacityLedger
    """The process's capacity ledger: every step plans on it and reserves before writing."""
    memory: TopologyMemo = field(default_factory=TopologyMemo)
    """The topology's memory between ticks (Kopf's per-object memo)."""
    resource_version: str | None = None
    """The resourceVersion ``status`` was read at (the precondition of every write)."""
    fallback: bool = False
    """The current spec is invalid or infeasible: supervising the last good plan."""
    observed: int | None = None
    """The object's current generation (differs from ``generation`` in fallback)."""
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    """The process's metrics (Kopf's root memo); updated from what the round decides."""
    inputs: Any = None
    """What the round's work depends on besides the clock (pod changes, nodes, status
    version, generations: :func:`~backstop.controller.daemon.round_inputs`), read before
    the pods; ``None``: unknown, every round is a whole one."""

    def adopt(self, obj: Mapping[str, Any]) -> None:
        """Take the status and resourceVersion of an object the API server returned."""
        raw = dict(obj.get("status") or {})
        self.status = parse_status(raw).status
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        self.resource_version = rv
        if rv is not None:
            self.memory.written = (int(rv), raw)

    def refresh(self) -> None:
        """Re-read the topology (after a conflict, or before acting on a superseded plan)."""
        self.adopt(self.kube.get_topology(self.owner.namespace, self.owner.name))


def write_status(t: Tick, new: TopologyStatus) -> bool:
    """Write ``new`` over ``t.status`` (merge patch, resourceVersion precondition).

    Returns ``False`` (after re-reading the object) when the object changed since
    ``t.status`` was read: the caller's decision is void and must be made again.
    """
    patch = status_patch(t.status, new, status_wire(t))
    if not patch:
        return True
    try:
        obj = t.kube.patch_status_returning(
            t.owner.namespace, t.owner.name, patch, resource_version=t.resource_version
        )
    except ApiException as err:
        if err.status != 409:
            raise
        t.refresh()
        return False
    t.adopt(obj)
    return True


def status_wire(t: Tick) -> dict[str, Any]:
    """``t.status.wire()``, kept in the topology's memo for its resourceVersion: a steady
    round computes it (:func:`~backstop.controller.supervisor.supervise_once`), so the
    write of a recovery step does not compact the old 10k-task status again."""
    kept = t.memory.wire
    if kept is None or t.resource_version is None or kept[0] != t.resource_version:
        kept = (t.resource_version, t.status.wire())
        t.memory.wire = kept if t.resource_version is not None else None
    return kept[1]


def with_conditions(t: Tick, new: TopologyStatus, pods: Iterable[PodState]) -> TopologyStatus:
    """``new`` with every condition derived again from it and the pods."""
    derived = derive_conditions(t.observed or t.generation, new, pods)
    merged = merge_conditions([c.dump() for c in new.conditions], derived)
    return with_changes(new, conditions=[Condition.model_validate(c) for c in merged])


def planned_pods(t: Tick, plan: PlanStatus) -> dict[str, dict[str, Any]]:
    """The pods a recorded plan (``status.plan``) asks for: one builder for converging
    to it and for checking that a restore step has landed.

    Built once per (topology uid, generation, plan) and kept in the topology's memo:
    every 1 s tick asks for them, and at 10k tasks building them takes about 1.8 s. A plan that
    differs from the kept one only in some tasks' nodes or epochs (a recovery step, a
    fencing) rebuilds only those tasks' pods. The dict is a fresh copy each time; the
    manifests in it are shared and must not be changed.
    """
    key = (t.owner, t.generation, plan_key(plan))
    cached = t.memory.desired
    if cached is None or cached[0] != key:
        changed = None if cached is None else changed_tasks(cached[0], key)
        pods = {} if changed is None or cached is None else dict(cached[1])
        pods.update(
            desired_pods(
                t.owner,
                t.model,
                t.graph,
                frozenset(plan.backups),
                plan.assignment or {},
                plan.replicas,
                plan.epochs,
                only=changed,
                promoted=plan.promoted,
            )
        )
        cached = t.memory.desired = (key, pods)
    return dict(cached[1])


def changed_tasks(old: tuple[Any, ...], new: tuple[Any, ...]) -> set[str] | None:
    """The tasks whose pods differ between two :func:`planned_pods` keys, or ``None``
    when every pod must be built again (another topology or generation, other backups,
    replicas or promotions, other tasks).

    Examples
    --------
    >>> a = PlanStatus(assignment={"s-0": "n1", "s-1": "n1"}, backups=["s-0"])
    >>> key = lambda p: ("owner", 1, plan_key(p))
    >>> moved = a.model_copy(update={"assignment": {"s-0": "n1", "s-1": "n2"}})
    >>> changed_tasks(key(a), key(moved))
    {'s-1'}
    >>> changed_tasks(key(a), key(a.model_copy(update={"epochs": {"s-0": 1}})))
    {'s-0'}
    >>> changed_tasks(key(a), key(a.model_copy(update={"backups": []}))) is None
    True
    """
    (owner, gen, (backups, assign, replicas, epochs, promoted)) = old
    (owner2, gen2, (backups2, assign2, replicas2, epochs2, promoted2)) = new
    if (owner, gen, backups, replicas, promoted) != (owner2, gen2, backups2, replicas2, promoted2):
        return None
    tasks: set[str] = {task for task, _ in assign}
    if tasks != {task for task, _ in assign2}:
        return None
    moved: set[str] = {task for task, _ in assign ^ assign2}
    return moved | {task for task, _ in epochs ^ epochs2}


def plan_key(plan: PlanStatus) -> tuple[Hashable, ...]:
    """Everything of a plan that the task pods depend on, comparable and hashable.

    Examples
    --------
    >>> a = PlanStatus(assignment={"s-0": "n1"}, backups=["s-0"])
    >>> plan_key(a) == plan_key(a.model_copy(update={"assignment": {"s-0": "n1"}}))
    True
    >>> plan_key(a) == plan_key(a.model_copy(update={"epochs": {"s-0": 1}}))
    False
    """
    replicas = plan.replicas or {}
    return (
        frozenset(plan.backups),
        frozenset((plan.assignment or {}).items()),
        frozenset((task, tuple(nodes)) for task, nodes in replicas.items()),
        frozenset(plan.epochs.items()),
        frozenset(plan.promoted.items()),
    )


def pods_match(desired: Mapping[str, Mapping[str, Any]], bodies: list[Mapping[str, Any]]) -> bool:
    """Whether the indexed pods are exactly the desired ones (same hash, none deleting
    and none ended: a Failed or evicted pod is replaced)."""
    have: dict[str, str | None] = {}
    for b in bodies:
        meta = b.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_terminal(b):
            return False
        have[meta["name"]] = (meta.get("annotations") or {}).get(ANN_HASH)
    if set(have) != set(desired):
        return False
    return all(have[name] == m["metadata"]["annotations"][ANN_HASH] for name, m in desired.items())


def reserve_tasks(
    booking: Booking,
    t: Tick,
    plan: PlanStatus,
    assignment: Mapping[str, str],
    tasks: Collection[str],
) -> None:
    """Reserve the pods of ``tasks`` where ``assignment`` puts them (before the status write).

    Only those tasks' pods are built: the whole plan's take 2 CPU s at 10k tasks, on the
    path from a node's loss to its first RecoveryPlan (``bench/bench_recovery_round.py``).
    """
    wanted = set(tasks)
    mine = desired_pods(
        t.owner,
        t.model,
        t.graph,
        frozenset(plan.backups),
        assignment,
        plan.replicas,
        plan.epochs,
        only=wanted,
        promoted=plan.promoted,
    )
    reserve(booking, t.owner, mine, t.nodes)


PROBE_EVERY = 10.0
"""Seconds between two questions to the same unready task (see :func:`unready_reasons`)."""


def unready_reasons(
    memory: TopologyMemo, bodies: Sequence[Mapping[str, Any]], now: float | None = None
) -> dict[str, str]:
    """Why each running-but-unready task pod is not ready, in the task's own words (a
    producer that never answers: its readiness probe fails, and the kubelet keeps only the
    status code). Asked again when the pod changes or after :data:`PROBE_EVERY` seconds."""
    now = time.monotonic() if now is None else now
    cache: dict[str, tuple[str, float, str | None]] = memory.probes
    out: dict[str, str] = {}
    for b in bodies:
        meta = b.get("metadata") or {}
        url = taskprobe.unready_address(b)
        if url is None:
            cache.pop(meta.get("name", ""), None)
            continue
        rv = str(meta.get("resourceVersion"))
        seen = cache.get(meta["name"])
        if seen is None or seen[0] != rv or now - seen[1] >= PROBE_EVERY:
            seen = (rv, now, taskprobe.not_ready_reason(url))
            cache[meta["name"]] = seen
        if seen[2]:
            out[meta["name"]] = seen[2]
    return out


def pod_states(
    bodies: Sequence[Mapping[str, Any]], reasons: Mapping[str, str] | None = None
) -> list[PodState]:
    """:class:`PodState` of indexed pod bodies; ``reasons``: :func:`unready_reasons`."""
    out = []
    for b in bodies:
        meta = b.get("metadata") or {}
        labels = meta.get("labels") or {}
        out.append(
            PodState(
                name=meta["name"],
                task=labels.get("streams.backstop.dev/task", ""),
                role=labels.get("streams.backstop.dev/role", "primary"),
                phase=(b.get("status") or {}).get("phase"),
                node=(b.get("spec") or {}).get("nodeName"),
                deleting=meta.get("deletionTimestamp") is not None,
                failure=pod_failure(b.get("status")) or (reasons or {}).get(meta["name"]),
            )
        )
    return out


def running_primaries(bodies: list[Mapping[str, Any]]) -> dict[str, str]:
    """``{task: node}`` of the primary pods in phase Running."""
    out: dict[str, str] = {}
    for b in bodies:
        labels = (b.get("metadata") or {}).get("labels") or {}
        node = (b.get("spec") or {}).get("nodeName")
        if (
            (b.get("status") or {}).get("phase") == "Running"
            and labels.get("streams.backstop.dev/role") == "primary"
            and node
        ):
            out[labels.get("streams.backstop.dev/task", "")] = node
    return out
