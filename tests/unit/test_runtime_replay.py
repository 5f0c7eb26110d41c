"""Regeneration follows the failure-effect model: replay recurses up to a buffer or the log.

A chain ``source -> tokenize -> count -> sink`` (one task each) runs as processes; the sink
is SIGKILLed mid-stream and restarted. Its input after its checkpoint is held by nobody
unless ``count`` keeps an upstream backup, so ``count`` regenerates it by replaying its
own input, which ``tokenize`` regenerates in turn unless it keeps a backup: exactly the
``a(u)`` of ``ℓ(v) = t_v + max a(u)``. While the operator's recovery session asks for
adaptive buffering, every task buffers as if it kept a backup. Which tasks replayed is read
from their status, and where the sink's replay came from (the buffers and source logs its
replayed batches name) must be what the operator's model puts into the recovery session
(``replay_sources``); a session that plans the sink's recovery is checked against it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from backstop.domain.incidents import replay_sources
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inp = tmp_path_factory.mktemp("input")
    write_input(inp, files=2, per_file=1500, seed=11)
    return inp


ACTIVE = {"phase": "Recovering", "step": 1, "adaptiveBuffering": True, "orderPreserving": True}
DONE = {**ACTIVE, "phase": "Completed"}
# the session the operator writes once the sink's node is lost: restore a checkpoint taken
# before the loss was detected, and the replay comes from tokenize's buffer
PLANNED = {
    "phase": "Recovering",
    "step": 1,
    "adaptiveBuffering": False,
    "checkpoint": {"restore": "latest-before", "before": "2100-01-01T00:00:00Z"},
    "replay": {"sink-0": ["tokenize-0"]},
}


@pytest.mark.parametrize(
    ("backups", "session", "replayed"),
    [
        ((), None, {"count-0", "tokenize-0", "source-0"}),
        (("tokenize-0",), None, {"count-0"}),
        (("count-0",), None, set()),
        # the operator's recovery session asks every task to buffer (adaptive buffering)
        ((), ACTIVE, set()),
        ((), DONE, {"count-0", "tokenize-0", "source-0"}),
        (("tokenize-0",), PLANNED, {"count-0"}),
    ],
    ids=[
        "no-backups",
        "tokenize-keeps-backup",
        "count-keeps-backup",
        "adaptive-buffering",
        "session-completed",
        "session-plans-the-replay",
    ],
)
def test_sink_failure_replays_up_to_the_nearest_buffer(
    backups: tuple[str, ...],
    session: dict[str, object] | None,
    replayed: set[str],
    data: Path,
    tmp_path: Path,
) -> None:
    mounted = tmp_path / "store" / "recovery" / "session.json"  # the ConfigMap's file
    planned = session is not None and "replay" in session
    if session is not None and not planned:
        mounted.parent.mkdir(parents=True)
        mounted.write_text(json.dumps(session))
    spec = wordcount_spec(data, tmp_path / "out", rate=1500.0, batch=30, parallelism=1)
    topo = LocalTopology("chain", spec, tmp_path / "store", backups=backups)
    topo.start_all()
    try:

        def past_a_checkpoint() -> bool:
            # the kill lands after the sink took a round past its newest checkpoint (every
            # 30 rounds here), so what the sink restores from is no longer in count's
            # channel: right at a checkpoint, count might still hold the next round unsent
            progress: int = topo.status("sink-0").get("round", 0)
            kept = topo.checkpoint_rounds("sink-0")
            past = bool(kept) and kept[-1] < progress <= kept[-1] + 15
            return past and bool(output_lines(tmp_path / "out"))  # a count committed

        topo.wait("the sink to be past a checkpoint", past_a_checkpoint)
        assert not topo.status("sink-0").get("eos")
        topo.kill("sink-0")
        if planned:  # the operator writes the session after the loss, before the new pod
            mounted.parent.mkdir(parents=True)
            mounted.write_text(json.dumps(session))
        topo.start("sink-0")
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
    finally:
        topo.stop_all()  # the tasks write their final status on SIGTERM
    did = {t for t in ("source-0", "tokenize-0", "count-0") if topo.status(t)["replayedBatches"]}
    assert did == replayed
    sink_status = topo.status("sink-0")
    assert sink_status["epoch"] == 2
    adaptive = (
        session is not None and session["phase"] != "Completed" and session["adaptiveBuffering"]
    )
    buffers = topo.tasks if adaptive else backups
    model = replay_sources(topo.graph, buffers, {"sink-0"}, "sink-0")
    assert sink_status["replaySources"] == model
    if planned:
        assert sink_status["plannedReplay"] == ["tokenize-0"] == model
        assert "as the recovery plan says" in topo.log("sink-0")
        assert "checkpoint.before" in topo.log("sink-0")
    lines = output_lines(tmp_path / "out")
    assert len(lines) == len(set(lines)) and counts_of(lines) == dict(expected_counts(data))


def test_a_consumer_that_is_down_stops_its_producers_at_the_buffer_bound(
    data: Path, tmp_path: Path
) -> None:
    """Back-pressure: ``count`` keeps a backup for the sink, the sink is down, and the
    buffer is bounded, so ``count`` stops instead of growing it (what is upstream of it waits
    in bounded queues and socket buffers); the sink's restart resumes it, and the output is
    exact."""
    cap = 30
    spec = wordcount_spec(data, tmp_path / "out", rate=3000.0, batch=20, parallelism=1)
    topo = LocalTopology(
        "bp",
        spec,
        tmp_path / "store",
        backups=("count-0",),
        env={"BACKSTOP_BUFFER_ROUNDS": str(cap)},
    )
    topo.start_all()
    try:
        topo.wait("a sink checkpoint", lambda: topo.status("sink-0").get("round", 0) >= 25)
        topo.kill("sink-0")
        ckpts = (topo.root / "tasks" / "sink-0" / "ckpt").iterdir()
        # a write the kill cut short leaves its hidden temporary file beside the checkpoints
        checkpointed = max(int(p.stem) for p in ckpts if not p.name.startswith("."))
        # the input takes 150 batches; watch the counter for a while with the sink down
        seen = []
        for _ in range(40):
            seen.append(topo.status("count-0").get("round", 0))
            time.sleep(0.05)
        assert max(seen) <= checkpointed + cap + 1  # unbounded, it would reach batch 150
        topo.start("sink-0")
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
    finally:
        topo.stop_all()
    lines = output_lines(tmp_path / "out")
    assert len(lines) == len(set(lines)) and counts_of(lines) == dict(expected_counts(data))


def test_a_consumer_that_starts_late_is_served_from_the_first_batch(
    data: Path, tmp_path: Path
) -> None:
    """Under adaptive buffering no producer waits for its consumers, so the other tasks
    run ahead and checkpoint while the sink has not started: nothing the sink will ask
    for (everything from batch 1) may be trimmed, by the source's batch log, the buffers
    or the checkpoints (a not-started task counts as round 0)."""
    (tmp_path / "store" / "recovery").mkdir(parents=True)
    (tmp_path / "store" / "recovery" / "session.json").write_text(json.dumps(ACTIVE))
    spec = wordcount_spec(data, tmp_path / "out", rate=3000.0, batch=30, parallelism=1)
    topo = LocalTopology("late", spec, tmp_path / "store")
    for t in ("source-0", "tokenize-0", "count-0"):
        topo.start(t)
    try:
        # the rest of the chain runs to the end of the input; then trim passes (every 0.5 s)
        topo.wait("count-0 to end", lambda: topo.status("count-0").get("eos") is True)
        time.sleep(1.5)
        topo.start("sink-0")
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
        assert topo.crashed() == {}
    finally:
        topo.stop_all()
    for t in ("source-0", "tokenize-0", "count-0"):
        assert "Traceback" not in topo.log(t), topo.log(t)
    lines = output_lines(tmp_path / "out")
    assert len(lines) == len(set(lines)) and counts_of(lines) == dict(expected_counts(data))
