"""Helpers for tests against the local control plane: CRDs, the operator process, waiting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``pred`` until it returns something truthy; fail naming ``what``."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = pred()
        except ApiException as err:
            last = err
        else:
            if last:
                return last  # type: ignore[no-any-return]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def install_crds(api: client.ApiClient) -> None:
    """Create or replace the project's CRDs and wait until they are established."""
    ext = client.ApiextensionsV1Api(api)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            old = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = old.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
        except ApiException as err:
            if err.status != 404:
                raise
            ext.create_custom_resource_definition(crd)

        def established(n: str = name) -> bool:
            conds = ext.read_custom_resource_definition(n).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conds)

        wait_for(established, 30, f"CRD {name} established")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_operator(kubeconfig: str, namespace: str, log: Path) -> subprocess.Popen[bytes]:
    """Start ``backstop operator`` for one namespace, logging to ``log``."""
    port = free_port()
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backstop",
                "operator",
                "--namespace",
                namespace,
                "--liveness",
                f"http://127.0.0.1:{port}/healthz",
                "--log-format",
                "plain",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def stop_operator(proc: subprocess.Popen[bytes]) -> None:
    """Stop an operator we started (by its PID), forcefully if it lingers."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def operator_process(
    kubeconfig: str, namespace: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``backstop operator`` for the duration of a ``with`` block."""
    proc = start_operator(kubeconfig, namespace, log)
    try:
        yield proc
    finally:
        stop_operator(proc)


def topology_manifest(path: Path, name: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    if name:
        doc["metadata"]["name"] = name
    return doc


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None
