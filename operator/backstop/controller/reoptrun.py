"""Where a re-optimization run happens: a child process of the operator, or a Kubernetes Job.

``reoptimization.mode: local`` (:func:`run_local`) runs ``python -m backstop.jobs.reoptimize``
as a child process: the JVM lives only while a run lasts, a Spark crash or out-of-memory
cannot take the operator down, and a cancelled handler kills the child. Runs of all
topologies share one slot (:data:`LOCAL_SLOTS`): two JVMs in one container would double
the memory the driver heap was sized for. The heap itself is derived from the operator
container's memory limit (:mod:`backstop.domain.sparkmemory`).

``mode: job`` (:func:`run_in_job`) runs the same command in a Kubernetes Job from the
Spark image (:mod:`backstop.k8s.reoptjob`) and waits for it; Jobs of different topologies
run side by side, each within its own memory limit.

Both report their phase (``Queued``, ``Running``) through a callback, which the daemon
records in ``status.reoptimization`` for ``backstop reoptimize NAME`` to print.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from backstop.controller import context
from backstop.controller import settings as config
from backstop.domain import metricspath
from backstop.domain.sparkmemory import MemoryTooSmall, driver_memory, local_cores
from backstop.domain.storespec import StoreSpec
from backstop.k8s import reoptjob

__all__ = ["Progress", "job_settings", "run_in_job", "run_local"]

Progress = Callable[[str, Mapping[str, Any]], Awaitable[None]]
"""``progress(phase, fields)``: record that a run entered ``phase``."""

LOCAL_SLOTS = 1
"""Local runs at once in one operator process: one JVM, sized for the container alone."""
_slot: asyncio.Semaphore | None = None


def _local_slot() -> asyncio.Semaphore:
    """The process-wide slot (like the API client), made in the operator's event loop."""
    global _slot
    if _slot is None:
        _slot = asyncio.Semaphore(LOCAL_SLOTS)
    return _slot


def _job_args(workdir: Path, metrics: str, master: str) -> list[str]:
    cfg = config.settings()
    memory = driver_memory(
        int(cfg.memory_limit) if cfg.memory_limit else None,
        workers=local_cores(master, os.cpu_count()),
        in_operator=True,
    )
    return [
        sys.executable, "-m", "backstop.jobs.reoptimize",
        "--metrics", metrics,
        "--topologies", str(workdir / "topology.json"),
        "--nodes-json", str(workdir / "nodes.json"),
        "--current", str(workdir / "current.json"),
        "--out", str(workdir / "out"),
        "--master", master,
        "--time-limit", str(cfg.reopt_time_limit),
        "--conf", f"spark.driver.memory={memory.conf}",
    ]  # fmt: skip


async def run_local(
    manifest: dict[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any] | None,
    metrics: str,
    workdir: Path,
    progress: Progress,
    store: StoreSpec | None = None,
) -> dict[str, Any]:
    """Run the job as a child process (one at a time per operator); its recommendation.

    An ``s3://`` metrics path is read with the endpoint and region of the topology's
    ``store`` and the credentials of the operator's environment
    (:func:`~backstop.domain.metricspath.local_store_env`); a directory must be one the
    operator can read.

    Raises
    ------
    RuntimeError
        When the job fails, times out, or cannot fit the memory limit (the message says why).
    """
    cfg = config.settings()
    name = manifest["metadata"]["name"]
    (workdir / "topology.json").write_text(json.dumps(manifest))
    (workdir / "nodes.json").write_text(json.dumps({name: list(nodes)}))
    (workdir / "current.json").write_text(json.dumps({name: current} if current else {}))
    s3 = metricspath.is_s3(metrics)
    if not s3 and not Path(metrics).is_dir():
        raise RuntimeError(
            f"metricsPath {metrics} is not a directory the operator can read (in-cluster the "
            "chart mounts reoptimization.metricsVolume at /var/lib/backstop; an object "
            "store's metrics are s3://bucket/prefix/...)"
        )
    try:
        args = _job_args(workdir, metrics, cfg.spark_master)
    except MemoryTooSmall as err:
        raise RuntimeError(f"{err} (resources.limits.memory), or use mode: job") from None
    slot = _local_slot()
    if slot.locked():
        await progress("Queued", {"message": "waiting for another topology's run (one JVM)"})
    async with slot:
        await progress("Running", {"message": f"Spark {cfg.spark_master} in the operator"})
        extra = metricspath.local_store_env(store) if s3 and store is not None else {}
        return await _child(args, workdir, cfg.reopt_timeout_seconds, extra)


