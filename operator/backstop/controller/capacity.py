"""The controller's side of the capacity ledger: what a topology's planners may use.

Every planner of the controller (reconcile, recovery step, drain, restore) reads
its capacity here, inside :meth:`backstop.k8s.ledger.CapacityLedger.booking` (the
reconcile on a snapshot first: :meth:`~backstop.k8s.ledger.CapacityLedger.plan_and_book`),
and reserves the pods its new plan asks for before the plan is written to the status
(see :mod:`backstop.k8s.ledger` for why). The functions are small adapters from
the node index and the topology's model to the ledger's units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from backstop.domain.incidents import NodeInfo
from backstop.domain.podmerge import task_pod_requests
from backstop.domain.spec import StreamTopologySpec
from backstop.k8s.kubeio import ClusterView, Kube
from backstop.k8s.ledger import (
    Booking,
    CapacityLedger,
    Reading,
    Resources,
    manifest_holds,
    planner_cpu,
)
from backstop.k8s.manifests import Owner
from planners.placement import Node


@dataclass
class Placing:
    """What a reconcile places with: the API gateway, the shared ledger, the node index
    and the topology's pods from the pod index (``pods()``: its records,
    :func:`backstop.k8s.podrecord.slim_pod` dicts, shared with the index: read only)."""

    kube: Kube
    ledger: CapacityLedger
    nodes: dict[str, NodeInfo]
    pods: Callable[[], list[Mapping[str, Any]]] = field(default=list)


def owner_key(owner: Owner) -> str:
    """The ledger's name of a topology: ``namespace/name`` (as its pods' label gives it)."""
    return f"{owner.namespace}/{owner.name}"


def allocatable(nodes: Mapping[str, NodeInfo], names: Iterable[str]) -> dict[str, Resources]:
    """Allocatable CPU, memory and pods of the named nodes, from the node index."""
    return {n: Resources(nodes[n].cpu, nodes[n].memory, nodes[n].pods) for n in names if n in nodes}


def cluster_view(
    nodes: Mapping[str, NodeInfo],
    free: Mapping[str, Resources],
    own_pods: list[Mapping[str, Any]],
    topology_key: str | None,
    node_selector: Mapping[str, str] | None = None,
) -> ClusterView:
    """A topology's view of the cluster from the watch caches, without an API call.

    ``nodes`` is the node index as the topology sees it
    (:func:`backstop.domain.incidents.for_topology`: ``schedulable`` already weighs its
    tolerations), ``free`` the ledger's free resources with the topology's own pods
    left out (:meth:`CapacityLedger.free` with ``exclude``). A node is usable when
    the selector picks it, it is schedulable and it has CPU left; the same answer
    :meth:`backstop.k8s.kubeio.Kube.view` gives from a LIST of every node and pod,
    except that other plans' holds count too (as they do in :func:`plan_nodes`).

    Examples
    --------
    >>> from backstop.domain.incidents import NodeInfo
    >>> info = {n: NodeInfo(n, n != "c", 0.0, 4, n != "c", False, (("pool", "p"),))
    ...         for n in "abc"}
    >>> free = {"a": Resources(1.5, 0, 9), "b": Resources(0, 0, 9), "c": Resources(4, 0, 9)}
    >>> v = cluster_view(info, free, [], None, {"pool": "p"})
    >>> v.nodes, sorted(v.dead())
    ([Node(name='a', cpu=1.5, domain=None)], ['c'])
    >>> cluster_view(info, free, [], None, {"pool": "q"}).ready
    {}
    """
    selected = {n: i for n, i in nodes.items() if i.matches(node_selector or {})}
    usable = []
    for name, info in selected.items():
        cpu = round(free[name].cpu, 6) if name in free else 0.0
        if info.schedulable and cpu > 0:
            domain = dict(info.labels).get(topology_key) if topology_key else None
            usable.append(Node(name, cpu, domain))
    return ClusterView(usable, own_pods, {n: i.ready for n, i in selected.items()})


def topology_view(
    ledger: CapacityLedger,
    nodes: Mapping[str, NodeInfo],
    model: StreamTopologySpec,
    owner: Owner,
    own_pods: list[Mapping[str, Any]],
) -> ClusterView:
    """:func:`cluster_view` of ``owner`` from the ledger (``nodes``: as the topology sees them)."""
    free = ledger.free(allocatable(nodes, nodes), exclude=owner_key(owner))
    return cluster_view(nodes, free, own_pods, model.topology_key, model.node_selector)


def task_profile(model: StreamTopologySpec) -> tuple[float, float]:
    """``(smallest task CPU, largest task memory)`` of a topology, for :func:`planner_cpu`
    (a task pod's requests: its template's sidecars and init containers included)."""
    pods = [
        task_pod_requests(
            model.pod_template, op.pod_template, op.resources.cpu, op.resources.memory
        )
        for op in model.operators
    ]
    return min(cpu for cpu, _ in pods), max(memory for _, memory in pods)


def step_capacity(
    booking: Reading,
    nodes: Mapping[str, NodeInfo],
    usable: Iterable[str],
    model: StreamTopologySpec,
    *,
    cap: float,
) -> dict[str, float]:
    """CPU a recovery or drain step may fill per usable node (every pod counted, own too);
    read inside the booking the step reserves in, or outside it only to look."""
    alloc = allocatable(nodes, usable)
    cpu, memory = task_profile(model)
    free = booking.free(alloc)
    return planner_cpu(alloc, free, task_cpu=cpu, task_memory=memory, cap=cap)


def capacity_grew(before: Mapping[str, float] | None, now: Mapping[str, float]) -> bool:
    """Whether some node has more free CPU in ``now`` than in ``before`` (a node missing
    from ``before`` had none); with ``before`` unknown (``None``), yes.

    >>> capacity_grew({"a": 0.2}, {"a": 0.2, "b": 0.0}), capacity_grew({"a": 0.2}, {"a": 0.4})
    (False, True)
    >>> capacity_grew(None, {}), capacity_grew({"a": 0.4}, {"a": 0.2, "b": 0.2})
    (True, True)
    """
    if before is None:
        return True
    return any(c > before.get(n, 0.0) + 1e-6 for n, c in now.items())


def plan_nodes(
    booking: Reading,
    nodes: Mapping[str, NodeInfo],
    candidates: Sequence[Node],
    model: StreamTopologySpec,
    owner: Owner,
) -> list[Node]:
    """``candidates`` (the reconcile's or restore's view) capped by the ledger.

    The topology's own pods do not count (a new plan may move them); every other
    pod and every other plan's hold does.
    """
    alloc = allocatable(nodes, (n.name for n in candidates))
    cpu, memory = task_profile(model)
    free = booking.free(alloc, exclude=owner_key(owner))
    room = planner_cpu(alloc, free, task_cpu=cpu, task_memory=memory)
    out = []
    for n in candidates:
        c = min(n.cpu, room.get(n.name, 0.0))
        if c > 0:
            out.append(replace(n, cpu=c))
    return out


def reserve(
    booking: Booking,
    owner: Owner,
    manifests: Mapping[str, Mapping[str, object]],
    nodes: Mapping[str, NodeInfo],
    *,
    exclusive: bool = False,
) -> None:
    """Reserve the pods of ``manifests`` on their planned nodes (see :meth:`Booking.reserve`)."""
    pods = manifest_holds(manifests, owner.namespace)
    alloc = allocatable(nodes, {node for node, _ in pods.values()})
    booking.reserve(owner_key(owner), pods, alloc, exclusive=exclusive)
