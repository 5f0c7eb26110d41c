"""Periodic re-optimization: run the Spark job, record, maybe apply.

:mod:`backstop.controller.handlers` lists :func:`reoptimizer` among each topology's
workers (:mod:`backstop.controller.workers`): one loop per topology, never two at once,
which gives "one run at a time per topology" (a CronJob's ``concurrencyPolicy: Forbid``)
for free, and an approval (:mod:`backstop.controller.approve`) is decided between runs,
never during one. Where the job runs, a child process of the operator (``mode:
local``) or a Kubernetes Job (``mode: job``), is :mod:`backstop.controller.reoptrun`'s.

Applying a plan never rewrites the user's spec. The recommended plan is
written to ``status.plan`` (the write-ahead log the reconcile handler resumes
from when ``plan.generation`` equals the object's generation), then the
annotation :data:`ANN_APPLIED` is bumped;
:func:`backstop.controller.handlers.apply_reoptimized` reacts to
that annotation by running the ordinary reconcile, which moves only the pods
whose node or role changed. Hysteresis: a plan is applied only when it gains
at least ``minImprovement`` (:func:`backstop.domain.recommend.should_apply`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import approve, context, reoptrun
from backstop.controller import settings as config
from backstop.controller.workers import Stopped
from backstop.domain import metricspath
from backstop.domain.approval import plan_fingerprint, recommendation_id
from backstop.domain.constants import ANN_APPROVE, GROUP, VERSION
from backstop.domain.recommend import should_apply
from backstop.domain.spec import (
    ApplyMode,
    ReoptimizationPolicy,
    StreamTopologySpec,
)
from backstop.domain.status import now_rfc3339, plain_status
from backstop.domain.storespec import StoreSpec
from planners import InvalidTopology

log = logging.getLogger("backstop.reoptimize")


def _seconds_since(stamp: str | None) -> float:
    if not stamp:
        return float("inf")
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


def due(policy: ReoptimizationPolicy, state: dict[str, Any]) -> str | None:
    """Why a run is due now (``"nonce"``, ``"interval"``), or ``None``.

    Examples
    --------
    >>> p = ReoptimizationPolicy(nonce="a")
    >>> due(p, {}), due(p, {"nonce": "a", "lastRun": now_rfc3339()})
    ('nonce', None)
    """
    if policy.nonce is not None and policy.nonce != state.get("nonce"):
        return "nonce"
    if _seconds_since(state.get("lastRun")) >= policy.interval_seconds:
        return "interval"
    return None


def summarize(rec: dict[str, Any]) -> dict[str, Any]:
    """The part of a recommendation kept in ``status.reoptimization.recommendation``."""
    if rec.get("result") != "Recommended":
        return {}
    plan, cur, sim = rec["plan"], rec["current"], rec.get("simulation") or {}
    keep = ("nodesUsed", "backupCount", "worstRecoveryLatency", "boundSatisfied")
    out: dict[str, Any] = {
        **{k: plan[k] for k in keep},
        "moved": plan.get("moved", 0),
        "improvement": rec["improvement"],
        "reason": rec["reason"],
        "current": {k: cur[k] for k in keep},
        "operators": [
            {
                k: round(v, 6) if isinstance(v, float) else v
                for k, v in op.items()
                if k
                in (
                    "operator",
                    "measured",
                    "latency",
                    "specLatency",
                    "cpu",
                    "specCpu",
                    "mtbfSeconds",
                    "recommendedCheckpointInterval",
                )
            }
            for op in rec["operators"]
        ],
        "assignment": plan["assignment"],
        "backups": plan["backups"],
    }
    if sim.get("plan"):
        out["simulation"] = {
            k: sim["plan"][k] for k in ("availability", "boundProbability", "p95", "p99")
        }
    return out


async def reoptimizer(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    stopped: Stopped,
    **kwargs: Any,
) -> None:
    """Check every few seconds for an approval to apply, then whether a run is due (one
    worker per topology, so runs and approvals never overlap).

    A loop rather than a timer: Kopf logs, and so posts an Event for, every timer
    invocation; the loop is quiet until it has something to say. ``body``, ``spec`` and
    ``status`` are live views that each event of the topology refreshes.
    """
    while not stopped and not context.gone(kwargs["topologies"], namespace, name, meta["uid"]):
        try:
            approved = (meta.get("annotations") or {}).get(ANN_APPROVE)
            if approved:
                await approve.approve_once(body, approved, kwargs["node_index"], logger)
            await reoptimize_once(body, spec, meta, status, name, namespace, logger)
        except ApiException as err:
            if err.status == 404:
                return
            logger.warning("re-optimization: API error %s; retrying", err.reason)
        await asyncio.sleep(config.settings().reopt_tick_seconds)


def _due_now(
    spec: kopf.Spec, status: kopf.Status, generation: int
) -> tuple[StreamTopologySpec, str] | None:
    """The parsed spec and why a run is due now, or ``None``: no policy, an invalid spec
    (the reconcile reports it), not due, this generation not planned yet, or a recovery
    running (never re-plan during one)."""
    if not spec.get("reoptimization"):
        return None
    try:
        model = config.parse_spec(dict(spec))
    except InvalidTopology:
        return None
    assert model.reoptimization is not None
    reason = due(model.reoptimization, dict(status.get("reoptimization") or {}))
    plan = status.get("plan") or {}
    if reason is None or plan.get("generation") != generation or status.get("problem"):
        return None
    if (status.get("recovery") or {}).get("active"):
        return None
    return model, reason


async def _run(
    namespace: str,
    name: str,
    manifest: dict[str, Any],
    nodes: list[dict[str, Any]],
    plan: dict[str, Any],
    metrics: str,
    running: dict[str, Any],
    store: StoreSpec,
) -> dict[str, Any]:
    """Run the job where the operator's ``reoptimization.mode`` says, recording its phases."""

    async def progress(phase: str, fields: Mapping[str, Any]) -> None:
        running.update(phase=phase, **fields)
        await asyncio.to_thread(approve.record, namespace, name, {"reoptimization": running})

    if config.settings().reopt_mode == "job":
        return await reoptrun.run_in_job(manifest, nodes, plan, metrics, progress, store)
    with tempfile.TemporaryDirectory(prefix="backstop-reopt-") as tmp:
        return await reoptrun.run_local(manifest, nodes, plan, metrics, Path(tmp), progress, store)


