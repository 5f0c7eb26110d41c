"""``BACKSTOP_LOG_FORMAT=json``: every line the task process writes is one JSON object.

The runtime runs as a process with a configuration it refuses (no ``BACKSTOP_CONFIG``), so
it logs an error and exits; its stderr is read line by line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("BACKSTOP_")}
    return subprocess.run(
        [sys.executable, "-m", "backstop_runtime"],
        env={**keep, "BACKSTOP_TASK_ID": "count-0", "BACKSTOP_ROLE": "replica", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_logs_are_one_object_per_line_with_the_task_and_level() -> None:
    done = _run(BACKSTOP_LOG_FORMAT="json")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines, "nothing logged"
    docs = [json.loads(line) for line in lines]  # every line parses
    error = [d for d in docs if d["level"] == "ERROR"]
    assert error and "configuration error" in error[0]["message"], docs
    assert {d["task"] for d in docs} == {"count-0#r0"}
    assert all(d["time"].endswith("Z") and d["logger"].startswith("backstop") for d in docs)


def test_plain_lines_are_the_default() -> None:
    done = _run()
    assert done.returncode == 2, done.stderr
    line = next(x for x in done.stderr.splitlines() if "configuration error" in x)
    assert " ERROR backstop_runtime: configuration error" in line
    assert not line.startswith("{")
