"""The objects a StreamTopology owns beside its pods, and the owner they all name.

:class:`Owner` gives every object the operator creates for a topology (pods, ConfigMaps,
RecoveryPlans, the PodDisruptionBudget, the peer token's Secret) the ownerReference that
lets Kubernetes' garbage collector delete them with the topology. The builders here are
pure, like those of :mod:`backstop.k8s.manifests`, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backstop.domain.constants import (
    GROUP,
    LABEL_TOPOLOGY,
    PEERS_SECRET_SUFFIX,
    PEERS_TOKEN_KEY,
    VERSION,
)

__all__ = [
    "Owner",
    "build_pdb",
    "build_peers_secret",
    "build_recoveryplan",
    "peers_secret_name",
    "peers_token_env",
    "recoveryplan_name",
]


@dataclass(frozen=True)
class Owner:
    """The StreamTopology that owns the objects being built."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """The ownerReference to this topology (its controller: deleted with it)."""
        return {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "StreamTopology",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def recoveryplan_name(topology: str, session: str, step: int) -> str:
    """``<topology>-<session>-<step>``: one RecoveryPlan per step of a session."""
    return f"{topology}-{session}-{step}"


def build_recoveryplan(
    owner: Owner,
    *,
    session: str,
    step_no: int,
    trigger: str,
    lost: Iterable[str],
    step: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``RecoveryPlan`` object of one step (``step`` as recorded in the status)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RecoveryPlan",
        "metadata": {
            "name": recoveryplan_name(owner.name, session, step_no),
            "namespace": owner.namespace,
            "labels": {f"{GROUP}/topology": owner.name, f"{GROUP}/session": session},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "topology": owner.name,
            "session": session,
            "step": step_no,
            "trigger": trigger,
            "algorithm": step["algorithm"],
            "lostNodes": sorted(lost),
            "assignments": [{"task": t, "node": n} for t, n in step["recover"].items()],
            "pending": list(step["pending"]),
            "recoveredQueries": list(step["recoveredQueries"]),
            "recoveredPriority": step["recoveredPriority"],
            "failedPriority": step["failedPriority"],
        },
    }


def build_pdb(owner: Owner, pods: int) -> dict[str, Any]:
    """The topology's PodDisruptionBudget: no voluntary eviction of a running task pod.

    ``minAvailable`` is every task pod, so the eviction API (``kubectl drain``, a
    cluster autoscaler) refuses to evict a Running one; the operator moves the tasks
    off a cordoned node itself, a few at a time with the bound kept
    (:func:`backstop.controller.drain.drain_tick`), and the drain completes as
    their old pods go. Pending, terminating and ended pods are evictable anyway (the
    API server ignores budgets for them). An integer ``minAvailable`` needs no scale
    subresource on the owner. The ``apiVersion`` is chosen by
    :meth:`backstop.k8s.kubeio.Kube.put_pdb` (``policy/v1``, else ``v1beta1``).

    >>> pdb = build_pdb(Owner("t", "ns", "u1"), 9)
    >>> pdb["spec"]
    {'minAvailable': 9, 'selector': {'matchLabels': {'streams.backstop.dev/topology': 't'}}}
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": owner.name,
            "namespace": owner.namespace,
            "labels": {LABEL_TOPOLOGY: owner.name},
            "ownerReferences": [owner.reference()],
        },
        "spec": {"minAvailable": pods, "selector": {"matchLabels": {LABEL_TOPOLOGY: owner.name}}},
    }


def peers_secret_name(topology: str) -> str:
    """``<topology>-peers``: the Secret of the token that guards the tasks' ``PUT /peers``.

    >>> peers_secret_name("wc")
    'wc-peers'
    """
    return topology + PEERS_SECRET_SUFFIX


def build_peers_secret(owner: Owner, token: str) -> dict[str, Any]:
    """The Secret of the topology's peer token: the operator sends it with every
    ``PUT /peers`` and the task pods read it as ``BACKSTOP_PEERS_TOKEN``
    (:func:`peers_token_env`), so nothing else in the cluster can redirect a task's
    input. Deleted with the topology.

    >>> s = build_peers_secret(Owner("wc", "ns", "u1"), "abc")
    >>> s["metadata"]["name"], s["stringData"], s["type"]
    ('wc-peers', {'token': 'abc'}, 'Opaque')
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": peers_secret_name(owner.name),
            "namespace": owner.namespace,
            "labels": {LABEL_TOPOLOGY: owner.name},
            "ownerReferences": [owner.reference()],
        },
        "stringData": {PEERS_TOKEN_KEY: token},
    }


def peers_token_env(owner: Owner) -> dict[str, Any]:
    """The task container's ``BACKSTOP_PEERS_TOKEN``, from the topology's Secret.

    >>> peers_token_env(Owner("wc", "ns", "u1"))["valueFrom"]
    {'secretKeyRef': {'name': 'wc-peers', 'key': 'token'}}
    """
    ref = {"name": peers_secret_name(owner.name), "key": PEERS_TOKEN_KEY}
    return {"name": "BACKSTOP_PEERS_TOKEN", "valueFrom": {"secretKeyRef": ref}}
