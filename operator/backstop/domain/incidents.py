"""Node loss as the operator sees it: detection, session bookkeeping, what tasks are told.

The recovery *planning* is the pure ``planners.recovery`` family; this module is
the layer between it and the Kopf daemon. Everything here is pure so the rules
(grace period, correlated window, session mode, replay sources, the ConfigMap
contract with the stream runtime) are unit-tested without a cluster, and so the
session can live entirely in the topology's status (the write-ahead log) and be
resumed by a restarted operator.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from backstop.domain.peers import address
from backstop.domain.podmerge import hard_taints, operator_tolerations, taints_tolerated
from backstop.domain.spec import RecoveryMode, RecoveryPolicy, StreamTopologySpec, cpu_cores
from backstop.domain.status.conditions import now_rfc3339
from planners import TaskGraph
from planners.recovery import RecoveryStep


@dataclass(frozen=True)
class NodeInfo:
    """What recovery needs to know about one Node."""

    name: str
    ready: bool
    since: float
    """Epoch seconds of the Ready condition's last transition."""
    cpu: float
    schedulable: bool
    """Ready, not cordoned and without NoSchedule/NoExecute taints (in a topology's view,
    :func:`for_topology`: without taints that its pods do not tolerate)."""
    cordoned: bool
    labels: tuple[tuple[str, str], ...] = ()
    memory: float = 0.0
    """Allocatable memory in bytes."""
    pods: int = 0
    """Allocatable pod slots (the kubelet's ``maxPods``)."""
    taints: tuple[tuple[str, str, str], ...] = ()
    """``(key, value, effect)`` of its NoSchedule and NoExecute taints."""
    confirmed_lost: float | None = None
    """Epoch seconds when the operator confirmed the node's loss on the data plane
    (:mod:`backstop.domain.dataplane`) while its Ready condition still said True: lost at
    once, without a grace period."""
    kubelet: str = ""
    """``ip:port`` of the node's kubelet (its InternalIP and kubelet endpoint port; empty
    when the Node says neither): a node whose kubelet accepts a connection is not lost."""

    def matches(self, selector: Mapping[str, str]) -> bool:
        """Whether the node carries every label of ``selector``."""
        have = dict(self.labels)
        return all(have.get(k) == v for k, v in selector.items())


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def kubelet_endpoint(status: Mapping[str, Any]) -> str:
    """``ip:port`` of a Node's kubelet from its status: the InternalIP (else ExternalIP)
    and ``daemonEndpoints.kubeletEndpoint.Port``; empty without either.

    >>> kubelet_endpoint({"addresses": [{"type": "Hostname", "address": "n1"},
    ...     {"type": "InternalIP", "address": "10.0.0.5"}],
    ...     "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}})
    '10.0.0.5:10250'
    >>> kubelet_endpoint({"addresses": [{"type": "InternalIP", "address": "fd00::5"}]})
    ''
    """
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    by_type = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    ip = by_type.get("InternalIP") or by_type.get("ExternalIP")
    if not ip or not port:
        return ""
    return address(str(ip), int(port))


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    """A :class:`NodeInfo` from a Node object (a dict, as Kopf delivers it)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ready, since = False, 0.0
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            ready = c.get("status") == "True"
            since = _epoch(c.get("lastTransitionTime"))
    allocatable = status.get("allocatable") or {}
    cpu_raw = allocatable.get("cpu") or "0"
    taints = tuple(
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"]))
        for t in hard_taints(spec.get("taints") or [])
    )
    cordoned = bool(spec.get("unschedulable"))
    return NodeInfo(
        name=str(meta.get("name")),
        ready=ready,
        since=since,
        cpu=cpu_cores(cpu_raw),
        schedulable=ready and not cordoned and not taints,
        cordoned=cordoned,
        labels=tuple(sorted((meta.get("labels") or {}).items())),
        memory=cpu_cores(allocatable.get("memory") or "0"),
        pods=int(cpu_cores(allocatable.get("pods") or "0")),
        taints=taints,
        kubelet=kubelet_endpoint(status),
    )


def topology_tolerations(spec: StreamTopologySpec) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The tolerations of each operator's task pods (its template merged over the topology's)."""
    return operator_tolerations(spec.pod_template, (op.pod_template for op in spec.operators))


def for_topology(nodes: Mapping[str, NodeInfo], spec: StreamTopologySpec) -> dict[str, NodeInfo]:
    """The node index as one topology sees it: a tainted node is ``schedulable`` when it is
    Ready, not cordoned, and every operator's pods tolerate its taints
    (:func:`backstop.domain.podmerge.taints_tolerated`; never the node condition taints).

    Examples
    --------
    >>> from backstop.domain.spec import StreamTopologySpec
    >>> tainted = NodeInfo("a", True, 0.0, 2, False, False,
    ...                    taints=(("dedicated", "stream", "NoSchedule"),))
    >>> doc = {"image": "x", "recoveryLatencyBound": 2,
    ...        "operators": [{"name": "a", "reprocessingLatency": 1}]}
    >>> for_topology({"a": tainted}, StreamTopologySpec.model_validate(doc))["a"].schedulable
    False
    >>> doc["podTemplate"] = {"spec": {"containers": [{"name": "task"}],
    ...     "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}
    >>> for_topology({"a": tainted}, StreamTopologySpec.model_validate(doc))["a"].schedulable
    True
    """
    tolerations = topology_tolerations(spec)
    return {name: _seen_by(info, tolerations) for name, info in nodes.items()}


