"""What a pod holds on a node: its requests, where it counts, and the CPU a planner gets.

The capacity ledger (:mod:`backstop.k8s.ledger`) counts pods and holds with these pure
functions; they read a pod as a manifest dict, as the API server sends it or as the
operator builds it (:mod:`backstop.k8s.manifests`), so they are tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from backstop.domain.constants import ANN_NODE, LABEL_TOPOLOGY
from backstop.k8s.nodes import pod_cpu_request

__all__ = [
    "EPS",
    "PodKey",
    "Resources",
    "manifest_holds",
    "planner_cpu",
    "pod_owner",
    "pod_place",
    "pod_requests",
]

EPS = 1e-9
"""Slack in comparisons of cores and bytes (sums of floats)."""
_DONE = frozenset({"Succeeded", "Failed"})

PodKey = tuple[str, str]
"""``(namespace, name)`` of a pod."""


@dataclass(frozen=True)
class Resources:
    """Requests (or what is free): cores, bytes of memory, pod slots.

    Examples
    --------
    >>> Resources(2, 1024, 3) - Resources(0.5, 24, 1)
    Resources(cpu=1.5, memory=1000, pods=2)
    >>> Resources(1, 10, 1).fits_in(Resources(1, 10, 0))
    False
    """

    cpu: float = 0.0
    memory: float = 0.0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.pods - other.pods)

    def fits_in(self, free: Resources) -> bool:
        """Whether these requests fit into ``free`` (every dimension)."""
        return (
            self.cpu <= free.cpu + EPS
            and self.memory <= free.memory + EPS
            and self.pods <= free.pods
        )


def _quantity(value: Any) -> float:
    try:
        return float(parse_quantity(str(value)))
    except (ValueError, TypeError):
        return 0.0


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """A pod's requests as the scheduler counts them (containers, init containers, overhead).

    Examples
    --------
    >>> pod_requests({"spec": {"containers": [{"resources": {"requests":
    ...     {"cpu": "250m", "memory": "64Mi"}}}]}})
    Resources(cpu=0.25, memory=67108864.0, pods=1)
    """
    spec = pod.get("spec") or {}

    def mem(c: Mapping[str, Any]) -> float:
        raw = ((c.get("resources") or {}).get("requests") or {}).get("memory")
        return 0.0 if raw is None else _quantity(raw)

    main = sum(mem(c) for c in spec.get("containers") or [])
    init = max((mem(c) for c in spec.get("initContainers") or []), default=0.0)
    overhead = _quantity((spec.get("overhead") or {}).get("memory") or 0)
    return Resources(pod_cpu_request(pod), max(main, init) + overhead, 1)


def pod_place(pod: Mapping[str, Any]) -> str | None:
    """The node whose resources a pod holds: where it is bound, else where it is pinned.

    A finished pod holds nothing. A task pod waits a moment for the scheduler, but
    its required node affinity allows only its planned node (annotation
    ``ANN_NODE``), so it counts there at once.
    """
    if ((pod.get("status") or {}).get("phase")) in _DONE:
        return None
    meta = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName") or (meta.get("annotations") or {}).get(ANN_NODE)
    return str(node) if node else None


def pod_owner(pod: Mapping[str, Any]) -> str | None:
    """``namespace/topology`` of a task pod, ``None`` for any other workload."""
    meta = pod.get("metadata") or {}
    topology = (meta.get("labels") or {}).get(LABEL_TOPOLOGY)
    return f"{meta.get('namespace')}/{topology}" if topology else None


def planner_cpu(
    allocatable: Mapping[str, Resources],
    free: Mapping[str, Resources],
    *,
    task_cpu: float,
    task_memory: float,
    cap: float = 1.0,
) -> dict[str, float]:
    """The CPU per node to give a planner that counts CPU only, memory and pods included.

    The planners pack task CPU (their weights). So that whatever they pack also
    fits memory and the node's pod limit, a node offers at most ``k`` times the
    smallest task's CPU, where ``k`` is how many of the largest-memory tasks fit
    its free memory and pod slots: any set of more than ``k`` tasks needs more
    CPU than that. ``cap`` keeps ``(1 - cap) × allocatable CPU`` unused (the
    recovery utilization cap).

    Examples
    --------
    >>> alloc = {"a": Resources(4, 1000, 110), "b": Resources(4, 250, 110)}
    >>> planner_cpu(alloc, alloc, task_cpu=1, task_memory=100)
    {'a': 4.0, 'b': 2.0}
    >>> planner_cpu(alloc, {"a": Resources(4, 1000, 1), "b": Resources(1, 250, 9)},
    ...             task_cpu=0.5, task_memory=100, cap=0.8)
    {'a': 0.5, 'b': 0.2}
    """
    out: dict[str, float] = {}
    for node, a in allocatable.items():
        f = free.get(node, Resources())
        count = max(f.pods, 0)
        if task_memory > 0:
            count = min(count, int(max(f.memory, 0.0) // task_memory))
        cpu = min(f.cpu - a.cpu * (1.0 - cap), count * task_cpu)
        out[node] = round(max(float(cpu), 0.0), 6)
    return out


def manifest_holds(
    manifests: Mapping[str, Mapping[str, Any]], namespace: str
) -> dict[PodKey, tuple[str, Resources]]:
    """``{pod: (planned node, requests)}`` of pod manifests, for
    :meth:`backstop.k8s.ledger.Booking.reserve`."""
    out: dict[PodKey, tuple[str, Resources]] = {}
    for name, manifest in manifests.items():
        node = pod_place(manifest)
        if node is not None:
            out[(namespace, name)] = (node, pod_requests(manifest))
    return out
