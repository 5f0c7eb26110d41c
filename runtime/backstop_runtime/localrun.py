"""The supervisor of a local run (``backstop run``): the tasks as processes, their progress.

``backstop run`` validates the manifest and works out every task's environment, writes
them to a *plan* (JSON, see :func:`main`), and then replaces itself (``exec``) with
``python -m backstop_runtime.localrun PLAN``. Why a second program: the command's
validation imports the operator's spec models (pydantic and the planners' graph), which a
process watching status files would otherwise keep in memory for the whole run, on top of
the tasks' own. This one imports the standard library only.

The tasks' status files are read every :data:`POLL` seconds, and a progress line is
printed at most once a second, when something moved (each task's round, the sinks' end
of stream), and at the end. With a bounded input the run ends when every sink has seen
the end of the stream (exit 0). A task that exits with an error ends the run: its log's
last lines are printed and the exit status is 1; ``timeout`` seconds without the end is
exit 2. Ctrl-C or SIGTERM stops every task (as SIGTERM stops a pod: each takes its final
checkpoint) and exits 130; a second run on the same store resumes from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["LocalRun", "main", "progress", "watch"]

TAIL = 2000
"""Characters of a failed task's log printed."""
POLL = 0.25
"""Seconds between two reads of the tasks' status files: the end of a bounded run is
seen at most this late (reading a few small files is cheap beside the tasks' work)."""
STOP_SECONDS = 20.0
"""How long the tasks get to take their final checkpoint before SIGKILL."""


class LocalRun:
    """The processes of one local run: ``{task: environment overrides}`` started with this
    process's environment under them, ``{task: status.json path}``, logs under ``logs``."""

    def __init__(self, envs: dict[str, dict[str, str]], statuses: dict[str, str], logs: Path):
        self.envs, self.statuses, self.logs = envs, statuses, logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        for task, env in self.envs.items():
            with (self.logs / f"{task}.log").open("ab") as log:
                self.procs[task] = subprocess.Popen(
                    [sys.executable, "-m", "backstop_runtime"],
                    env={**os.environ, **env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # out of the terminal's process group: Ctrl-C reaches this process
                    # alone, which stops the tasks with SIGTERM (their final checkpoint)
                    start_new_session=True,
                )

    def status(self, task: str) -> dict[str, Any]:
        try:
            doc = json.loads(Path(self.statuses[task]).read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def failed(self) -> dict[str, int]:
        """The tasks that exited with an error."""
        return {t: p.returncode for t, p in self.procs.items() if p.poll() not in (None, 0)}

    def tail(self, task: str) -> str:
        return (self.logs / f"{task}.log").read_text(errors="replace")[-TAIL:]

    def stop(self) -> None:
        """SIGTERM to every task still running (each checkpoints), SIGKILL after
        :data:`STOP_SECONDS`."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
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
            print(f"[{at - began:.0f}s] {now}", flush=True)
            last, printed = now, at
        if done:
            print(f"done: every sink saw the end of the stream ({', '.join(sinks)})", flush=True)
            return 0
        if failed := run.failed():
            for task, code in failed.items():
                print(f"error: task {task} exited with {code}; its log ends:", file=sys.stderr)
                print(run.tail(task), file=sys.stderr)
            return 1
        if timeout and time.monotonic() - began > timeout:
            print(f"error: the stream did not end within {timeout:g}s", file=sys.stderr)
            return 2
        time.sleep(POLL)


def main(argv: list[str] | None = None) -> int:
    """Run the plan at ``argv[0]``: a JSON object with ``envs`` (``{task: environment
    overrides}``), ``statuses`` (``{task: path of its status.json}``), ``logs`` (a
    directory), ``sinks`` (task ids), ``timeout`` (seconds, 0: none) and ``quiet``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backstop_runtime.localrun PLAN", file=sys.stderr)
        return 2
    try:
        plan = json.loads(Path(args[0]).read_text())
        run = LocalRun(plan["envs"], plan["statuses"], Path(plan["logs"]))
        sinks, timeout, quiet = list(plan["sinks"]), float(plan["timeout"]), bool(plan["quiet"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: cannot read the local run's plan {args[0]}: {err!r}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupted)  # as Ctrl-C: a service manager's stop
    run.start()
    try:
        return watch(run, sinks, timeout, quiet)
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the tasks are being stopped
        run.stop()


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
