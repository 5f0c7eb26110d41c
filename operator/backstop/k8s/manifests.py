"""Pure builders of the objects the operator creates: task pods, RecoveryPlans, the PDB.

Handlers call these ``build_*`` functions and pass the results to the I/O layer
(:mod:`backstop.k8s.kubeio`). Nothing here talks to the API server or reads global
configuration, so every manifest can be unit-tested and diffed. The objects beside the
pods, and their :class:`Owner`, are built in :mod:`backstop.k8s.topologyobjects` and
re-exported here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backstop.domain.constants import (
    ANN_EPOCH,
    ANN_HASH,
    ANN_NODE,
    DATA_PORT,
    LABEL_OPERATOR,
    LABEL_ROLE,
    LABEL_TASK,
    LABEL_TOPOLOGY,
    METRICS_PORT,
    POD_NAME_SEPARATOR,
    SESSION_CONFIGMAP_SUFFIX,
    SESSION_MOUNT,
    STORE_MOUNT,
)
from backstop.domain.pinning import hashed_pod_spec, pinned
from backstop.domain.podmerge import build_pod_spec, merge_templates
from backstop.domain.promotion import replica_numbers
from backstop.domain.spec import OperatorSpec, StreamTopologySpec, task_image
from backstop.domain.storespec import store_env
from backstop.k8s.topologyobjects import (
    Owner,
    build_pdb,
    build_recoveryplan,
    peers_token_env,
    recoveryplan_name,
)
from planners import TaskGraph

__all__ = [
    "CONTAINER_SECURITY",
    "POD_SECURITY",
    "Owner",
    "Shared",
    "TaskRole",
    "build_pdb",
    "build_recoveryplan",
    "build_task_pod",
    "desired_pods",
    "owned_pod_spec",
    "pod_name",
    "recoveryplan_name",
    "replica_name",
    "runtime_env",
    "task_resources",
    "task_roles",
    "template_samples",
]


@dataclass(frozen=True)
class TaskRole:
    """What a task pod needs to know about itself."""

    task: str
    operator: str
    index: int
    upstream: tuple[str, ...]
    keeps_backup: bool
    node: str
    epoch: int = 0
    """The copy's fencing epoch (:mod:`backstop.domain.fencing`); 0 for the first copy."""


def pod_name(topology: str, task: str) -> str:
    """``<topology>--<operator>-<index>`` (the task id is ``<operator>-<index>``).

    Operator names cannot contain ``--`` (the spec's pattern, enforced by the CRD), so
    the last ``--`` is where the task begins: no two (topology, task) pairs of a
    namespace share a pod name (with one ``-``, topology ``a`` + operator ``b-c`` and
    topology ``a-b`` + operator ``c`` both made ``a-b-c-0``).

    Examples
    --------
    >>> pod_name("a", "b-c-0"), pod_name("a-b", "c-0")
    ('a--b-c-0', 'a-b--c-0')
    """
    return f"{topology}{POD_NAME_SEPARATOR}{task}"


def replica_name(topology: str, task: str, k: int) -> str:
    """``<pod>--r<k>``: an operator name cannot end in ``--r<k>``, nor a task id in ``r<k>``.

    Examples
    --------
    >>> replica_name("a", "b-0", 1)
    'a--b-0--r1'
    """
    return f"{pod_name(topology, task)}{POD_NAME_SEPARATOR}r{k}"


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _operator(spec: StreamTopologySpec, name: str) -> OperatorSpec:
    return next(op for op in spec.operators if op.name == name)


POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The pod-level part of the ``restricted`` Pod Security Standard: the image must name a
numeric non-root USER (the task runtime's image runs as 65532) or the kubelet refuses it."""
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
}