async def reoptimize_once(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    """Run the re-optimization job when due, record the result, apply it with ``apply: auto``."""
    assert namespace is not None
    generation = int(meta.get("generation", 1))
    found = _due_now(spec, status, generation)
    if found is None:
        return
    model, reason = found
    policy = model.reoptimization
    assert policy is not None
    state = {k: v for k, v in dict(status.get("reoptimization") or {}).items()
             if k not in ("phase", "job")}  # fmt: skip
    plan = dict(plain_status(status).get("plan") or {})
    base = {"lastRun": now_rfc3339(), "nonce": policy.nonce, "generation": generation,
            "trigger": reason, "applied": False, "phase": None, "job": None}  # fmt: skip
    skipped = _skipped(policy, model.store)
    if skipped is not None:
        approve.record(namespace, name, {"reoptimization": {**base, **skipped}})
        return
    path = metricspath.effective(policy.metrics_path, model.store)
    assert path is not None
    k = context.kube()
    view = await asyncio.to_thread(k.view, namespace, name, model.topology_key, model.node_selector)
    nodes = [{"name": n.name, "cpu": n.cpu, "domain": n.domain} for n in view.nodes]
    meta_ = {"name": name, "namespace": namespace, "generation": generation}
    resolved = {**spec, "recovery": model.recovery.model_dump(by_alias=True, mode="json")}
    manifest = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamTopology", "metadata": meta_,
                "spec": resolved}  # fmt: skip
    running = {**state, "running": True, "startedAt": base["lastRun"], "nonce": policy.nonce,
               "phase": "Starting", "message": f"a run ({reason}) is starting"}  # fmt: skip
    approve.record(namespace, name, {"reoptimization": running})
    started = datetime.now(UTC)
    try:
        metrics = metrics_dir(path, namespace, name, str(meta.get("uid", "")))
        rec = await _run(namespace, name, manifest, nodes, plan, metrics, running, model.store)
    except RuntimeError as err:
        logger.warning("re-optimization failed: %s", err)
        approve.record(namespace, name, {"reoptimization": {**base, "running": None,
                       "result": "Failed", "message": str(err)}})  # fmt: skip
        return
    took = round((datetime.now(UTC) - started).total_seconds(), 1)
    result = {**base, "running": None, "durationSeconds": took, "result": rec["result"],
              "message": rec.get("message", ""), "improvement": rec.get("improvement"),
              "recommendation": _stored(rec, plan, str(base["lastRun"]))}  # fmt: skip
    await _conclude(body, namespace, name, generation, plan, model, policy, rec, result)


