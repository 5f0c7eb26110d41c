"""Pure builders for everything the operator writes: pods, conditions, status, events.

Handlers call these ``build_*`` functions and pass the results to the I/O layer
(:mod:`backstop.kubeio`). Nothing here talks to the API server or reads global
configuration, so every manifest can be unit-tested and diffed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from backstop.spec import GROUP, OperatorSpec, StreamTopologySpec

LABEL_TOPOLOGY = f"{GROUP}/topology"
LABEL_OPERATOR = f"{GROUP}/operator"
LABEL_TASK = f"{GROUP}/task"
LABEL_ROLE = f"{GROUP}/role"
ANN_HASH = f"{GROUP}/spec-hash"
ANN_NODE = f"{GROUP}/planned-node"
HOSTNAME = "kubernetes.io/hostname"
SESSION_CONFIGMAP_SUFFIX = "-recovery"
SESSION_MOUNT = "/etc/backstop/recovery"
STORE_MOUNT = "/var/lib/backstop"
DATA_PORT = 7077
METRICS_PORT = 9090  # the task runtime's GET /metrics (Prometheus) and /status

# The fixed set of Event reasons the operator posts (kopf's own log events use "Logging").
EVENT_REASONS = frozenset(
    {
        "Planned",
        "InvalidSpec",
        "Infeasible",
        "NodeLost",
        "NodeDraining",
        "RecoveryPlanIssued",
        "TaskRecovered",
        "Recovered",
        "BoundViolated",
        "RestorePlanned",
        "RestoreStep",
        "BoundRestored",
        "Consolidated",
        "Reoptimized",
    }
)


@dataclass(frozen=True)
class Owner:
    """The StreamTopology that owns the objects being built."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "StreamTopology",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class TaskRole:
    """What a task pod needs to know about itself."""

    task: str
    operator: str
    index: int
    upstream: tuple[str, ...]
    keeps_backup: bool
    node: str


def pod_name(topology: str, task: str) -> str:
    """``<topology>-<operator>-<index>`` (the task id is ``<operator>-<index>``)."""
    return f"{topology}-{task}"


def replica_name(topology: str, task: str, k: int) -> str:
    """``<pod>-replica-<k>``."""
    return f"{pod_name(topology, task)}-replica-{k}"


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _operator(spec: StreamTopologySpec, name: str) -> OperatorSpec:
    return next(op for op in spec.operators if op.name == name)