def _seen_by(info: NodeInfo, tolerations: Sequence[Sequence[Mapping[str, Any]]]) -> NodeInfo:
    if not info.taints:
        return info
    taints = [{"key": k, "value": v, "effect": e} for k, v, e in info.taints]
    usable = info.ready and not info.cordoned and taints_tolerated(taints, tolerations)
    return info if usable == info.schedulable else replace(info, schedulable=usable)


def detect_lost(
    nodes_in_use: Collection[str],
    nodes: Mapping[str, NodeInfo],
    *,
    grace: float,
    now: float,
) -> set[str]:
    """Nodes in use that count as lost: deleted, not Ready for longer than ``grace``, or
    confirmed lost on the data plane (:attr:`NodeInfo.confirmed_lost`).

    A node that flaps back to Ready within the grace period is not lost.

    Examples
    --------
    >>> n = {"a": NodeInfo("a", False, 100.0, 4, False, False),
    ...      "b": NodeInfo("b", False, 125.0, 4, False, False)}
    >>> sorted(detect_lost({"a", "b", "c"}, n, grace=30, now=131))
    ['a', 'c']
    """
    lost = set()
    for name in nodes_in_use:
        info = nodes.get(name)
        confirmed = info is not None and info.confirmed_lost is not None
        if info is None or confirmed or (not info.ready and now - info.since >= grace):
            lost.add(name)
    return lost


def session_mode(policy: RecoveryPolicy, lost_at: Mapping[str, float]) -> str:
    """``incremental`` or ``blocking`` for the session, following the seed's rule.

    ``auto`` is incremental when at least ``correlatedThreshold`` nodes were lost
    within ``windowSeconds`` of each other (a correlated failure), else blocking.

    Examples
    --------
    >>> p = RecoveryPolicy()
    >>> session_mode(p, {"a": 0.0}), session_mode(p, {"a": 0.0, "b": 10.0})
    ('blocking', 'incremental')
    """
    if policy.mode is not RecoveryMode.auto:
        return policy.mode.value
    times = sorted(lost_at.values())
    best = 0
    lo = 0
    for hi, t in enumerate(times):
        while t - times[lo] > policy.window_seconds:
            lo += 1
        best = max(best, hi - lo + 1)
    return "incremental" if best >= policy.correlated_threshold else "blocking"


def replay_sources(
    graph: TaskGraph, backups: Collection[str], failed: Collection[str], task: str
) -> list[str]:
    """The upstream tasks that replay their buffered output to a recovering ``task``.

    Following the failure-effect model: a healthy upstream task that keeps an
    upstream backup replays at once; an upstream task that failed too, or keeps
    no buffer, recomputes, and the search continues above it. A source reads a
    replayable log, named ``log:<task>``.

    Examples
    --------
    >>> g = TaskGraph.build(["s", "a", "b"], [("s", "a"), ("a", "b")],
    ...                     latency={"s": 1, "a": 1, "b": 1})
    >>> replay_sources(g, backups=["a"], failed=["b"], task="b")
    ['a']
    >>> replay_sources(g, backups=[], failed=["b"], task="b")
    ['log:s']
    """
    # sets are used as they are: a caller asking for many tasks builds them once
    keep = backups if isinstance(backups, set | frozenset) else set(backups)
    down = failed if isinstance(failed, set | frozenset) else set(failed)
    out: set[str] = set()  # a set: a reducer of a 300-task shuffle has 300 sources
    seen: set[int] = set()
    stack = [graph.index(task)]
    while stack:
        v = stack.pop()
        if not graph.preds[v]:
            out.add(f"log:{graph.tasks[v]}")
            continue
        for u in graph.preds[v]:
            if u in seen:
                continue
            seen.add(u)
            uid = graph.tasks[u]
            if uid in keep and uid not in down:
                out.add(uid)
            else:
                stack.append(u)
    return sorted(out)


def epoch_rfc3339(epoch: float) -> str:
    """Seconds since the epoch as an RFC 3339 timestamp (Kubernetes' format)."""
    return now_rfc3339(datetime.fromtimestamp(epoch, UTC))


def recovery_json(step: RecoveryStep) -> dict[str, Any]:
    """A recovery step as JSON: ``backstop recover --json`` and the recorded session steps."""
    return {
        "algorithm": step.algorithm,
        "recover": dict(step.recover),
        "pending": list(step.pending),
        "recoveredQueries": list(step.recovered_queries),
        "recoveredPriority": step.recovered_priority,
        "failedPriority": step.failed_priority,
    }


def step_record(step: RecoveryStep, *, number: int, trigger: str, at: float) -> dict[str, Any]:
    """How one plan step is recorded in ``status.recovery.lastStep``."""
    return {"step": number, "trigger": trigger, "at": epoch_rfc3339(at), **recovery_json(step)}