def metrics_dir(path: str, namespace: str, name: str, uid: str) -> str:
    """``spec.reoptimization.metricsPath`` (a directory or ``s3://`` prefix) with
    ``{namespace}``, ``{name}`` and ``{uid}`` replaced by the topology's own: the task
    runtime keeps its metrics under ``<store>/<namespace>/<name>/<uid>/metrics``, and a uid
    is known only once the topology exists (:func:`backstop.domain.metricspath.fill`).

    >>> metrics_dir("/var/lib/backstop/{namespace}/{name}/{uid}/metrics", "ns", "wc", "u1")
    '/var/lib/backstop/ns/wc/u1/metrics'
    """
    return metricspath.fill(path, namespace, name, uid)


def _skipped(policy: ReoptimizationPolicy, store: StoreSpec) -> dict[str, Any] | None:
    """What to record instead of a run: re-optimization disabled, or no metrics to read
    (no metricsPath, and a volume store, whose mount in the job is the operator's)."""
    if not config.settings().reopt_enabled:
        return {"result": "Disabled", "message": "re-optimization is disabled in this "
                "operator (BACKSTOP_REOPTIMIZE=false, reoptimization.enabled)"}  # fmt: skip
    if not metricspath.effective(policy.metrics_path, store):
        return {"result": "NoMetrics", "message": "spec.reoptimization.metricsPath is not "
                "set (only an objectStore store has a default)"}  # fmt: skip
    return None


def _stored(rec: Mapping[str, Any], plan: Mapping[str, Any], last_run: str) -> dict[str, Any]:
    """The recommendation kept in the status, with the id a person approves it by, the
    fingerprint of the plan it was compared against, and the whole recommended plan."""
    out = summarize(dict(rec))
    if out:
        base = plan_fingerprint(plan)
        out.update(id=recommendation_id(rec["plan"], base, last_run), base=base,
                   plan=rec["plan"])  # fmt: skip
    return out


async def _conclude(
    body: kopf.Body,
    namespace: str,
    name: str,
    generation: int,
    plan: dict[str, Any],
    model: StreamTopologySpec,
    policy: ReoptimizationPolicy,
    rec: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Record what the run found; apply it now when the policy says so."""
    if rec["result"] != "Recommended":
        approve.record(namespace, name, {"reoptimization": result})
        return
    settled = _settle(model, policy, rec, result)
    if settled is None:
        applied = {**result, "result": "Applied", "applied": True}
        stale = await approve.apply_plan(namespace, name, generation, plan, rec["plan"], applied)
        if stale:
            result.update(result="Stale", message=stale)
            approve.record(namespace, name, {"reoptimization": result})
            return
        context.post_event(body, "Reoptimized", f"applied: {rec['message']}")
        return
    approve.record(namespace, name, {"reoptimization": settled})
    hint = ""
    if settled["result"] == "Suggested":
        hint = f"; approve with backstop reoptimize {name} --approve"
    context.post_event(body, "Reoptimized", f"{settled['result']}: {rec['message']}{hint}")


def _settle(
    model: StreamTopologySpec,
    policy: ReoptimizationPolicy,
    rec: Mapping[str, Any],
    result: dict[str, Any],
) -> dict[str, Any] | None:
    """What to record for a recommendation the job made; ``None`` when it is to be
    applied now (``apply: auto``, no replication, and a gain over ``minImprovement``)."""
    gain = float(rec["improvement"])
    if policy.apply is ApplyMode.suggest:
        return {**result, "result": "Suggested"}
    if model.replication is not None:
        return {**result, "result": "Suggested", "message": "apply: auto does not support "
                "replication yet; " + result["message"]}  # fmt: skip
    if not should_apply(gain, policy.min_improvement):
        return {**result, "result": "BelowThreshold", "message": f"gain {gain:.3f} < "
                f"minImprovement {policy.min_improvement:g}: kept the current plan"}  # fmt: skip
    return None