def task_resources(op: OperatorSpec) -> dict[str, Any]:
    """Requests (the planners' weights) and the limits the spec sets, if any.

    Examples
    --------
    >>> op = OperatorSpec.model_validate({"name": "a", "reprocessingLatency": 1,
    ...     "resources": {"cpu": "250m", "memoryLimit": "256Mi"}})
    >>> task_resources(op)
    {'requests': {'cpu': '250m', 'memory': '128Mi'}, 'limits': {'memory': '256Mi'}}
    """
    r = op.resources
    out: dict[str, Any] = {"requests": {"cpu": r.cpu, "memory": r.memory}}
    limits = {k: v for k, v in (("cpu", r.cpu_limit), ("memory", r.memory_limit)) if v}
    if limits:
        out["limits"] = limits
    return out


def runtime_env(spec: StreamTopologySpec, op: OperatorSpec) -> list[dict[str, Any]]:
    """What the task runtime needs beyond its identity: its config, consumers, store.

    ``BACKSTOP_DOWNSTREAM`` lists the consumer operators with their groupings (by their
    names on the wire: :attr:`~backstop.domain.groupings.Grouping.wire`), so a task can
    partition its output and keep a buffer for consumers that are down.
    ``BACKSTOP_CHECKPOINT_INTERVAL`` is ``2·t_v``: the model's reprocessing latency is
    about half a checkpoint interval. The pod IP (downward API) is what a task publishes
    in the shared store's peer registry (see the README's runtime contract). The store's
    settings come from :func:`~backstop.domain.storespec.store_env` (an object store's
    credentials as ``secretKeyRef``).
    """
    downstream = [
        {"operator": o.name, "parallelism": o.parallelism, "grouping": i.grouping.wire}
        for o in spec.operators
        for i in o.inputs
        if i.operator == op.name
    ]
    return [
        {"name": "BACKSTOP_PARALLELISM", "value": str(op.parallelism)},
        {"name": "BACKSTOP_DOWNSTREAM", "value": json.dumps(downstream)},
        {"name": "BACKSTOP_CONFIG", "value": json.dumps(op.config, sort_keys=True)},
        {"name": "BACKSTOP_CHECKPOINT_INTERVAL", "value": str(2 * op.reprocessing_latency)},
        *store_env(spec.store),
        {"name": "BACKSTOP_PORT", "value": str(DATA_PORT)},
        {"name": "BACKSTOP_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "BACKSTOP_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]


Shared = dict[Hashable, Any]
"""Parts equal in many task pods, made once (:func:`desired_pods` passes one per call)."""


def _once(shared: Shared | None, key: Hashable, build: Callable[[], Any]) -> Any:
    """``build()``, or what it gave for ``key`` before in ``shared``.

    The pods of one plan share their per-operator parts (runtime env, resources, probe,
    ports, mounts, volumes, affinity per node, owner reference) instead of each holding
    equal copies: the supervisor keeps a plan's pods in its memo, where such copies would
    be most of each pod's memory. The parts are read only, like the manifests.
    """
    if shared is None:
        return build()
    try:
        return shared[key]
    except KeyError:
        value = shared[key] = build()
        return value


def _task_env(role: TaskRole, replica: int | None) -> list[dict[str, str]]:
    """Who the task is: its id, operator, index, upstream tasks, backup duty and role (a
    replica also its number: its name on the data plane is ``<task>#r<k>``)."""
    env = [
        {"name": "BACKSTOP_TASK_ID", "value": role.task},
        {"name": "BACKSTOP_OPERATOR", "value": role.operator},
        {"name": "BACKSTOP_TASK_INDEX", "value": str(role.index)},
        {"name": "BACKSTOP_UPSTREAM_TASKS", "value": ",".join(role.upstream)},
        {"name": "BACKSTOP_UPSTREAM_BACKUP", "value": "true" if role.keeps_backup else "false"},
        {"name": "BACKSTOP_ROLE", "value": "primary" if replica is None else "replica"},
        {"name": "BACKSTOP_RECOVERY_DIR", "value": SESSION_MOUNT},
    ]
    if replica is not None:
        env.append({"name": "BACKSTOP_REPLICA", "value": str(replica)})
    return env


def build_task_pod(
    owner: Owner,
    spec: StreamTopologySpec,
    role: TaskRole,
    *,
    replica: int | None = None,
    shared: Shared | None = None,
) -> dict[str, Any]:
    """The pod of one task (or of its ``replica``-th active replica).

    The pod is pinned with a *required* node affinity on the node's name (:func:`pinned`)
    so the real scheduler binds it where the plan says, and its environment tells
    the task its id, its upstream tasks and whether it keeps an upstream backup.
    The ``spec-hash`` annotation lets the operator tell a pod whose node or role
    changed (delete and recreate) from one that is already right (leave alone); it
    covers the pinned node, not the form of the pin (:func:`hashed_pod_spec`).
    ``spec.podTemplate`` and the operator's ``podTemplate`` are merged in
    (:func:`backstop.domain.podmerge.build_pod_spec`); the operator's own fields
    (:func:`owned_pod_spec`) and labels win.
    """
    op = _operator(spec, role.operator)
    name = (
        pod_name(owner.name, role.task)
        if replica is None
        else replica_name(owner.name, role.task, replica)
    )
    env = [
        *_topology_env(owner),
        *_task_env(role, replica),
        *_once(shared, ("env", op.name), lambda: runtime_env(spec, op)),
    ]
    if role.epoch:  # the first copy has none: fencing changes no first copy's spec-hash
        env.append({"name": "BACKSTOP_EPOCH", "value": str(role.epoch)})
    base = _base_pod_spec(owner, spec, op, role, env, shared)
    template = merge_templates(spec.pod_template, op.pod_template)
    # without a template the merge gives ``base`` back (``owned`` is a part of it), so it
    # is skipped: it is most of the cost of building a pod
    tspec = template.get("spec")
    pod_spec = build_pod_spec(base, tspec, owned_pod_spec(base)) if tspec else base
    labels = {
        LABEL_TOPOLOGY: owner.name,
        LABEL_OPERATOR: role.operator,
        LABEL_TASK: role.task,
        LABEL_ROLE: "primary" if replica is None else "replica",
    }
    meta = template.get("metadata") or {}
    # the template's metadata is hashed only when there is one, so a pod without template
    # metadata keeps the hash it had (no restart)
    hashed_spec = hashed_pod_spec(pod_spec, role.node)
    hashed = {"spec": hashed_spec, "metadata": meta} if meta else hashed_spec
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": {**meta.get("labels", {}), **labels},
            "annotations": {
                **meta.get("annotations", {}),
                ANN_HASH: _hash(hashed),
                ANN_NODE: role.node,
                ANN_EPOCH: str(role.epoch),
            },
            "ownerReferences": _once(shared, "owner", lambda: [owner.reference()]),
        },
        "spec": pod_spec,
    }


