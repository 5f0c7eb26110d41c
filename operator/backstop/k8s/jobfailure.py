"""Why a Kubernetes Job failed, or cannot start: one line for the topology's status.

The re-optimization Job (:mod:`backstop.k8s.reoptjob`) reports through its pod: its own
``error:`` line in the termination message, the container's reason (``OOMKilled``), or
a JVM stack trace whose last frames name no cause. These readers turn the Job and its
pods (the Kubernetes client's objects) into a message a person can act on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["STUCK", "deepest_exception", "job_failure", "job_stuck"]

_EXCEPTION = re.compile(r"^(?:Caused by: )?((?:[\w$]+\.)*[A-Z][\w$]*(?:Exception|Error)\b.*)$")


def deepest_exception(lines: Sequence[str]) -> str | None:
    """The deepest exception in a log's last lines: a JVM stack trace ends in frames
    (``at io.netty…``, ``... 1 more``) that name no cause; its last ``Caused by:`` does.

    >>> deepest_exception(["Exception in thread x", "Caused by: java.net.UnknownHostException: h",
    ...             "\tat io.netty.X.run(X.java:30)", "\t... 1 more"])
    'java.net.UnknownHostException: h'
    """
    found = [m.group(1) for ln in lines if (m := _EXCEPTION.match(ln.strip()))]
    return found[-1] if found else None


def job_failure(job: Any, pods: Sequence[Any]) -> str | None:
    """Why a finished Job failed (``None`` if it succeeded or still runs).

    ``job`` and ``pods`` are the Kubernetes client's objects; the message prefers the
    job's own ``error:`` line (kept in the pod's termination message), then the
    container's reason (``OOMKilled``), then the Job's condition.
    """
    conditions = {c.type: c for c in (job.status.conditions or []) if c.status == "True"}
    failed = conditions.get("Failed")
    if failed is None:
        return None
    if failed.reason == "DeadlineExceeded":
        return f"the Job did not finish within {job.spec.active_deadline_seconds}s"
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            done = cs.state.terminated if cs.state else None
            if done is None:
                continue
            lines = [ln for ln in (done.message or "").splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("error:")]
            if errors:
                return f"the job failed ({done.exit_code}): {' '.join(errors)[:400]}"
            if done.reason == "OOMKilled":
                return (
                    "the Job's container was OOMKilled: raise reoptimization.resources."
                    "limits.memory (the driver heap follows it)"
                )
            tail = deepest_exception(lines) or " ".join(lines[-2:])
            return f"the job failed ({done.exit_code}, {done.reason}): {tail[:400]}"
    return f"the Job failed: {failed.reason}: {failed.message or ''}".rstrip(": ")


STUCK = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
)
"""Waiting reasons a Job's pod does not leave by itself: fail the run now, not at its deadline."""


def job_stuck(pods: Sequence[Any]) -> str | None:
    """Why a running Job's pod cannot start (its image cannot be pulled), or ``None``."""
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None and waiting.reason in STUCK:
                return (
                    f"the Job's pod cannot start: {waiting.reason}: {waiting.message or ''} "
                    "(build the Spark image with IMAGES=spark make images, or set "
                    "reoptimization.sparkImage)"
                )
    return None
