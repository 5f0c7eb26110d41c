"""What the status's conditions read of a pod: :class:`PodState`, and why a task fails."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PodState:
    """What the conditions need to know of one pod."""

    name: str
    task: str
    role: str
    phase: str | None
    node: str | None
    deleting: bool
    failure: str | None = None  # why its task keeps failing (see :func:`pod_failure`)


FAILING = {
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RunContainerError",
}


def pod_failure(status: Mapping[str, Any] | None) -> str | None:
    """Why a pod's task fails, from its status (a dict, camelCase as the API sends it).

    A task the runtime stops with an error (a config error, say) exits non-zero; the
    kubelet restarts it and reports ``CrashLoopBackOff`` while the pod phase stays
    ``Running``. The message is the container's termination message: with
    ``terminationMessagePolicy: FallbackToLogsOnError`` the end of the task's log.

    >>> pod_failure({"containerStatuses": [{"state": {"waiting": {
    ...     "reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 2,
    ...     "message": "error: config: count-0: missing field 'windowSeconds'"}}}]})
    "CrashLoopBackOff (exit 2): error: config: count-0: missing field 'windowSeconds'"
    >>> pod_failure({"containerStatuses": [{"state": {"running": {}}}]}) is None
    True
    """
    for cs in (status or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        ended = state.get("terminated") or {}
        if waiting.get("reason") not in FAILING and not (ended and ended.get("exitCode")):
            continue
        last = ended or (cs.get("lastState") or {}).get("terminated") or {}
        reason = waiting.get("reason") or last.get("reason") or "Error"
        code = f" (exit {last['exitCode']})" if last.get("exitCode") is not None else ""
        text = (last.get("message") or waiting.get("message") or "").strip()
        tail = text.splitlines()[-1] if text else ""
        return f"{reason}{code}" + (f": {tail[:300]}" if tail else "")
    return None


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """A :class:`PodState` from a pod dict (as the API sends it, or slimmed)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    return PodState(
        name=meta["name"],
        task=labels.get("streams.backstop.dev/task", ""),
        role=labels.get("streams.backstop.dev/role", "primary"),
        phase=status.get("phase"),
        node=(pod.get("spec") or {}).get("nodeName"),
        deleting=meta.get("deletionTimestamp") is not None,
        failure=pod_failure(status),
    )


def pod_key(p: PodState) -> str:
    """The :func:`expected_pods` key of a pod: ``primary/<task>`` or ``replica-<k>/<task>``."""
    if p.role == "primary":
        return f"primary/{p.task}"
    return f"replica-{p.name.rsplit('-', 1)[1].removeprefix('r')}/{p.task}"  # <pod>--r<k>
