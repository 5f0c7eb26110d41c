"""Applying a re-optimized plan: automatically (``apply: auto``) or when a person approves it.

A person approves a stored ``apply: suggest`` recommendation by its id, with the annotation
:data:`~backstop.domain.constants.ANN_APPROVE` (``backstop reoptimize NAME --approve`` sets
it). The re-optimization daemon sees it on its next tick and
:func:`backstop.domain.approval.decide_approval` says whether the recommendation still fits
the topology as it is now. The outcome is kept in ``status.reoptimization.approval`` and in
the condition ``RecommendationApproved`` (``True``: applied; ``False``: refused, with the
reason), and posted as an Event.

Applying never rewrites the user's spec. :func:`apply_plan` writes the recommended plan to
``status.plan`` (the write-ahead log the reconcile resumes from when ``plan.generation``
equals the object's generation), guarded by ``resourceVersion``, then bumps the annotation
:data:`~backstop.domain.constants.ANN_APPLIED`;
:func:`backstop.controller.handlers.apply_reoptimized` reacts to that annotation by running
the ordinary reconcile, which moves only the pods whose node or role changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import context
from backstop.domain.approval import decide_approval
from backstop.domain.constants import ANN_APPLIED, GROUP, PLURAL, VERSION
from backstop.domain.spec import spec_hash
from backstop.domain.status import (
    approval_condition,
    compact_status,
    merge_conditions,
    merge_patch,
    now_rfc3339,
    plain_status,
)

__all__ = ["apply_plan", "approve_once", "record"]


def record(
    namespace: str, name: str, fields: dict[str, Any], resource_version: str | None = None
) -> None:
    """Merge-patch ``fields`` into the status (409 if ``resource_version`` is not current)."""
    body: dict[str, Any] = {"status": fields}
    if resource_version:  # optimistic lock: fail with 409 if the object changed meanwhile
        body["metadata"] = {"resourceVersion": resource_version}
    context.kube().custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, body
    )


CONFLICT_RETRIES = 5
"""How often :func:`apply_plan` re-reads the object after a 409 before it gives up.

The status of a running topology changes all the time for reasons that do not touch the
plan (task readiness, conditions, metrics of the supervisor): a conflict only means "read
again", and the plan is compared again on what is there now."""


async def apply_plan(
    namespace: str,
    name: str,
    generation: int,
    plan_before: Mapping[str, Any],
    new_plan: Mapping[str, Any],
    reoptimization: dict[str, Any],
) -> str | None:
    """Write ``new_plan`` for this generation (with ``reoptimization`` in the same patch),
    then trigger the reconcile; the reason when the topology changed meanwhile.

    The write is guarded by the ``resourceVersion`` it was computed from. A 409 is retried
    from a fresh read (up to :data:`CONFLICT_RETRIES` times): only a changed generation or a
    changed assignment refuses the plan, not another writer's unrelated status field.
    """
    k = context.kube()
    for _ in range(CONFLICT_RETRIES):
        obj = await asyncio.to_thread(
            k.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
        )
        live = dict(plain_status(obj.get("status")).get("plan") or {})
        moved = live.get("assignment") != plan_before.get("assignment")
        if obj["metadata"]["generation"] != generation or moved:
            return "the topology changed while the job ran"
        plan = {**new_plan, "generation": generation, "specHash": spec_hash(obj["spec"])}
        try:
            record(
                namespace,
                name,
                {"plan": merge_patch(_wire(live), _wire(plan)), "reoptimization": reoptimization},
                resource_version=obj["metadata"]["resourceVersion"],
            )
        except ApiException as err:
            if err.status != 409:
                raise
            continue  # another writer's status change: read again and compare the plan
        await asyncio.to_thread(
            k.custom.patch_namespaced_custom_object,
            GROUP, VERSION, namespace, PLURAL, name,
            {"metadata": {"annotations": {ANN_APPLIED: now_rfc3339()}}},
        )  # fmt: skip
        return None
    return f"the topology's status changed {CONFLICT_RETRIES} times while the plan was written"


def _wire(plan: Mapping[str, Any]) -> dict[str, Any]:
    """A plan as the status stores it (large task maps compact, ``docs/scale.md``)."""
    wire: dict[str, Any] = compact_status({"plan": plan})["plan"]
    return wire


async def approve_once(
    body: kopf.Body, approved: str, nodes: Any, logger: logging.Logger | logging.LoggerAdapter[Any]
) -> None:
    """Decide the approval of recommendation ``approved``; apply it or record the refusal."""
    meta, status = body["metadata"], plain_status(body.get("status"))
    namespace, name, generation = meta["namespace"], meta["name"], int(meta["generation"])
    state = dict(status.get("reoptimization") or {})
    ready = frozenset(n for n, i in context.node_snapshot(nodes).items() if i.ready)
    decision = decide_approval(
        approved,
        state,
        generation,
        status.get("plan"),
        recovering=bool((status.get("recovery") or {}).get("active")),
        ready_nodes=ready,
    )
    if decision.action in ("none", "wait"):
        return
    if decision.action == "apply" and (body.get("spec") or {}).get("replication"):
        decision = type(decision)("refuse", "ReplicationUnsupported", "the recommended plan "
                                  "has no replicas; spec.replication is set")  # fmt: skip
    approval = {"id": approved, "at": now_rfc3339(), "reason": decision.reason,
                "message": decision.message}  # fmt: skip
    if decision.action == "apply":
        approval["result"] = "Applied"
        rec = state["recommendation"]
        applied = {**state, "result": "Applied", "applied": True, "approval": approval}
        stale = await apply_plan(namespace, name, generation, status.get("plan") or {},
                                 rec["plan"], applied)  # fmt: skip
        if stale is None:
            _conclude(body, namespace, name, generation, approval, status, logger)
            return
        approval.update(reason="PlanChanged", message=stale)
    approval["result"] = "Refused"
    record(namespace, name, {"reoptimization": {"approval": approval}})
    _conclude(body, namespace, name, generation, approval, status, logger)


def _conclude(
    body: kopf.Body,
    namespace: str,
    name: str,
    generation: int,
    approval: Mapping[str, Any],
    status: Mapping[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    """The condition and the Event of a decided approval."""
    cond = approval_condition(approval, generation)
    record(namespace, name, {"conditions": merge_conditions(status.get("conditions"), [cond])})
    refused = approval["result"] != "Applied"
    logger.info("recommendation %s %s: %s", approval["id"], approval["result"], cond["message"])
    context.post_event(body, "Reoptimized", cond["message"], warning=refused)
