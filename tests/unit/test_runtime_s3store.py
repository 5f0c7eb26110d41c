"""The wordcount example with its state in an object store (SeaweedFS through the S3 API).

The tasks run as OS processes with ``BACKSTOP_STORE=s3://...`` (the sink still writes its
files under ``config.path``). Outputs are checked against counts computed here from the
input (``runtime_data.expected_counts``): after SIGKILLs, after a store outage shorter than
the tasks' deadline (they wait), and after one longer (they exit, and start again from their
checkpoints once the store is back). Two copies racing for one epoch on S3 get distinct
epochs, and the lower one is fenced.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backstop_runtime.blobs import open_blobs
from backstop_runtime.config import Fenced, from_env
from backstop_runtime.store import Store
from backstop_testkit.support.objectstore import ObjectStore, alive
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(240)
RATE, BATCH = 1000.0, 40


@pytest.fixture
def s3(
    object_store_server: tuple[ObjectStore, dict[str, str]],
) -> Iterator[tuple[ObjectStore, dict[str, str]]]:
    """The session's SeaweedFS (``tests/unit/conftest.py``), which the outages stop and
    start again; each test keeps its state under a prefix of its own. A test that failed
    during its outage leaves the store running for the tests after it."""
    yield object_store_server
    store = object_store_server[0]
    if store.pid is None or not alive(store.pid):
        store.up()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inp = tmp_path_factory.mktemp("input")
    write_input(inp, files=3, per_file=2000)
    return inp


def topology(base: Path, inp: Path, env: dict[str, str], **extra: str) -> LocalTopology:
    """The wordcount on ``inp`` with its state under a fresh prefix of the bucket."""
    location = f"s3://{env['BACKSTOP_S3_BUCKET']}/run-{uuid.uuid4().hex[:8]}"
    return LocalTopology(
        "wordcount",
        wordcount_spec(inp, base / "out", rate=RATE, batch=BATCH),
        base / "local",
        env={**env, **extra},
        location=location,
    )


def under_way(topo: LocalTopology, rounds: int = 25) -> Callable[[], bool]:
    start: int = topo.status("sink-0").get("round", 0)
    return lambda: topo.status("sink-0").get("round", 0) >= start + rounds


def finish(topo: LocalTopology, base: Path, data: Path) -> None:
    """Wait for the end of the stream; the output holds every count once."""
    topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True, 120)
    assert topo.crashed() == {}
    lines = output_lines(base / "out")
    assert len(lines) == len(set(lines)), "a line was written twice"
    assert counts_of(lines) == dict(expected_counts(data))


@pytest.mark.parametrize("kind", ["dir", "s3"])
def test_the_state_lives_in_the_store_and_the_output_is_exact(
    request: pytest.FixtureRequest, data: Path, tmp_path: Path, kind: str
) -> None:
    """One run on each kind of store: the same keys, the same output."""
    if kind == "s3":
        topo = topology(tmp_path, data, request.getfixturevalue("s3")[1])
    else:
        spec = wordcount_spec(data, tmp_path / "out", rate=RATE, batch=BATCH)
        topo = LocalTopology("wordcount", spec, tmp_path / "local")
    topo.start_all()
    try:
        finish(topo, tmp_path, data)
    finally:
        topo.stop_all()
    assert topo.root.exists() == (kind == "dir"), "an S3 store keeps nothing locally"
    keys = topo.blobs.list(topo.root_key + "/")
    assert f"{topo.root_key}/tasks/sink-0/epochs/1" in keys
    assert any("/tasks/source-0/batches/" in k for k in keys)
    assert any("/tasks/sink-0/ckpt/" in k for k in keys)
    assert topo.metrics("sink-0") and topo.metrics("source-0")


def test_sigkilled_tasks_change_nothing_on_s3(
    s3: tuple[ObjectStore, dict[str, str]], data: Path, tmp_path: Path
) -> None:
    topo = topology(tmp_path, data, s3[1])
    topo.start_all()
    try:
        topo.wait("the stream to be under way", under_way(topo))
        for t in ("source-0", "count-1", "sink-0"):
            topo.kill(t)
        for t in ("source-0", "count-1", "sink-0"):
            topo.start(t)
        finish(topo, tmp_path, data)
    finally:
        topo.stop_all()


def test_a_store_outage_within_the_deadline_is_waited_out(
    s3: tuple[ObjectStore, dict[str, str]], data: Path, tmp_path: Path
) -> None:
    """The store stops for about 8 s mid-stream (3 s between its stop and its start, which
    take about 2 s and 3.5 s): every task waits in its store calls, retried with a backoff
    of at most 1 s (the deadline is longer), and goes on where it was once the store is
    back."""
    store, env = s3
    topo = topology(tmp_path, data, env, BACKSTOP_S3_DEADLINE="90")
    topo.start_all()
    try:
        topo.wait("the stream to be under way", under_way(topo))
        assert not topo.status("sink-0").get("eos"), "the outage came too late"
        store.down()
        time.sleep(3)
        store.up()
        finish(topo, tmp_path, data)
        assert "store error" not in "".join(topo.log(t) for t in topo.tasks)
    finally:
        topo.stop_all()


def test_an_outage_past_the_deadline_stops_the_tasks_and_they_recover(
    s3: tuple[ObjectStore, dict[str, str]], data: Path, tmp_path: Path
) -> None:
    """With a 1 s deadline the tasks exit (code 4, one line) while the store is down; the
    harness restarts them as the kubelet would, and they recover from their checkpoints."""
    store, env = s3
    topo = topology(tmp_path, data, env, BACKSTOP_S3_DEADLINE="1")
    topo.start_all()
    try:
        topo.wait("the stream to be under way", under_way(topo))
        assert not topo.status("sink-0").get("eos"), "the outage came too late"
        store.down()
        deadline = time.monotonic() + 60
        while len(topo.crashed()) < len(topo.tasks) and time.monotonic() < deadline:
            time.sleep(0.2)
        crashed = topo.crashed()
        store.up()
        assert crashed and set(crashed.values()) == {4}, crashed
        for t in crashed:
            assert "store error: S3Blobs" in topo.log(t), topo.log(t)[-2000:]
            topo.procs.pop(t)
            topo.start(t)
        finish(topo, tmp_path, data)
    finally:
        topo.stop_all()


def test_copies_racing_for_an_epoch_on_s3_get_distinct_ones(
    s3: tuple[ObjectStore, dict[str, str]],
) -> None:
    """Six copies of one task claim at once: each gets its own epoch, and every copy but
    the one of the highest is fenced."""
    env = s3[1]
    location = f"s3://{env['BACKSTOP_S3_BUCKET']}/race-{uuid.uuid4().hex[:8]}"
    cfg = from_env(
        {
            **env,
            "BACKSTOP_TOPOLOGY": "wc",
            "BACKSTOP_TASK_ID": "sink-0",
            "BACKSTOP_OPERATOR": "sink",
            "BACKSTOP_TASK_INDEX": "0",
            "BACKSTOP_STORE": location,
        }
    )
    copies = [Store(cfg, open_blobs(location, env)) for _ in range(6)]
    barrier = threading.Barrier(len(copies), timeout=30)
    errors: list[BaseException] = []

    def claim(s: Store) -> None:
        try:
            barrier.wait()
            s.claim_epoch()
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=claim, args=(s,)) for s in copies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    epochs = sorted(s.epoch for s in copies)
    assert epochs == list(range(1, len(copies) + 1))
    assert copies[0].claims() == epochs
    for s in copies:
        if s.epoch == len(copies):
            s.check_fence()
        else:
            with pytest.raises(Fenced, match=f"epoch {s.epoch} superseded by a newer copy"):
                s.check_fence()
