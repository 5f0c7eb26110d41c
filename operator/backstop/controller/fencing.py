"""Publishing fencing epochs (:mod:`backstop.domain.fencing`): status first, then the
session ConfigMap, then (by the caller) the pods, so a restarted operator never hands out
an epoch twice and no new copy exists before its epoch is published."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backstop.controller import faults
from backstop.domain.fencing import bump_epochs
from backstop.domain.status import PlanStatus, compact_value
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner
from backstop.k8s.sessionmap import build_session_configmap
from planners import TaskGraph


def publish_epochs(
    kube: Kube,
    owner: Owner,
    graph: TaskGraph,
    plan: PlanStatus,
    recovery: Mapping[str, Any],
    tasks: set[str],
) -> tuple[PlanStatus, dict[str, Any]]:
    """Give ``tasks`` (about to be recreated off a lost node) a new epoch: recorded in the
    status, then published in the session ConfigMap, before any pod is touched.

    Returns the plan with its new ``epochs`` and the topology object as written.
    """
    epochs = bump_epochs(plan.epochs, sorted(tasks))
    patch = {"plan": {"epochs": compact_value(epochs)}}  # as status_patch would write it
    obj = kube.patch_status_returning(owner.namespace, owner.name, patch)
    faults.point("after-status")
    backups = plan.backups
    kube.put_configmap(build_session_configmap(owner, graph, backups, recovery, epochs=epochs))
    faults.point("after-configmap")
    return plan.model_copy(update={"epochs": epochs}), obj
