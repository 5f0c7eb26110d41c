"""``backstop run``: a manifest's tasks as local processes, until a bounded input is done.

The word count of ``examples/wordcount.yaml`` on local folders runs through the command
as a user runs it (a subprocess, a manifest file): it ends on its own with exit 0, and the
sink's output holds the counts computed here from the input. A task whose operator cannot
be loaded ends the run with exit 1 and its log; a bad manifest is one line and exit 2.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from backstop.k8s.localenv import status_path
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)

pytestmark = pytest.mark.timeout(240)


def manifest(tmp_path: Path, spec: dict[str, Any], name: str = "wc") -> Path:
    path = tmp_path / f"{name}.yaml"
    doc = {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": spec,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def backstop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backstop", "run", *args],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=cwd,
        check=False,
    )


def spec_doc(inp: Path, out: Path) -> dict[str, Any]:
    spec = wordcount_spec(inp, out, rate=2000.0, batch=100)
    doc: dict[str, Any] = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    return doc


def test_a_bounded_word_count_runs_to_its_end_with_the_exact_counts(tmp_path: Path) -> None:
    inp, out = tmp_path / "input", tmp_path / "out"
    write_input(inp, files=3, per_file=300)
    done = backstop(str(manifest(tmp_path, spec_doc(inp, out))), "--timeout", "150", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wc: 7 tasks as local processes" in done.stdout
    assert "sink-0" in done.stdout and "eos" in done.stdout  # progress lines
    assert "done: every sink saw the end of the stream (sink-0)" in done.stdout
    assert (tmp_path / ".backstop-local" / "wc" / "logs" / "count-0.log").exists()
    lines = output_lines(out)
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(inp))


def test_a_task_that_fails_ends_the_run_with_its_log(tmp_path: Path) -> None:
    inp, out = tmp_path / "input", tmp_path / "out"
    write_input(inp, files=1, per_file=50)
    spec = spec_doc(inp, out)
    for op in spec["operators"]:
        if op["name"] == "count":
            op["config"]["function"] = "no_such_module:Count"
    done = backstop(str(manifest(tmp_path, spec)), "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"error: task count-[01] exited with 2", done.stderr), done.stderr  # either
    assert "no_such_module" in done.stderr  # the task's own words, from its log


def test_a_bad_manifest_is_one_line_naming_the_field(tmp_path: Path) -> None:
    spec = spec_doc(tmp_path / "i", tmp_path / "o")
    spec["operators"][1]["inputs"][0]["operator"] = "nowhere"
    done = backstop(str(manifest(tmp_path, spec)), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "reads from unknown operator 'nowhere'" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_runtime_extra_the_run_says_what_to_install(tmp_path: Path) -> None:
    """A Python without the task runtime's msgpack: one line, exit 2, no task started."""
    path = manifest(tmp_path, spec_doc(tmp_path / "i", tmp_path / "o"))
    hide = "import sys; sys.modules['msgpack'] = None; from backstop.cli import app; app()"
    done = subprocess.run(
        [sys.executable, "-c", hide, "run", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'backstop[runtime]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".backstop-local").exists()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_tasks_are_watched_by_the_runtime_supervisor_alone(
    stop: signal.Signals, tmp_path: Path
) -> None:
    """Once the manifest is checked, the command becomes the runtime's supervisor: the spec
    models it loaded (pydantic) are not held in memory beside the tasks for the whole run.
    Ctrl-C, or SIGTERM, stops every task with its final checkpoint and exits 130."""
    inp, out, store = tmp_path / "input", tmp_path / "out", tmp_path / "s"
    write_input(inp, files=1, per_file=50)
    spec = wordcount_spec(inp, out, rate=200.0, batch=10, bounded=False)  # an endless stream
    doc: dict[str, Any] = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    cmd = [sys.executable, "-m", "backstop", "run", str(manifest(tmp_path, doc))]
    run = subprocess.Popen(
        [*cmd, "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        sink = status_path(store, "wc", "sink-0")
        deadline = time.monotonic() + 60
        while not sink.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sink.exists(), "the tasks did not start"
        argv = Path(f"/proc/{run.pid}/cmdline").read_bytes().split(b"\0")
        assert b"backstop_runtime.localrun" in argv, argv
        assert "pydantic" not in Path(f"/proc/{run.pid}/maps").read_text()
        if stop == signal.SIGINT:
            os.killpg(run.pid, stop)  # Ctrl-C: to the terminal's whole foreground group
        else:
            run.send_signal(stop)
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.terminate()  # the supervisor stops its tasks
            run.communicate(timeout=60)
    assert run.returncode == 130, stdout + stderr
    for task in ("source-0", "tokenize-0", "count-0", "sink-0"):
        log = (store / "logs" / f"{task}.log").read_text()
        assert "stopping: backstop-checkpoint" in log, log[-1000:]