async def _child(
    args: list[str], workdir: Path, timeout: float, extra: Mapping[str, str]
) -> dict[str, Any]:
    env = {**os.environ, **extra, "PYTHONWARNINGS": "ignore::FutureWarning"}
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


def job_settings(topology_namespace: str) -> reoptjob.JobSettings:
    """The Job settings from the operator's (the chart's ``reoptimization.*``)."""
    cfg = config.settings()
    if not cfg.spark_image:
        raise RuntimeError("mode: job needs BACKSTOP_SPARK_IMAGE (reoptimization.sparkImage)")
    return reoptjob.JobSettings(
        namespace=cfg.operator_namespace or topology_namespace,
        image=cfg.spark_image,
        spark_master=cfg.spark_master,
        service_account=cfg.spark_service_account,
        resources=cfg.spark_resources or reoptjob.DEFAULT_RESOURCES,
        spark_conf=cfg.spark_conf or {},
        metrics_claim=cfg.metrics_claim,
        metrics_host_path=cfg.metrics_host_path,
        store_secret=cfg.reopt_store_secret,
        pod=cfg.reopt_pod or {},
        timeout_seconds=cfg.reopt_timeout_seconds,
        time_limit=cfg.reopt_time_limit,
    )


async def run_in_job(
    manifest: dict[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any] | None,
    metrics: str,
    progress: Progress,
    store: StoreSpec | None = None,
) -> dict[str, Any]:
    """Run the job as a Kubernetes Job, wait for it, read its result, delete it.

    An ``s3://`` metrics path gives the Job the object store settings of the topology's
    ``store`` (:func:`~backstop.domain.metricspath.job_store_env`).

    Raises
    ------
    RuntimeError
        When the Job fails or outlives its deadline (the message is its error line), when
        its settings cannot hold a Spark driver, or when it could not get the store's
        credentials.
    """
    meta = manifest["metadata"]
    settings = job_settings(meta["namespace"])
    job = reoptjob.job_name(meta["namespace"], meta["name"])
    try:
        s3_env = []
        if metricspath.is_s3(metrics) and store is not None:
            s3_env = metricspath.job_store_env(
                store, settings.namespace, meta["namespace"], settings.store_secret
            )
        body = reoptjob.build_reopt_job(job, settings, manifest, metrics, s3_env)
    except MemoryTooSmall as err:
        raise RuntimeError(f"{err} (reoptimization.resources.limits.memory)") from None
    except ValueError as err:
        raise RuntimeError(str(err)) from None
    inputs = reoptjob.build_input_configmap(job, settings, manifest, nodes, current)
    runner = reoptjob.JobRunner(context.kube().api, settings)
    await asyncio.to_thread(runner.start, job, inputs, body)
    try:
        await progress("Running", {"job": f"{settings.namespace}/{job}",
                                   "message": f"Job {settings.namespace}/{job}"})  # fmt: skip
        while True:
            finished, failure = await asyncio.to_thread(runner.poll, job)
            if finished:
                break
            await asyncio.sleep(config.settings().reopt_tick_seconds)
        if failure:
            raise RuntimeError(failure)
        return await asyncio.to_thread(runner.result, job)
    finally:
        await asyncio.to_thread(runner.remove, job, 0.0)
