"""What the reconcile checks of a valid spec beyond its model: the API server's dry run of
the task pods, and the Warning Events a spec that works but says something it should not
earns.

A pod the API server refuses would be retried forever once the plan is recorded, so it is
refused first, as an invalid spec naming the field (:func:`check_templates`). The models
check what the operator reads of a pod; the rest (a pod template's PodSpec, the store's
Secret reference, a ServiceAccount the namespace's admission refuses) is the API server's
to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backstop.domain.admission import unknown_fields
from backstop.domain.constants import EventReason
from backstop.domain.groupings import grouping_warnings
from backstop.domain.spec import StreamTopologySpec
from backstop.domain.status import PlanStatus
from backstop.domain.wiring import rewired
from backstop.k8s.kubeio import Kube
from backstop.k8s.manifests import Owner, template_samples
from backstop.k8s.specstore import plan_spec
from planners import InvalidTopology


def check_templates(k: Kube, owner: Owner, model: StreamTopologySpec, *, every: bool) -> None:
    """Raise :class:`~planners.InvalidTopology` naming the field when the API server refuses
    an operator's first task pod in a server-side dry run.

    ``every``: a spec no plan was made from yet (the first, or an edit) has one pod of every
    operator tried before any pod is created; a spec already planned has only the operators
    with a pod template tried again (the cheap part of a resume: its pods exist). A refusal
    of the namespace itself (403: Pod Security admission, a quota, a missing ServiceAccount)
    is raised as :class:`~backstop.k8s.apierrors.PodRefused`, which the reconcile records.
    """
    for i, pod in template_samples(owner, model, every=every).items():
        why = k.pod_rejection(owner.namespace, pod)
        if why is not None:
            op = model.operators[i].pod_template
            where = f"spec.operators[{i}].podTemplate" if op else "spec.podTemplate"
            if op and model.pod_template:
                where += " (merged with spec.podTemplate)"
            elif not op and not model.pod_template:
                where = f"spec.operators[{i}]"
            raise InvalidTopology(f"{where}: the API server refuses the task pod: {why}")


def spec_warnings(
    meta: Mapping[str, Any], model: StreamTopologySpec
) -> list[tuple[EventReason, str]]:
    """``(reason, message)`` of each Warning Event a valid spec earns: the fields of the last
    ``kubectl apply`` the API server pruned, and the inputs whose grouping is named
    ``shuffle`` (one Event naming the first: :func:`~backstop.domain.groupings.grouping_warnings`),
    which a topology stored before any webhook warned about shows here too."""
    out: list[tuple[EventReason, str]] = []
    dropped = unknown_fields(meta.get("annotations") or {})
    if dropped:
        out.append(
            (
                "UnknownFields",
                "the API server dropped fields the schema does not know: " + ", ".join(dropped),
            )
        )
    named = grouping_warnings([i.grouping for i in op.inputs] for op in model.operators)
    if named:
        more = f" ({len(named) - 1} more inputs name shuffle)" if len(named) > 1 else ""
        out.append(("DeprecatedGrouping", named[0] + more))
    return out


def check_wiring(k: Kube, owner: Owner, model: StreamTopologySpec, plan: PlanStatus) -> None:
    """Raise :class:`~planners.InvalidTopology` naming the field when ``model`` changes the
    data plane's wiring of the spec ``plan`` runs (:func:`backstop.domain.wiring.rewired`):
    its pods go on with that spec. A plan whose spec cannot be read or parsed any more is
    not compared (the edit is planned as before)."""
    if plan.assignment is None:
        return  # nothing ran yet: any spec starts from empty state
    old = plan_spec(k, owner, plan)
    problem = None if old is None else rewired(old, model)
    if problem is not None:
        raise InvalidTopology(problem)