def owned_pod_spec(base: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's fields of a task pod: no template changes them (they win the merge).

    Placement, the restart policy, the operator's two volumes, and in the task container
    its image, ``BACKSTOP_*`` env, ports, mounts and the requests (plus the limits that
    ``operators[].resources`` sets). The security contexts, ``enableServiceLinks`` and the
    ServiceAccount settings are defaults a template may change.
    """
    task = base["containers"][0]
    resources = {k: v for k, v in task["resources"].items() if k in ("requests", "limits")}
    return {
        "restartPolicy": base["restartPolicy"],
        "nodeSelector": base["nodeSelector"],
        "affinity": base["affinity"],
        "containers": [
            {
                "name": task["name"],
                "image": task["image"],
                "env": task["env"],
                "resources": resources,
                "ports": task["ports"],
                "volumeMounts": task["volumeMounts"],
            }
        ],
        "volumes": base["volumes"],
    }


def _base_pod_spec(
    owner: Owner,
    spec: StreamTopologySpec,
    op: OperatorSpec,
    role: TaskRole,
    env: list[dict[str, Any]],
    shared: Shared | None = None,
) -> dict[str, Any]:
    """The task pod the operator makes without templates (its defaults and its fields)."""
    return {
        "restartPolicy": "Always",
        "nodeSelector": _once(shared, "nodeSelector", lambda: dict(spec.node_selector)),
        "enableServiceLinks": False,
        # the tasks talk to their peers and the store, not to the API server
        "automountServiceAccountToken": spec.automount_service_account_token,
        **({"serviceAccountName": spec.service_account_name} if spec.service_account_name else {}),
        "securityContext": POD_SECURITY,
        "affinity": _once(shared, ("affinity", role.node), lambda: pinned(role.node)),
        "containers": [
            {
                "name": "task",
                "image": task_image(op, spec),
                "env": env,
                "resources": _once(shared, ("resources", op.name), lambda: task_resources(op)),
                "securityContext": CONTAINER_SECURITY,
                "ports": _once(shared, "ports", _task_ports),
                # a task that fails to start (a config error names the field and exits 2)
                # shows the last lines of its log in the pod's status
                "terminationMessagePolicy": "FallbackToLogsOnError",
                # unready while a producer does not answer; the operator asks the task why
                # (backstop.k8s.taskprobe) and says so in the topology's Ready condition
                "readinessProbe": _once(shared, "readinessProbe", _readiness_probe),
                "volumeMounts": _once(shared, "volumeMounts", lambda: _volume_mounts(spec)),
            }
        ],
        "volumes": _once(shared, "volumes", lambda: _volumes(owner, spec)),
    }


def _topology_env(owner: Owner) -> list[dict[str, Any]]:
    """Which topology the task belongs to. The runtime keys its state in the store by
    namespace and uid too (``<store>/<namespace>/<name>/<uid>``): topologies of one name
    in two namespaces, or one deleted and created again, share no checkpoints. The
    topology's peer token (``BACKSTOP_PEERS_TOKEN``, from its Secret) is what the task
    asks of a ``PUT /peers`` (:mod:`backstop.domain.peers`)."""
    return [
        {"name": "BACKSTOP_TOPOLOGY", "value": owner.name},
        {"name": "BACKSTOP_NAMESPACE", "value": owner.namespace},
        {"name": "BACKSTOP_TOPOLOGY_UID", "value": owner.uid},
        peers_token_env(owner),
    ]


def _task_ports() -> list[dict[str, Any]]:
    return [
        {"name": "data", "containerPort": DATA_PORT},
        {"name": "metrics", "containerPort": METRICS_PORT},
    ]


def _readiness_probe() -> dict[str, Any]:
    return {
        "httpGet": {"path": "/ready", "port": "metrics"},
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 1,
    }


def _volume_mounts(spec: StreamTopologySpec) -> list[dict[str, Any]]:
    """The recovery session's ConfigMap, and the store's volume unless it is an object store."""
    mounts = [{"name": "recovery", "mountPath": SESSION_MOUNT}]
    if spec.store.volume_source() is not None:
        mounts.append({"name": "store", "mountPath": STORE_MOUNT})
    return mounts


def _volumes(owner: Owner, spec: StreamTopologySpec) -> list[dict[str, Any]]:
    """The volumes of :func:`_volume_mounts` (an unset store is an ``emptyDir``)."""
    volumes: list[dict[str, Any]] = [
        {
            "name": "recovery",
            "configMap": {"name": owner.name + SESSION_CONFIGMAP_SUFFIX, "optional": True},
        },
    ]
    source = spec.store.volume_source()
    if source is not None:
        volumes.append({"name": "store", **source})
    return volumes


def template_samples(
    owner: Owner, spec: StreamTopologySpec, *, every: bool = False
) -> dict[int, dict[str, Any]]:
    """``{operator index: the pod of its first task}`` of every operator with a pod template
    (its own or the topology's), or of every operator with ``every``, for the API server's
    dry run (:meth:`Kube.pod_rejection`).

    The models check what the operator reads of a template; the rest of a PodSpec is the API
    server's to check, and a pod it refuses would be retried forever. Placement does not
    change what it checks, so the sample is pinned to no real node.
    """
    out = {}
    for i, op in enumerate(spec.operators):
        if not every and spec.pod_template is None and op.pod_template is None:
            continue
        role = TaskRole(f"{op.name}-0", op.name, 0, (), False, "dry-run")
        out[i] = build_task_pod(owner, spec, role)
    return out


def task_roles(
    graph: TaskGraph,
    plan_backups: frozenset[str],
    assignment: Mapping[str, str],
    epochs: Mapping[str, int] | None = None,
    only: Collection[str] | None = None,
) -> list[TaskRole]:
    """The role of every placed task under a plan (failed, unplaced tasks have none);
    with ``only``, of those tasks alone (a recovery step's few failed tasks of a large
    topology, whose reservation would otherwise spend much of its CPU on every role)."""
    roles = []
    for i, task in enumerate(graph.tasks):
        if task not in assignment or (only is not None and task not in only):
            continue
        op = graph.operator[i]
        roles.append(
            TaskRole(
                task=task,
                operator=op,
                index=int(task.rsplit("-", 1)[1]),
                upstream=tuple(graph.tasks[u] for u in graph.preds[i]),
                keeps_backup=task in plan_backups,
                node=assignment[task],
                epoch=int((epochs or {}).get(task, 0)),
            )
        )
    return roles


def desired_pods(
    owner: Owner,
    spec: StreamTopologySpec,
    graph: TaskGraph,
    plan_backups: frozenset[str],
    assignment: Mapping[str, str],
    replicas: Mapping[str, Sequence[str]] | None = None,
    epochs: Mapping[str, int] | None = None,
    only: Collection[str] | None = None,
    promoted: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{pod name: manifest}`` of every primary task pod and active replica
    (``epochs``: ``status.plan.epochs``, the primaries' fencing epochs; ``promoted``:
    ``status.plan.promoted``, the tasks whose primary runs in a promoted replica's pod);
    with ``only``, of those tasks' pods alone (the same manifests, without building the
    others)."""
    out: dict[str, dict[str, Any]] = {}
    shared: Shared = {}  # the pods share their equal parts (see :func:`_once`)
    promoted = promoted or {}
    for role in task_roles(graph, plan_backups, assignment, epochs, only):
        k = promoted.get(role.task)
        pod = (
            build_task_pod(owner, spec, role, shared=shared)
            if k is None
            else _promoted_pod(owner, spec, role, k, shared)
        )
        out[pod["metadata"]["name"]] = pod
        nodes = (replicas or {}).get(role.task, ())
        for n, node in zip(replica_numbers(k, len(nodes)), nodes, strict=True):
            rep = build_task_pod(owner, spec, _replica_role(role, node), replica=n, shared=shared)
            out[rep["metadata"]["name"]] = rep
    return out


def _replica_role(role: TaskRole, node: str) -> TaskRole:
    """The role a replica pod of ``role``'s task on ``node`` is built with (no epoch)."""
    return TaskRole(role.task, role.operator, role.index, role.upstream, role.keeps_backup, node)


def _promoted_pod(
    owner: Owner, spec: StreamTopologySpec, role: TaskRole, k: int, shared: Shared
) -> dict[str, Any]:
    """The pod of a task whose primary is its promoted replica ``k``: the replica's
    manifest as it was created (same spec-hash: nothing restarts it), with the labels and
    epoch annotation of the primary it now is (patched in place,
    :mod:`backstop.domain.promotion`)."""
    pod = build_task_pod(owner, spec, _replica_role(role, role.node), replica=k, shared=shared)
    meta = pod["metadata"]
    meta["labels"] = {**meta["labels"], LABEL_ROLE: "primary"}
    meta["annotations"] = {**meta["annotations"], ANN_EPOCH: str(role.epoch)}
    return pod
