"""``backstop reoptimize NAME``: ask the operator for a run (or an approval) and watch it.

Why a watch and not polling: a run takes from seconds to many minutes (a JVM, a Job's
pod, the planners), and a person waiting wants to see where it is. The command watches
the one StreamTopology (a Kubernetes watch on ``metadata.name``) and prints every change
of ``status.reoptimization`` that matters as it happens, with a timestamp: requested,
starting, queued (another topology holds the operator's one JVM), running (in the
operator or as Job ``ns/name``), the result and its recommendation, then applied or
refused. :func:`describe` turns a status into those lines; it is pure.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import typer

from backstop.domain.constants import ANN_APPROVE, GROUP, PLURAL, VERSION

__all__ = ["Topology", "approve", "describe", "exit_code", "run"]

FAILED = frozenset({"Failed", "Disabled", "Stale", "Invalid", "Infeasible"})
"""Results after which ``backstop reoptimize NAME`` exits 1."""


def _say(text: str) -> None:
    typer.echo(f"[{datetime.now(UTC).strftime('%H:%M:%S')}] {text}", err=True)


def describe(state: Mapping[str, Any], name: str, namespace: str) -> str:
    """One line for the state of a run (``status.reoptimization``).

    Examples
    --------
    >>> describe({"running": True, "phase": "Running", "message": "Job ops/reopt-a-1"}, "a", "p")
    'running: Job ops/reopt-a-1'
    >>> describe({"result": "Failed", "message": "boom"}, "a", "p")
    'result Failed: boom'
    """
    if state.get("running"):
        phase = str(state.get("phase") or "Running").lower()
        return f"{phase}: {state.get('message', '')}".rstrip(": ")
    line = f"result {state.get('result')}: {state.get('message', '')}".rstrip(": ")
    rec = state.get("recommendation") or {}
    if rec.get("id"):
        cur = rec.get("current") or {}
        line += (
            f"\n    recommendation {rec['id']}: nodes {cur.get('nodesUsed')} -> "
            f"{rec.get('nodesUsed')}, backups {cur.get('backupCount')} -> "
            f"{rec.get('backupCount')}, worst H {cur.get('worstRecoveryLatency')}s -> "
            f"{rec.get('worstRecoveryLatency')}s, {rec.get('moved', 0)} pods would move"
        )
        if state.get("result") in ("Suggested", "BelowThreshold"):
            line += f"\n    approve it: backstop reoptimize {name} -n {namespace} --approve"
    return line


def exit_code(state: Mapping[str, Any], approving: bool) -> int:
    """0 when the run (or the approval) went through, 1 otherwise.

    >>> exit_code({"result": "Suggested"}, False), exit_code({"result": "Failed"}, False)
    (0, 1)
    >>> exit_code({"approval": {"result": "Refused"}}, True)
    1
    """
    if approving:
        return 0 if (state.get("approval") or {}).get("result") == "Applied" else 1
    return 1 if state.get("result") in FAILED or state.get("running") else 0


class Topology:
    """One StreamTopology: read it, patch it, and watch it."""

    def __init__(self, name: str, namespace: str) -> None:
        from kubernetes import client

        from backstop.k8s.cluster import api_client

        self.name, self.namespace = name, namespace
        self.custom = client.CustomObjectsApi(api_client())

    def get(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        return obj

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name, body
        )
        return obj

    def watch(self, until: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """Watch the object until ``until(obj)``; the last object seen (a timeout fails)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        end = time.monotonic() + timeout
        obj = self.get()
        while not until(obj):
            left = end - time.monotonic()
            if left <= 0:
                _fail_timeout(timeout)
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                PLURAL, field_selector=f"metadata.name={self.name}",
                resource_version=obj["metadata"]["resourceVersion"],
                timeout_seconds=max(1, int(min(left, 60))),
            )  # fmt: skip
            try:
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        obj = dict(event["object"])
                        if until(obj):
                            return obj
                    elif event["type"] == "DELETED":
                        raise typer.Exit(1)
            except ApiException as err:
                if err.status != 410:  # an expired resourceVersion: read again, watch on
                    raise
            obj = self.get()
        return obj


def _fail_timeout(timeout: float) -> None:
    typer.echo(f"error: no result within {timeout:g}s (is the operator running?)", err=True)
    raise typer.Exit(1)


def _state(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("reoptimization") or {})


def run(topo: Topology, timeout: float) -> dict[str, Any]:
    """Ask for a run now (a new nonce) and print its phases until it has a result."""
    nonce = uuid.uuid4().hex[:10]
    topo.patch({"spec": {"reoptimization": {"nonce": nonce}}})
    _say(f"requested a run of {topo.namespace}/{topo.name} (nonce {nonce})")
    seen: list[str] = []

    def done(obj: dict[str, Any]) -> bool:
        state = _state(obj)
        if state.get("nonce") != nonce:
            return False
        line = describe(state, topo.name, topo.namespace)
        if not seen or seen[-1] != line:
            seen.append(line)
            _say(line)
        return not state.get("running")

    return _state(topo.watch(done, timeout))


def approve(topo: Topology, obj: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """Approve the stored recommendation and print whether it was applied or refused."""
    state = _state(obj)
    rid = (state.get("recommendation") or {}).get("id")
    if not rid:
        typer.echo(
            f"error: {topo.namespace}/{topo.name} has no stored recommendation to approve "
            f"(result {state.get('result')!r}); run: backstop reoptimize {topo.name}",
            err=True,
        )
        raise typer.Exit(1)
    _say(describe(state, topo.name, topo.namespace))
    topo.patch({"metadata": {"annotations": {ANN_APPROVE: rid}}})
    _say(f"approved recommendation {rid} ({ANN_APPROVE}); waiting for the operator")

    def decided(o: dict[str, Any]) -> bool:
        return bool((_state(o).get("approval") or {}).get("id") == rid)

    state = _state(topo.watch(decided, timeout))
    approval = state.get("approval") or {}
    if approval.get("result") == "Applied":
        _say(f"applied: {approval.get('message', '')}; the pods follow the new plan")
    else:
        _say(f"refused ({approval.get('reason')}): {approval.get('message', '')}")
    return state
