"""Kubernetes Node (and Pod) manifests → the planners' :class:`~planners.placement.Node`.

Why a separate pure function: the CLI reads Node manifests from a file, and the
operator reads live Node objects from the API server; both must agree on what a
node can still take (allocatable CPU minus the requests of pods already bound
to it) and on its failure domain (a node label such as
``topology.kubernetes.io/zone``). Keeping it dict-in, dataclass-out means the
operator can pass ``ApiClient().sanitize_for_serialization(node)`` dicts and
the tests need no cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from backstop.domain.constants import NODE_KIND_LABEL
from backstop.domain.podmerge import taints_tolerated
from backstop.domain.quantity import parse_quantity
from backstop.domain.yamlio import load_all
from planners import PlannerError
from planners.placement import Node

__all__ = [
    "InvalidNodes",
    "load_nodes",
    "node_kind",
    "nodes_from_manifests",
    "pod_cpu_request",
]

_DONE_PHASES = frozenset({"Succeeded", "Failed"})


class InvalidNodes(PlannerError):
    """The node list cannot be used: unreadable, empty, or a bad CPU quantity."""


def _flatten(docs: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        if isinstance(doc.get("items"), list):  # kind: List / NodeList / PodList
            yield from _flatten(doc["items"])
        else:
            yield doc


def _cores(value: Any, where: str) -> float:
    try:
        return float(parse_quantity(str(value)))
    except (ValueError, TypeError):
        raise InvalidNodes(f"{where}: {value!r} is not a CPU quantity") from None


def pod_cpu_request(pod: Mapping[str, Any]) -> float:
    """A pod's effective CPU request in cores, as the scheduler counts it.

    That is the larger of the sum over containers and the largest init
    container, plus the pod overhead.

    Examples
    --------
    >>> pod_cpu_request({"spec": {"containers": [
    ...     {"resources": {"requests": {"cpu": "250m"}}},
    ...     {"resources": {"requests": {"cpu": "0.5"}}}]}})
    0.75
    """
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "<pod>")

    def req(container: Mapping[str, Any]) -> float:
        cpu = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
        return 0.0 if cpu is None else _cores(cpu, f"pod {name}")

    main = sum(req(c) for c in spec.get("containers") or [])
    init = max((req(c) for c in spec.get("initContainers") or []), default=0.0)
    overhead_cpu = (spec.get("overhead") or {}).get("cpu")
    overhead = 0.0 if overhead_cpu is None else _cores(overhead_cpu, f"pod {name}")
    return max(main, init) + overhead


def node_kind(labels: Mapping[str, str] | None) -> str | None:
    """``real``, ``simulated`` or ``None`` (a node the local cluster did not make).

    Examples
    --------
    >>> node_kind({NODE_KIND_LABEL: "real"}), node_kind({}), node_kind(None)
    ('real', None, None)
    """
    return (labels or {}).get(NODE_KIND_LABEL)


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions")
    if not conditions:  # a plain manifest: no status yet, assume usable
        return True
    for c in conditions:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def node_is_ready(node: Any) -> bool:
    """Whether a Node object's Ready condition is True."""
    for c in (node.status and node.status.conditions) or []:
        if c.type == "Ready":
            return bool(c.status == "True")
    return False


def nodes_from_manifests(
    docs: Iterable[Any],
    topology_key: str | None = None,
    *,
    pods: Iterable[Any] = (),
    tolerations: Sequence[Sequence[Mapping[str, Any]]] | None = None,
) -> list[Node]:
    """Nodes a plan may use, from Node manifests (and optionally bound Pods).

    Parameters
    ----------
    docs:
        Loaded YAML/JSON documents: Node objects, ``List``/``NodeList`` objects
        holding them, and optionally Pod objects (other kinds are ignored).
    topology_key:
        A node label naming the failure domain (e.g.
        ``topology.kubernetes.io/zone``); nodes without it are their own domain.
    pods:
        More Pod objects; with those in ``docs``, the CPU requests of pods bound
        to a node (``spec.nodeName``) and not finished are subtracted from it.
    tolerations:
        One toleration list per operator: a node with NoSchedule/NoExecute taints is
        left out unless all of them tolerate its taints
        (:func:`backstop.domain.podmerge.taints_tolerated`); ``None``: taints are not looked at.

    Returns
    -------
    list of Node
        One per schedulable, Ready node with CPU left, in the input order;
        ``cpu`` is ``status.allocatable.cpu`` (else ``status.capacity.cpu``)
        minus the bound pods' requests.

    Raises
    ------
    InvalidNodes
        A node without a name or CPU, or a bad CPU quantity.

    Examples
    --------
    >>> nodes_from_manifests([{"kind": "List", "items": [
    ...     {"kind": "Node", "metadata": {"name": "a", "labels": {"zone": "z1"}},
    ...      "status": {"allocatable": {"cpu": "2"}}}]},
    ...     {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "a",
    ...      "containers": [{"resources": {"requests": {"cpu": "500m"}}}]}}],
    ...     topology_key="zone")
    [Node(name='a', cpu=1.5, domain='z1')]
    """
    node_docs: list[Mapping[str, Any]] = []
    pod_docs: list[Mapping[str, Any]] = []
    for d in _flatten([*docs, *pods]):
        kind = d.get("kind")
        if kind == "Node":
            node_docs.append(d)
        elif kind == "Pod":
            pod_docs.append(d)
    used: dict[str, float] = {}
    for pod in pod_docs:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in _DONE_PHASES:
            used[node] = used.get(node, 0.0) + pod_cpu_request(pod)
    out: list[Node] = []
    for d in node_docs:
        meta = d.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise InvalidNodes("a Node has no metadata.name")
        if (d.get("spec") or {}).get("unschedulable") or not _ready(d):
            continue
        taints = (d.get("spec") or {}).get("taints") or []
        if tolerations is not None and not taints_tolerated(taints, tolerations):
            continue
        status = d.get("status") or {}
        cpu = (status.get("allocatable") or {}).get("cpu")
        if cpu is None:
            cpu = (status.get("capacity") or {}).get("cpu")
        if cpu is None:
            raise InvalidNodes(f"node {name} has no status.allocatable.cpu")
        free = _cores(cpu, f"node {name}") - used.get(name, 0.0)
        if free <= 0:
            continue
        labels = meta.get("labels") or {}
        domain = labels.get(topology_key) if topology_key else None
        out.append(Node(str(name), round(free, 6), None if domain is None else str(domain)))
    return out


def load_nodes(
    path: str | Path,
    topology_key: str | None = None,
    tolerations: Sequence[Sequence[Mapping[str, Any]]] | None = None,
) -> list[Node]:
    """Read :func:`nodes_from_manifests` input from a (multi-document) YAML file.

    Raises
    ------
    InvalidNodes
        Unreadable or invalid YAML, or no usable node in it.
    """
    p = Path(path)
    try:
        docs = load_all(p.read_text())
    except OSError as err:
        raise InvalidNodes(f"cannot read {p}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise InvalidNodes(f"{p} is not valid YAML: {err}") from None
    nodes = nodes_from_manifests(docs, topology_key, tolerations=tolerations)
    if not nodes:
        raise InvalidNodes(f"{p} holds no schedulable Node with CPU available")
    return nodes
