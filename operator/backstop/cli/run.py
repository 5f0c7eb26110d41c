"""``backstop run``: a StreamTopology on this machine, as local processes (local mode).

The way to develop and test operators before deploying them, as Storm's ``LocalCluster``
and Flink's local MiniCluster are: every task of the manifest runs as a ``python -m
backstop_runtime`` process configured exactly as its pod would be
(:mod:`backstop.k8s.localenv`), its state in a directory store (``--store``), its output
where the sink's ``config.path`` says. The tasks' status files are read every
:data:`POLL` seconds, and a progress line is printed at most once a second, when
something moved (each task's round, the sinks' end of stream), and at the end; with a
bounded input (``config.bounded: true`` on the sources) the command ends when every
sink has seen the end of the stream, and exits 0. A task that exits with an error ends
the run: its log's last lines are printed and the exit status is 1. Ctrl-C stops every
task (as SIGTERM stops a pod: each takes its final checkpoint) and exits 130; a second
run on the same store resumes from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from backstop.cli._output import fail, guarded, load_manifest

__all__ = ["register", "run_command"]

TAIL = 2000
"""Characters of a failed task's log printed."""
POLL = 0.25
"""Seconds between two reads of the tasks' status files: the end of a bounded run is
seen at most this late (reading a few small files is cheap beside the tasks' work)."""

RUNTIME_NEEDS = ("msgpack",)
"""What every task process imports beyond the operator's core (the ``runtime`` extra)."""


def missing_runtime() -> list[str]:
    """The modules of :data:`RUNTIME_NEEDS` this Python cannot import."""
    import importlib

    missing = []
    for module in RUNTIME_NEEDS:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    return missing


class LocalRun:
    """The processes of one local run, their logs under ``work/logs``."""

    def __init__(self, name: str, envs: dict[str, dict[str, str]], store: Path) -> None:
        self.name, self.envs, self.store = name, envs, store
        self.logs = store / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        for task, env in self.envs.items():
            with (self.logs / f"{task}.log").open("ab") as log:
                self.procs[task] = subprocess.Popen(
                    [sys.executable, "-m", "backstop_runtime"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )

    def status(self, task: str) -> dict[str, Any]:
        from backstop.k8s.localenv import status_path  # see backstop.cli: lazy imports

        try:
            doc = json.loads(status_path(self.store, self.name, task).read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def failed(self) -> dict[str, int]:
        """The tasks that exited with an error."""
        return {t: p.returncode for t, p in self.procs.items() if p.poll() not in (None, 0)}

    def tail(self, task: str) -> str:
        return (self.logs / f"{task}.log").read_text(errors="replace")[-TAIL:]

    def stop(self) -> None:
        """SIGTERM to every task still running (each checkpoints), SIGKILL after 20 s."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def progress(statuses: dict[str, dict[str, Any]]) -> str:
    """Each task's round, ``eos`` once it saw the end of the stream.

    >>> progress({"src-0": {"round": 12}, "out-0": {"round": 9, "eos": True}})
    'src-0 r12  out-0 r9 eos'
    """
    parts = []
    for task, st in statuses.items():
        parts.append(f"{task} r{st.get('round', 0)}" + (" eos" if st.get("eos") else ""))
    return "  ".join(parts)


def watch(run: LocalRun, sinks: list[str], timeout: float, quiet: bool) -> int:
    """Print progress until every sink saw the end of the stream (0), a task failed (1) or
    ``timeout`` seconds passed (2; 0: no limit)."""
    began = time.monotonic()
    last, printed = "", -1.0
    while True:
        statuses = {t: run.status(t) for t in run.envs}
        now, at = progress(statuses), time.monotonic()
        done = all(statuses[t].get("eos") for t in sinks)
        if not quiet and now != last and (at - printed >= 1.0 or done):  # something moved
            typer.echo(f"[{at - began:.0f}s] {now}")
            last, printed = now, at
        if done:
            typer.echo(f"done: every sink saw the end of the stream ({', '.join(sinks)})")
            return 0
        if failed := run.failed():
            for task, code in failed.items():
                typer.echo(f"error: task {task} exited with {code}; its log ends:", err=True)
                typer.echo(run.tail(task), err=True)
            return 1
        if timeout and time.monotonic() - began > timeout:
            typer.echo(f"error: the stream did not end within {timeout:g}s", err=True)
            return 2
        time.sleep(POLL)


@guarded
def run_command(
    manifest: Annotated[Path, typer.Argument(help="A StreamTopology manifest (YAML).")],
    store: Annotated[
        Path | None,
        typer.Option(help="The state's directory (default: .backstop-local/<name>)."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds before giving up on the end of the stream (0: none).")
    ] = 0.0,
    quiet: Annotated[bool, typer.Option(help="No progress lines.")] = False,
) -> None:
    """Run a topology's tasks as local processes until a bounded input is done."""
    from backstop.domain.spec import expand  # see backstop.cli: lazy imports
    from backstop.k8s.localenv import local_task_envs

    topo = load_manifest(manifest)
    if missing := missing_runtime():
        fail(f"the task runtime needs {', '.join(missing)} here: pip install 'backstop[runtime]'")
    name = topo.metadata.name
    where = (store or Path(".backstop-local") / name).resolve()
    envs = local_task_envs(name, topo.spec, where, where, dict(os.environ))
    graph = expand(topo.spec)
    sinks = [graph.tasks[i] for i, out in enumerate(graph.succs) if not out]
    run = LocalRun(name, envs, where)
    typer.echo(f"{name}: {len(envs)} tasks as local processes, state and logs in {where}")
    run.start()
    try:
        code = watch(run, sinks, timeout, quiet)
    except KeyboardInterrupt:
        code = 130
    finally:
        run.stop()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``backstop`` app."""
    app.command("run")(run_command)