def runtime_env(spec: StreamTopologySpec, op: OperatorSpec) -> list[dict[str, Any]]:
    """What the task runtime needs beyond its identity: its config, consumers, store.

    ``BACKSTOP_DOWNSTREAM`` lists the consumer operators with their groupings, so a task
    can partition its output and keep a buffer for consumers that are down.
    ``BACKSTOP_CHECKPOINT_INTERVAL`` is ``2·t_v``: the model's reprocessing latency is
    about half a checkpoint interval. The pod IP (downward API) is what a task publishes
    in the shared store's peer registry (see the README's runtime contract).
    """
    downstream = [
        {"operator": o.name, "parallelism": o.parallelism, "grouping": i.grouping.value}
        for o in spec.operators
        for i in o.inputs
        if i.operator == op.name
    ]
    return [
        {"name": "BACKSTOP_PARALLELISM", "value": str(op.parallelism)},
        {"name": "BACKSTOP_DOWNSTREAM", "value": json.dumps(downstream)},
        {"name": "BACKSTOP_CONFIG", "value": json.dumps(op.config, sort_keys=True)},
        {"name": "BACKSTOP_CHECKPOINT_INTERVAL", "value": str(2 * op.reprocessing_latency)},
        {"name": "BACKSTOP_STORE", "value": STORE_MOUNT},
        {"name": "BACKSTOP_PORT", "value": str(DATA_PORT)},
        {"name": "BACKSTOP_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "BACKSTOP_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]


def build_task_pod(
    owner: Owner,
    spec: StreamTopologySpec,
    role: TaskRole,
    *,
    replica: int | None = None,
) -> dict[str, Any]:
    """The pod of one task (or of its ``replica``-th active replica).

    The pod is pinned with a *required* node affinity on ``kubernetes.io/hostname``
    so the real scheduler binds it where the plan says, and its environment tells
    the task its id, its upstream tasks and whether it keeps an upstream backup.
    The ``spec-hash`` annotation lets the operator tell a pod whose node or role
    changed (delete and recreate) from one that is already right (leave alone).
    """
    op = _operator(spec, role.operator)
    name = (
        pod_name(owner.name, role.task)
        if replica is None
        else replica_name(owner.name, role.task, replica)
    )
    env = [
        {"name": "BACKSTOP_TOPOLOGY", "value": owner.name},
        {"name": "BACKSTOP_TASK_ID", "value": role.task},
        {"name": "BACKSTOP_OPERATOR", "value": role.operator},
        {"name": "BACKSTOP_TASK_INDEX", "value": str(role.index)},
        {"name": "BACKSTOP_UPSTREAM_TASKS", "value": ",".join(role.upstream)},
        {"name": "BACKSTOP_UPSTREAM_BACKUP", "value": "true" if role.keeps_backup else "false"},
        {"name": "BACKSTOP_ROLE", "value": "primary" if replica is None else "replica"},
        {"name": "BACKSTOP_RECOVERY_DIR", "value": SESSION_MOUNT},
        *runtime_env(spec, op),
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "nodeSelector": dict(spec.node_selector),
        "enableServiceLinks": False,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [role.node]}
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [
            {
                "name": "task",
                "image": op.image or spec.image,
                "env": env,
                "resources": {
                    "requests": {"cpu": op.resources.cpu, "memory": op.resources.memory},
                },
                "ports": [
                    {"name": "data", "containerPort": DATA_PORT},
                    {"name": "metrics", "containerPort": METRICS_PORT},
                ],
                # a task that fails to start (a config error names the field and exits 2)
                # shows the last lines of its log in the pod's status
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [
                    {"name": "recovery", "mountPath": SESSION_MOUNT},
                    {"name": "store", "mountPath": STORE_MOUNT},
                ],
            }
        ],
        "volumes": [
            {
                "name": "recovery",
                "configMap": {
                    "name": owner.name + SESSION_CONFIGMAP_SUFFIX,
                    "optional": True,
                },
            },
            {"name": "store", **(dict(spec.store) or {"emptyDir": {}})},
        ],
    }
    labels = {
        LABEL_TOPOLOGY: owner.name,
        LABEL_OPERATOR: role.operator,
        LABEL_TASK: role.task,
        LABEL_ROLE: "primary" if replica is None else "replica",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": {ANN_HASH: _hash(pod_spec), ANN_NODE: role.node},
            "ownerReferences": [owner.reference()],
        },
        "spec": pod_spec,
    }


def now_rfc3339(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_condition(
    ctype: str, ok: bool | None, reason: str, message: str, generation: int
) -> dict[str, Any]:
    """A ``metav1.Condition`` (without its transition time, set by :func:`merge_conditions`)."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def merge_conditions(
    current: Sequence[Mapping[str, Any]] | None,
    updates: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Apply condition updates, keeping ``lastTransitionTime`` when the status is unchanged."""
    stamp = now_rfc3339(now)
    by_type = {c["type"]: dict(c) for c in current or []}
    for u in updates:
        old = by_type.get(u["type"])
        new = dict(u)
        if old is not None and old.get("status") == new["status"]:
            new["lastTransitionTime"] = old.get("lastTransitionTime", stamp)
        else:
            new["lastTransitionTime"] = stamp
        by_type[u["type"]] = new
    order = ["Planned", "Placed", "BoundSatisfied", "Recovering", "Ready"]
    return sorted(
        by_type.values(),
        key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"]),
    )


def conditions_changed(
    current: Sequence[Mapping[str, Any]] | None, merged: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether merging changed anything but timestamps."""

    def key(cs: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted(
            (
                c.get("type"),
                c.get("status"),
                c.get("reason"),
                c.get("message"),
                c.get("observedGeneration"),
            )
            for c in cs or []
        )

    return key(current) != key(merged)


def merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) turning ``old`` into ``new``.

    Merge patches merge maps key by key, so keys that disappear must be sent as
    ``null`` (e.g. tasks removed from ``status.plan.assignment``).

    Examples
    --------
    >>> merge_patch({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"x": 1}})
    {'b': None, 'a': {'y': None}}
    """
    old = old or {}
    out: dict[str, Any] = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                out[key] = sub
        elif before != value or key not in old:
            out[key] = value
    return out
