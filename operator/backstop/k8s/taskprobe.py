"""Why a task pod is not ready, asked of the task itself.

The task runtime's readiness probe (``GET /ready`` on the pod's ``metrics`` port, see
``runtime/backstop_runtime/httpmetrics.py``) answers 503 with one line per producer that
has not answered for its peer timeout. The kubelet keeps only the status code of a failed
HTTP probe (its Event says "HTTP probe failed with statuscode: 503"), so the operator asks
the task for the reason, and only for a pod whose task container runs without being ready.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from backstop.domain.constants import METRICS_PORT

TIMEOUT = 1.0
"""Seconds to wait for a task's answer (the supervisor's tick waits for it)."""


def unready_address(body: Mapping[str, Any]) -> str | None:
    """``http://ip:port/ready`` of a pod whose ``task`` container runs but is not ready.

    >>> pod = {"spec": {"containers": [{"name": "task", "ports": [
    ...     {"name": "metrics", "containerPort": 9191}]}]}, "status": {"phase": "Running",
    ...     "podIP": "10.89.1.7", "containerStatuses": [
    ...     {"name": "task", "ready": False, "state": {"running": {}}}]}}
    >>> unready_address(pod)
    'http://10.89.1.7:9191/ready'
    >>> pod["status"]["containerStatuses"][0]["ready"] = True
    >>> unready_address(pod) is None
    True
    """
    status = body.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        return None
    for cs in status.get("containerStatuses") or []:
        if (
            cs.get("name") == "task"
            and not cs.get("ready")
            and (cs.get("state") or {}).get("running") is not None
        ):
            break
    else:
        return None
    port = METRICS_PORT
    for c in (body.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or [] if c.get("name") == "task" else []:
            if p.get("name") == "metrics":
                port = int(p["containerPort"])
    return f"http://{ip}:{port}/ready"


def not_ready_reason(url: str) -> str | None:
    """The task's own reason for being unready (``None``: no answer, or ready after all)."""
    try:
        urllib.request.urlopen(url, timeout=TIMEOUT).close()
    except urllib.error.HTTPError as err:
        if err.code != 503:
            return None
        text = err.read(2000).decode("utf-8", "replace").strip()
        return "NotAnswering: " + "; ".join(text.splitlines()[:3]) if text else None
    except (OSError, ValueError):
        return None  # not listening yet (starting), or unreachable from the operator
    return None
