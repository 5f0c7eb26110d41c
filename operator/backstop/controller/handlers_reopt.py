"""Kopf handlers for periodic re-optimization: run the Spark job, record, maybe apply.

Why a timer plus a subprocess: Kopf never overlaps a timer with itself for one
object, which gives "one run at a time per topology" (a CronJob's
``concurrencyPolicy: Forbid``) for free. The job runs as ``python -m
backstop.jobs.reoptimize`` in a child process, not in a SparkSession inside the
operator: the JVM (hundreds of MB) lives only while a job runs, a Spark crash
or out-of-memory cannot take the operator down, a cancelled handler kills the
child, and Spark's process-wide session never has to be shared between the
timers of several topologies. JVM start-up (about 10 s) is small next to an
interval of an hour.

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
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import context
from backstop.controller import settings as config
from backstop.domain.conditions import merge_patch, now_rfc3339
from backstop.domain.constants import ANN_APPLIED, GROUP, PLURAL, VERSION
from backstop.domain.recommend import should_apply
from backstop.domain.spec import (
    ApplyMode,
    ReoptimizationPolicy,
    StreamTopologySpec,
    spec_hash,
)
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


async def run_job(
    manifest: dict[str, Any],
    nodes: list[dict[str, Any]],
    current: dict[str, Any] | None,
    metrics: str,
    workdir: Path,
) -> dict[str, Any]:
    """Run ``python -m backstop.jobs.reoptimize`` for one topology; its recommendation.

    Raises
    ------
    RuntimeError
        When the job fails or times out (the message is its last error line).
    """
    cfg = config.settings()
    master, timeout, time_limit = cfg.spark_master, cfg.reopt_timeout_seconds, cfg.reopt_time_limit
    name = manifest["metadata"]["name"]
    (workdir / "topology.json").write_text(json.dumps(manifest))
    (workdir / "nodes.json").write_text(json.dumps({name: nodes}))
    (workdir / "current.json").write_text(json.dumps({name: current} if current else {}))
    args = [
        sys.executable, "-m", "backstop.jobs.reoptimize",
        "--metrics", metrics,
        "--topologies", str(workdir / "topology.json"),
        "--nodes-json", str(workdir / "nodes.json"),
        "--current", str(workdir / "current.json"),
        "--out", str(workdir / "out"),
        "--master", master,
        "--time-limit", str(time_limit),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"the job did not finish within {timeout:g}s") from None
    if proc.returncode != 0:
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error:")] or lines[-1:]
        raise RuntimeError(f"the job failed ({proc.returncode}): {' '.join(errors)[:400]}")
    recs = [json.loads(ln) for ln in (workdir / "out" / "recommendations.jsonl").open()]
    return dict(recs[0])


def _record(
    namespace: str, name: str, fields: dict[str, Any], resource_version: str | None = None
) -> None:
    body: dict[str, Any] = {"status": fields}
    if resource_version:  # optimistic lock: fail with 409 if the object changed meanwhile
        body["metadata"] = {"resourceVersion": resource_version}
    context.kube().custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, body
    )


@kopf.daemon(GROUP, VERSION, PLURAL, initial_delay=2.0, cancellation_timeout=10.0)
async def reoptimizer(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """Check every few seconds whether a run is due (one daemon, so runs never overlap).

    A daemon rather than a timer: Kopf logs, and so posts an Event for, every
    timer invocation; the daemon is quiet until it has something to say.
    ``body``, ``spec`` and ``status`` are live views Kopf keeps up to date.
    """
    while not stopped and not context.gone(kwargs["topologies"], namespace, name, meta["uid"]):
        try:
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
    state = dict(status.get("reoptimization") or {})
    plan = dict(status.get("plan") or {})
    base = {"lastRun": now_rfc3339(), "nonce": policy.nonce, "generation": generation,
            "trigger": reason, "applied": False}  # fmt: skip
    if not policy.metrics_path:
        _record(namespace, name, {"reoptimization": {**base, "result": "NoMetrics",
                "message": "spec.reoptimization.metricsPath is not set"}})  # fmt: skip
        return
    k = context.kube()
    view = await asyncio.to_thread(k.view, namespace, name, model.topology_key, model.node_selector)
    nodes = [{"name": n.name, "cpu": n.cpu, "domain": n.domain} for n in view.nodes]
    meta_ = {"name": name, "namespace": namespace, "generation": generation}
    resolved = {**spec, "recovery": model.recovery.model_dump(by_alias=True, mode="json")}
    manifest = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamTopology", "metadata": meta_,
                "spec": resolved}  # fmt: skip
    _record(namespace, name, {"reoptimization": {**state, "running": True,
                                                 "startedAt": base["lastRun"]}})  # fmt: skip
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="backstop-reopt-") as tmp:
        try:
            rec = await run_job(manifest, nodes, plan, policy.metrics_path, Path(tmp))
        except RuntimeError as err:
            logger.warning("re-optimization failed: %s", err)
            _record(namespace, name, {"reoptimization": {**base, "running": None,
                    "result": "Failed", "message": str(err)}})  # fmt: skip
            return
    took = round((datetime.now(UTC) - started).total_seconds(), 1)
    result = {**base, "running": None, "durationSeconds": took, "result": rec["result"],
              "message": rec.get("message", ""), "improvement": rec.get("improvement"),
              "recommendation": summarize(rec)}  # fmt: skip
    if rec["result"] != "Recommended":
        _record(namespace, name, {"reoptimization": result})
        return
    settled = _settle(model, policy, rec, result)
    if settled is None:
        await _apply(body, namespace, name, generation, plan, rec, result)
        return
    _record(namespace, name, {"reoptimization": settled})
    context.post_event(body, "Reoptimized", f"{settled['result']}: {rec['message']}")


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


async def _apply(
    body: kopf.Body,
    namespace: str,
    name: str,
    generation: int,
    plan_before: dict[str, Any],
    rec: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Write the new plan (write-ahead) for this generation, then trigger the reconcile."""
    k = context.kube()
    obj = await asyncio.to_thread(
        k.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
    )
    live = dict((obj.get("status") or {}).get("plan") or {})
    if obj["metadata"]["generation"] != generation or live.get("assignment") != plan_before.get(
        "assignment"
    ):
        result.update(result="Stale", message="the topology changed while the job ran")
        _record(namespace, name, {"reoptimization": result})
        return
    new_plan = {**rec["plan"], "generation": generation, "specHash": spec_hash(obj["spec"])}
    result.update(result="Applied", applied=True)
    try:
        _record(
            namespace,
            name,
            {"plan": merge_patch(live, new_plan), "reoptimization": result},
            resource_version=obj["metadata"]["resourceVersion"],
        )
    except ApiException as err:
        if err.status != 409:
            raise
        result.update(result="Stale", applied=False, message="the topology changed meanwhile")
        _record(namespace, name, {"reoptimization": result})
        return
    await asyncio.to_thread(
        k.custom.patch_namespaced_custom_object,
        GROUP, VERSION, namespace, PLURAL, name,
        {"metadata": {"annotations": {ANN_APPLIED: result["lastRun"]}}},
    )  # fmt: skip
    context.post_event(body, "Reoptimized", f"applied: {rec['message']}")
