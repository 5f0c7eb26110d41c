"""Run a StreamTopology's tasks as local OS processes, configured exactly as pods are.

Each task's environment is taken from the pod manifest the operator would create
(:func:`backstop.k8s.manifests.build_task_pod`), with the downward-API values filled in for
localhost and ports chosen by the OS, so these tests exercise the real runtime contract.
The harness stands in for the kubelet: it starts, SIGKILLs and restarts task processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from backstop.domain.spec import StreamTopologySpec, expand
from backstop.k8s.localenv import NAMESPACE, UID, local_task_envs
from backstop.k8s.manifests import Owner
from backstop_runtime.blobs import open_blobs
from backstop_runtime.store import key_rounds

ROOT = Path(__file__).resolve().parents[3]


class LocalTopology:
    """The tasks of ``spec`` as processes sharing the store directory ``store``.

    With ``location`` (``s3://bucket/prefix``, its settings in ``env``) the tasks keep
    their state in that object store instead; ``store`` then holds only the logs and the
    recovery session.
    """

    def __init__(
        self,
        name: str,
        spec: StreamTopologySpec,
        store: Path,
        backups: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        location: str | None = None,
    ) -> None:
        self.name, self.spec, self.store = name, spec, store
        self.graph = expand(spec)
        owner = Owner(name, NAMESPACE, UID)
        base = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT / "runtime")}
        self.env: dict[str, dict[str, str]] = local_task_envs(
            name, spec, location or store, store, base, backups
        )
        self.root = store / owner.namespace / name / owner.uid
        """The topology's part of a directory store (``TaskConfig.root`` of its tasks)."""
        self.root_key = f"{owner.namespace}/{name}/{owner.uid}"
        self.blobs = open_blobs(location or store, {**os.environ, **(env or {})})
        """The store the tasks use, to read what they wrote."""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        (store / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.graph.tasks

    def start(self, task: str, copy: str | None = None, **env: str) -> None:
        """Start ``task``; with ``copy``, as another copy of it under that name (its own
        process and log), its environment changed by ``env`` (``BACKSTOP_EPOCH``, say)."""
        key = copy or task
        log = (self.store / "logs" / f"{key}.log").open("ab")
        self.procs[key] = subprocess.Popen(
            [sys.executable, "-m", "backstop_runtime"],
            env={**self.env[task], **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start_all(self) -> None:
        for t in self.tasks:
            self.start(t)

    def kill(self, task: str) -> None:
        """SIGKILL: no cleanup, as when a node dies."""
        proc = self.procs.pop(task)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for task, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            del self.procs[task]

    def status(self, task: str) -> dict[str, Any]:
        data = self.blobs.get(f"{self.root_key}/tasks/{task}/status.json")
        try:
            doc = json.loads(data or b"{}")
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def objects(self, prefix: str) -> list[bytes]:
        """The objects under ``<root>/<prefix>`` in key order."""
        keys = self.blobs.list(f"{self.root_key}/{prefix}")
        return [data for k in keys if (data := self.blobs.get(k)) is not None]

    def checkpoint_rounds(self, task: str) -> list[int]:
        """The rounds of the checkpoints ``task`` keeps (a sink keeps its newest only)."""
        return key_rounds(self.blobs.list(f"{self.root_key}/tasks/{task}/ckpt/"), ".json")

    def crashed(self) -> dict[str, int]:
        return {t: p.returncode for t, p in self.procs.items() if p.poll() is not None}

    def log(self, task: str) -> str:
        """The output of ``task`` (or of the copy of that name), restarts included."""
        return (self.store / "logs" / f"{task}.log").read_text(errors="replace")

    def wait(self, what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
        """Poll ``cond`` until it holds; fail with the task logs if a task died or time ran out."""
        deadline = time.monotonic() + timeout
        while not cond():
            dead = self.crashed()
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {t}\n{self.log(t)[-3000:]}" for t in self.procs)
                raise AssertionError(f"waiting for {what}: crashed={dead}\n{logs}")
            time.sleep(0.05)

    def metrics(self, task: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for data in self.objects(f"metrics/tasks/{task}.e"):
            rows.extend(json.loads(line) for line in data.decode().splitlines())
        return rows
