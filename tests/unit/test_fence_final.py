"""Fencing is final: a superseded copy, restarted with its old environment, never claims
the store back from the copy that replaced it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from backstop_runtime.blobs import DirBlobs
from backstop_runtime.config import Fenced, TaskConfig, from_env
from backstop_runtime.fencing import claim_rank, create_claim
from backstop_runtime.store import Store
from backstop_testkit.support.runtime_data import wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology


def sink_config(store: Path, epoch: int, recovery: Path | None = None) -> TaskConfig:
    env = {
        "BACKSTOP_TOPOLOGY": "wc",
        "BACKSTOP_TASK_ID": "sink-0",
        "BACKSTOP_OPERATOR": "sink",
        "BACKSTOP_TASK_INDEX": "0",
        "BACKSTOP_STORE": str(store),
        "BACKSTOP_EPOCH": str(epoch),
    }
    if recovery is not None:
        env["BACKSTOP_RECOVERY_DIR"] = str(recovery)
    return from_env(env)


def publish(recovery: Path, epoch: int) -> None:
    recovery.mkdir(parents=True, exist_ok=True)
    tmp = recovery / "session.tmp"
    tmp.write_text(json.dumps({"phase": "Recovering", "epochTasks": {str(epoch): "sink:0"}}))
    tmp.replace(recovery / "session.json")  # as the kubelet swaps a ConfigMap's files


def test_a_claim_records_the_operator_epoch_it_was_made_with(tmp_path: Path) -> None:
    s = Store(sink_config(tmp_path, epoch=4))
    n = s.claim_epoch()
    key = f"{s.key}/epochs/{n}"
    assert claim_rank(s.blobs, key) == 4
    assert not create_claim(s.blobs, key, 9), "a claim is exclusive"
    assert claim_rank(s.blobs, key) == 4
    assert isinstance(s.blobs, DirBlobs)
    epochs = s.blobs.path(key).parent
    assert [p.name for p in epochs.iterdir()] == [str(n)], "no temporary left"


def test_a_restarted_superseded_copy_with_a_stale_session_does_not_claim(tmp_path: Path) -> None:
    """Behind a partition the old copy's session still shows its own epoch (or none): the
    rank recorded in the newer claim alone keeps it out."""
    a = Store(sink_config(tmp_path, epoch=1))
    a.claim_epoch()
    b = Store(sink_config(tmp_path, epoch=2))
    b_epoch = b.claim_epoch()
    with pytest.raises(Fenced):
        a.check_fence()
    restarted = Store(sink_config(tmp_path, epoch=1))
    with pytest.raises(Fenced, match="outranked by store epoch 2, claimed with operator epoch 2"):
        restarted.claim_epoch()
    assert restarted.latest_epoch() == b_epoch, "no new claim"
    b.check_fence()  # B is not fenced


def test_a_copy_the_operator_superseded_is_fenced_before_claiming(tmp_path: Path) -> None:
    recovery = tmp_path / "recovery"
    publish(recovery, 2)
    old = Store(sink_config(tmp_path / "store", epoch=1, recovery=recovery))
    with pytest.raises(Fenced, match="superseded by epoch 2 published by the operator"):
        old.claim_epoch()
    assert old.latest_epoch() == 0


def test_a_later_claim_of_a_lower_rank_fences_nobody(tmp_path: Path) -> None:
    """Two copies claiming at once: the one of the lower operator epoch may get the later
    store epoch. It finds itself outranked right after claiming; the other runs on."""
    b = Store(sink_config(tmp_path, epoch=2))
    b.claim_epoch()
    assert create_claim(b.blobs, f"{b.key}/epochs/{b.epoch + 1}", 1)  # the racing old copy's
    b.check_fence()
    same_rank = Store(sink_config(tmp_path, epoch=2))
    same_rank.claim_epoch()  # a restart of the same operator epoch: the later copy wins
    with pytest.raises(Fenced, match="superseded by a newer copy"):
        b.check_fence()


@pytest.mark.timeout(180)
def test_a_fenced_copy_restarted_as_before_does_not_fence_its_successor(tmp_path: Path) -> None:
    """Copy A of the sink runs with operator epoch 1; the operator publishes epoch 2 and
    starts copy B with it, which fences A. A stays fenced without exiting; killed and
    restarted with its old environment, it finds itself fenced before claiming: B keeps
    writing and its store epoch stays the newest."""
    data = tmp_path / "input"
    write_input(data, files=2, per_file=6000)
    out = tmp_path / "out"
    store = tmp_path / "store"
    topo = LocalTopology("wordcount", wordcount_spec(data, out, rate=300.0, batch=20), store)
    recovery = store / "recovery"
    publish(recovery, 1)
    for task in topo.tasks:
        if task != "sink-0":
            topo.start(task)
    topo.start("sink-0", copy="a", BACKSTOP_EPOCH="1")
    status = topo.status
    try:
        topo.wait("copy A writing", lambda: status("sink-0").get("round", 0) >= 10)
        publish(recovery, 2)
        topo.start("sink-0", copy="b", BACKSTOP_EPOCH="2")
        topo.wait("copy A fenced", lambda: "fenced" in topo.log("a"))
        assert topo.procs["a"].poll() is None, "a fenced copy stands by instead of exiting"
        topo.wait("copy B writing", lambda: status("sink-0").get("epoch") == 2)
        b_round = status("sink-0").get("round", 0)
        topo.kill("a")
        topo.start("sink-0", copy="a", BACKSTOP_EPOCH="1")  # the kubelet restarts it
        topo.wait("copy A fenced again", lambda: topo.log("a").count("fenced:") == 2)
        topo.wait("copy B going on", lambda: status("sink-0").get("round", 0) >= b_round + 20)
        epochs = topo.root / "tasks" / "sink-0" / "epochs"
        assert sorted(int(p.name) for p in epochs.iterdir()) == [1, 2], "A claimed nothing"
        assert status("sink-0")["epoch"] == 2
        assert topo.procs["b"].poll() is None and topo.procs["a"].poll() is None
        assert "superseded by epoch 2 published by the operator" in topo.log("a")
        a = topo.procs["a"]
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=10) == 3
    finally:
        topo.stop_all()
