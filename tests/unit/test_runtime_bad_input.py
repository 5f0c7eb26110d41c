"""Bad input to a task gives a clear error, and malformed records are kept aside, not lost.

* a missing or invalid setting: exit code 2 and one log line naming the variable or the
  ``config`` field, no traceback;
* malformed log lines: counted, written to the source's dead-letter file with the reason,
  file and offset, and the rest of the stream is processed exactly;
* a peer that never answers: a warning in the log and ``unanswered`` in the task status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from backstop_testkit.support.kubetools import free_port
from backstop_testkit.support.runtime_data import (
    counts_of,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(120)


def env_of(tmp_path: Path, task: str) -> dict[str, str]:
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    spec = wordcount_spec(inp, tmp_path / "out", rate=1000.0, batch=10, parallelism=1)
    return dict(LocalTopology("t", spec, tmp_path / "store").env[task])


def start_fails(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backstop_runtime"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("task", "change", "message"),
    [
        ("source-0", {"path": None}, "config.path is required but missing"),
        ("source-0", {"function": None}, "config.function is required but missing"),
        ("source-0", {"function": "no_such_module:X"}, "cannot import 'no_such_module'"),
        ("source-0", {"function": "backstop_runtime.api:Sink"}, "is not a source"),
        ("source-0", {"path": "/nonexistent/input"}, "config.path /nonexistent/input is not"),
        ("count-0", {"windowSeconds": -1}, "config.windowSeconds must be a positive number"),
        ("sink-0", {"path": None}, "config.path is required but missing"),
    ],
)
def test_a_bad_config_field_is_named(
    task: str, change: dict[str, object], message: str, tmp_path: Path
) -> None:
    env = env_of(tmp_path, task)
    config = json.loads(env["BACKSTOP_CONFIG"])
    for key, value in change.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    env["BACKSTOP_CONFIG"] = json.dumps(config)
    res = start_fails(env)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def test_a_store_the_task_cannot_write_is_named(tmp_path: Path) -> None:
    env = env_of(tmp_path, "sink-0")
    (tmp_path / "not-a-dir").write_text("")
    env["BACKSTOP_STORE"] = str(tmp_path / "not-a-dir")
    res = start_fails(env)
    assert res.returncode == 2, res.stderr
    assert f"BACKSTOP_STORE={tmp_path}/not-a-dir: cannot create" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("BACKSTOP_TASK_ID", "", "BACKSTOP_TASK_ID is required"),
        ("BACKSTOP_TASK_INDEX", "one", "BACKSTOP_TASK_INDEX='one' is not an integer"),
        ("BACKSTOP_CONFIG", "{oops", "BACKSTOP_CONFIG is not valid JSON"),
        ("BACKSTOP_DOWNSTREAM", '[{"operator": "x"}]', "BACKSTOP_DOWNSTREAM[0].parallelism"),
        ("BACKSTOP_CHECKPOINT_INTERVAL", "0", "BACKSTOP_CHECKPOINT_INTERVAL='0' must be positive"),
    ],
)
def test_a_bad_variable_is_named(variable: str, value: str, message: str, tmp_path: Path) -> None:
    env = env_of(tmp_path, "tokenize-0")
    env[variable] = value
    res = start_fails(env)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


MALFORMED = [
    ("not json at all", "not JSON"),
    ("[1, 2, 3]", "not a JSON object"),
    ('{"id": "m1", "text": "no time"}', "missing field(s) ts"),
    ('{"id": "m2", "ts": "soon", "text": "bad time"}', "ts is not a finite number"),
    ('{"id": "m3", "ts": 5.0}', "missing field(s) text"),
]


def test_malformed_lines_are_kept_aside_and_the_rest_is_exact(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    write_input(inp, files=1, per_file=600, seed=3)
    good = (inp / "part-00.jsonl").read_text().splitlines()
    lines = list(good)
    for k, (bad, _) in enumerate(MALFORMED):  # spread through the file
        lines.insert(100 * (k + 1), bad)
    (inp / "part-00.jsonl").write_text("\n".join(lines) + "\n")
    spec = wordcount_spec(inp, tmp_path / "out", rate=3000.0, batch=20, parallelism=1)
    topo = LocalTopology("bad", spec, tmp_path / "store")
    topo.start_all()
    try:
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
    finally:
        topo.stop_all()
    expected: Counter[tuple[int, str]] = Counter()
    for line in good:
        doc = json.loads(line)
        for word in "".join(c if c.isalpha() else " " for c in doc["text"].lower()).split():
            expected[(int(doc["ts"] // 10) * 10, word)] += 1
    assert counts_of(output_lines(tmp_path / "out")) == dict(expected)
    kept = topo.objects("tasks/source-0/dead-letters/")
    letters = [json.loads(x) for data in kept for x in data.decode().splitlines()]
    assert [
        (d["payload"]["line"], d["reason"][: len(r)])
        for d, (_, r) in zip(letters, MALFORMED, strict=True)
    ] == [(b, r) for b, r in MALFORMED]
    data = (inp / "part-00.jsonl").read_bytes()
    for d in letters:  # the offset points at the line in the file
        off = d["payload"]["offset"]
        assert data[off:].split(b"\n", 1)[0].decode() == d["payload"]["line"]
    assert topo.status("source-0")["deadLetters"] == len(MALFORMED)


def test_a_peer_that_never_answers_is_reported(tmp_path: Path) -> None:
    env = env_of(tmp_path, "tokenize-0")
    env["BACKSTOP_PEER_TIMEOUT"] = "0.5"
    env["BACKSTOP_METRICS_PORT"] = str(port := free_port())
    log = tmp_path / "stderr.log"
    err_file = log.open("w")  # read while the task runs; closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "backstop_runtime"], env=env, stderr=err_file, text=True
    )
    root = Path(env["BACKSTOP_STORE"], env["BACKSTOP_NAMESPACE"], "t", env["BACKSTOP_TOPOLOGY_UID"])
    status = root / "tasks" / "tokenize-0" / "status.json"
    try:

        def reported() -> bool:
            try:
                doc = json.loads(status.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                return False
            return "source-0" in doc.get("unanswered", {})

        start = time.monotonic()
        while not reported():
            assert proc.poll() is None and time.monotonic() - start < 20, "not reported"
            time.sleep(0.05)
        doc = json.loads(status.read_text())
        assert "has not registered" in doc["unanswered"]["source-0"]
        # the pod's readiness probe: 503, and the reason the operator puts in the topology's
        # Ready condition
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5)
        assert answer.value.code == 503
        assert (
            answer.value.read()
            .decode()
            .startswith("no answer from source-0: it has not registered")
        )
        # the log warns on the next retry after the timeout, which may come after the
        # status reported it (a race under load): wait for it, then stop the task
        start = time.monotonic()
        while "no answer from source-0" not in log.read_text():
            assert proc.poll() is None and time.monotonic() - start < 20, "not logged"
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        err_file.close()
    assert "no answer from source-0" in log.read_text()
