"""``backstop run``: a StreamTopology on this machine, as local processes (local mode).

The way to develop and test operators before deploying them, as Storm's ``LocalCluster``
and Flink's local MiniCluster are: every task of the manifest runs as a ``python -m
backstop_runtime`` process configured exactly as its pod would be
(:mod:`backstop.k8s.localenv`), its state in a directory store (``--store``), its output
where the sink's ``config.path`` says. With a bounded input (``config.bounded: true`` on
the sources) the command ends when every sink has seen the end of the stream, and exits 0.

This command validates the manifest and works out each task's environment; then it
replaces itself with the runtime's supervisor (:mod:`backstop_runtime.localrun`), which
starts the tasks, prints their progress and decides the exit status, so that the spec
models this process loaded do not stay in memory beside the tasks for the whole run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from backstop.cli._output import fail, guarded, load_manifest

__all__ = ["register", "run_command"]

PLAN = "local-run.json"
"""The plan the supervisor runs (in the store's directory): what each task is started with."""

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
    from backstop.k8s.localenv import local_task_envs, status_path

    topo = load_manifest(manifest)
    if missing := missing_runtime():
        fail(f"the task runtime needs {', '.join(missing)} here: pip install 'backstop[runtime]'")
    name = topo.metadata.name
    where = (store or Path(".backstop-local") / name).resolve()
    envs = local_task_envs(name, topo.spec, where, where, dict(os.environ))
    graph = expand(topo.spec)
    # what differs from this environment, which the supervisor inherits through exec
    own = {t: {k: v for k, v in e.items() if os.environ.get(k) != v} for t, e in envs.items()}
    plan = {
        "envs": own,
        "statuses": {t: str(status_path(where, name, t)) for t in envs},
        "logs": str(where / "logs"),
        "sinks": [graph.tasks[i] for i, out in enumerate(graph.succs) if not out],
        "timeout": timeout,
        "quiet": quiet,
    }
    where.mkdir(parents=True, exist_ok=True)
    (where / PLAN).write_text(json.dumps(plan, indent=1))
    typer.echo(f"{name}: {len(envs)} tasks as local processes, state and logs in {where}")
    sys.stdout.flush()  # exec drops what is still buffered
    os.execv(sys.executable, [sys.executable, "-m", "backstop_runtime.localrun", str(where / PLAN)])


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``backstop`` app."""
    app.command("run")(run_command)
