"""What the operator keeps of each task pod it watches: the fields its readers read.

Kopf's pod index (``pods_by_topology``) holds every task pod of the cluster. A pod as the
API server sends it carries its whole spec (env, probes, volumes, affinity),
``managedFields`` and the image IDs of its status: kilobytes of JSON, and several times
that as parsed Python objects, so an index of 10k whole pods would take hundreds of
megabytes. The operator reads a small part of it: :func:`slim_pod` keeps that part, in the pod's own
shape, so every reader (:mod:`backstop.domain.podfaults`, :mod:`backstop.k8s.taskprobe`,
the tick, the pod diff, fencing and the rollout) reads it as it would read the pod, in
place: the records are the index's, shared, and no reader changes them. What is kept,
and who reads it:

* ``metadata``: ``name``, ``namespace``, ``resourceVersion`` (the probe cache),
  ``deletionTimestamp``; the labels and annotations of this operator's own domain
  (topology, operator, task, role; spec-hash, planned node, epoch);
* ``spec``: ``nodeName``; per container its ``name``, resource requests (capacity), its
  ``metrics`` port (the readiness probe's question to the task, the peer map's push) and
  ``data`` port (the peer map's addresses, :mod:`backstop.domain.peers`) and of its ``env`` only
  ``BACKSTOP_UPSTREAM_BACKUP`` (the backup flag a rollout starts from); init containers'
  requests and the pod's ``overhead`` (capacity);
* ``status``: ``phase``, ``reason``, ``message``, ``podIP`` (probes, the peer map), the
  ``PodScheduled`` condition (unschedulable pods), and per container ``name``, ``ready``,
  ``restartCount``, ``state`` and ``lastState`` (failures, checkpoint reports, a restarted
  task to push its peer map to again).

Strings repeated across pods (label and annotation keys and values, node names, phases)
are interned, so 10k pods share one copy of each.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from backstop.domain.constants import GROUP

KEPT_ENV = frozenset({"BACKSTOP_UPSTREAM_BACKUP"})
"""Environment variables of a task container that a reader looks at."""
KEPT_CONDITIONS = frozenset({"PodScheduled"})
"""Pod conditions that a reader looks at (a pod the scheduler finds no node for)."""
KEPT_PORTS = frozenset({"metrics", "data"})
"""Container ports that a reader looks at (the task's readiness reason and peer map: the
``metrics`` port; the peer map's addresses: the ``data`` port)."""
_META = ("name", "namespace", "resourceVersion", "deletionTimestamp")
_STATUS = ("phase", "reason", "message", "podIP")
_CONTAINER_STATUS = ("name", "ready", "restartCount", "state", "lastState")
_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")


def _own(values: Mapping[str, Any] | None) -> dict[str, str]:
    """The entries of this operator's domain (``streams.backstop.dev/...``), interned."""
    return {
        sys.intern(k): sys.intern(v) if isinstance(v, str) else v
        for k, v in (values or {}).items()
        if k.startswith(GROUP + "/")
    }


def _pick(src: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: src[k] for k in keys if src.get(k) is not None}


def _container(c: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.get("name")}
    requests = (c.get("resources") or {}).get("requests")
    if requests:
        out["resources"] = {"requests": {sys.intern(k): v for k, v in requests.items()}}
    ports = [_pick(p, ("name", "containerPort")) for p in c.get("ports") or []]
    ports = [p for p in ports if p.get("name") in KEPT_PORTS]
    if ports:
        out["ports"] = ports
    env = [_pick(e, ("name", "value")) for e in c.get("env") or [] if e.get("name") in KEPT_ENV]
    if env:
        out["env"] = env
    return out


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``body`` (a pod as the API sends it) that the operator reads.

    Examples
    --------
    >>> pod = {"metadata": {"name": "t-0", "namespace": "ns", "managedFields": [{}],
    ...     "labels": {"app": "x", "streams.backstop.dev/task": "t-0"},
    ...     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
    ...     "spec": {"nodeName": "n1", "volumes": [{"name": "v"}], "containers": [
    ...         {"name": "task", "image": "i", "env": [{"name": "A", "value": "1"}],
    ...          "resources": {"requests": {"cpu": "100m"}}}]},
    ...     "status": {"phase": "Running", "qosClass": "Burstable"}}
    >>> slim = slim_pod(pod)
    >>> slim["metadata"]
    {'name': 't-0', 'namespace': 'ns', 'labels': {'streams.backstop.dev/task': 't-0'}}
    >>> slim["spec"]
    {'nodeName': 'n1', 'containers': [{'name': 'task', 'resources': {'requests': {'cpu': '100m'}}}]}
    >>> slim["status"]
    {'phase': 'Running'}
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    out_meta = _pick(meta, _META)
    for key in ("labels", "annotations"):
        own = _own(meta.get(key))
        if own:
            out_meta[key] = own
    out_spec: dict[str, Any] = {}
    if spec.get("nodeName"):
        out_spec["nodeName"] = sys.intern(spec["nodeName"])
    if spec.get("containers"):
        out_spec["containers"] = [_container(c) for c in spec["containers"]]
    if spec.get("initContainers"):
        out_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    if spec.get("overhead"):
        out_spec["overhead"] = dict(spec["overhead"])
    out_status = _pick(status, _STATUS)
    if "phase" in out_status:
        out_status["phase"] = sys.intern(out_status["phase"])
    conditions = [
        _pick(c, _CONDITION)
        for c in status.get("conditions") or []
        if c.get("type") in KEPT_CONDITIONS
    ]
    if conditions:
        out_status["conditions"] = conditions
    if status.get("containerStatuses"):
        out_status["containerStatuses"] = [
            {k: v for k, v in _pick(cs, _CONTAINER_STATUS).items() if v != {}}
            for cs in status["containerStatuses"]
        ]
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}
