"""Fencing by epochs the operator decides (pure assignment + the runtime)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from backstop.domain.constants import LABEL_TASK
from backstop.domain.fencing import bump_epochs, fenced_tasks
from backstop.domain.spec import expand, parse_spec
from backstop.k8s.manifests import Owner, desired_pods, pod_name
from backstop.k8s.sessionmap import build_session_configmap
from backstop_runtime.fencing import published_epoch
from backstop_testkit.support.runtime_data import output_objects, wordcount_spec, write_input
from backstop_testkit.support.runtime_harness import LocalTopology

OWNER = Owner("wc", "ns", "uid")


def _spec() -> Any:
    return parse_spec(
        {
            "image": "img",
            "recoveryLatencyBound": 5,
            "operators": [
                {"name": "src", "reprocessingLatency": 0.5},
                {"name": "sink", "reprocessingLatency": 0.5, "inputs": [{"operator": "src"}]},
            ],
        }
    )


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_fault03_a_task_recreated_off_a_lost_node_gets_a_newer_epoch() -> None:
    spec = _spec()
    graph = expand(spec)
    first = {"src-0": "n1", "sink-0": "n1"}
    before = desired_pods(OWNER, spec, graph, frozenset(), first)
    old_pod = {
        "metadata": {"name": pod_name("wc", "sink-0"), "labels": {LABEL_TASK: "sink-0"}},
        "spec": {"nodeName": "n1"},
    }
    moved = {"src-0": "n1", "sink-0": "n2"}
    after = desired_pods(OWNER, spec, graph, frozenset(), moved)
    fenced = fenced_tasks([old_pod], after, lost_nodes={"n1"})
    assert fenced == {"sink-0"}
    epochs = bump_epochs({}, fenced)
    assert epochs == {"sink-0": 1}
    fenced_pods = desired_pods(OWNER, spec, graph, frozenset(), moved, epochs=epochs)
    assert _env(fenced_pods[pod_name("wc", "sink-0")])["BACKSTOP_EPOCH"] == "1"
    assert (
        fenced_pods[pod_name("wc", "sink-0")]["metadata"]["annotations"][
            "streams.backstop.dev/epoch"
        ]
        == "1"
    )
    # the first copy carries no epoch: adding epochs restarts no running pod
    assert "BACKSTOP_EPOCH" not in _env(before[pod_name("wc", "sink-0")])
    assert (
        before[pod_name("wc", "src-0")]["metadata"]["annotations"]
        == fenced_pods[pod_name("wc", "src-0")]["metadata"]["annotations"]
    )
    # a second loss of the same task: strictly newer again
    assert bump_epochs(epochs, ["sink-0"]) == {"sink-0": 2}
    # the node came back before the move (not lost): no new epoch needed
    assert fenced_tasks([old_pod], after, lost_nodes=set()) == set()
    cm = build_session_configmap(OWNER, graph, [], {"active": True, "step": 1}, epochs=epochs)
    doc = json.loads(cm["data"]["session.json"])
    assert doc["epochTasks"] == {"1": "sink:0"}  # task lists as runs (docs/scale.md)
    assert published_epoch(doc, "sink-0") == 1 and published_epoch(doc, "src-0") == 0


@pytest.mark.timeout(120)
def test_fault03_old_copy_stops_writing_once_a_newer_epoch_is_published(tmp_path: Path) -> None:
    """The old copy of the sink (BACKSTOP_EPOCH=1) runs with a store of its own, as behind a
    partition: the store's epochs cannot reach it. Once the session file publishes epoch 2
    for its task, it writes nothing more and stands by until stopped (then exits with
    code 3)."""
    data = tmp_path / "input"
    data.mkdir()
    write_input(data, files=2, per_file=4000)
    out = tmp_path / "out"
    topo = LocalTopology(
        "wordcount", wordcount_spec(data, out, rate=300.0, batch=20), tmp_path / "store"
    )
    topo.env["sink-0"]["BACKSTOP_EPOCH"] = "1"
    session = tmp_path / "store" / "recovery" / "session.json"
    session.parent.mkdir(parents=True)
    session.write_text(json.dumps({"phase": "Completed", "epochs": {"sink-0": 1}}))
    topo.start_all()
    try:
        topo.wait("the sink writing", lambda: bool(output_objects(out)))
        old = topo.procs["sink-0"]
        assert old.poll() is None, "its own epoch is the published one: it runs"
        tmp = session.with_suffix(".tmp")
        tmp.write_text(json.dumps({"phase": "Recovering", "epochs": {"sink-0": 2}}))
        tmp.replace(session)  # as the kubelet swaps a ConfigMap volume's files
        published = len(output_objects(out))
        topo.wait("the old copy fenced", lambda: "superseded by epoch 2" in topo.log("sink-0"))
        stopped = len(output_objects(out))
        assert stopped - published <= 1, "at most the commit in flight when it was published"
        time.sleep(1.0)
        assert len(output_objects(out)) == stopped, "a fenced copy writes nothing more"
        for task, proc in topo.procs.items():
            assert proc.poll() is None, f"{task} runs (the fenced copy stands by)"
        old.send_signal(signal.SIGTERM)
        assert old.wait(timeout=10) == 3
    finally:
        topo.stop_all()


def test_fault03_a_malformed_epoch_is_a_configuration_error() -> None:
    from backstop_runtime.config import ConfigError, from_env

    env = {
        "BACKSTOP_TOPOLOGY": "wc",
        "BACKSTOP_TASK_ID": "sink-0",
        "BACKSTOP_OPERATOR": "sink",
        "BACKSTOP_TASK_INDEX": "0",
        "BACKSTOP_EPOCH": "two",
    }
    with pytest.raises(ConfigError, match="BACKSTOP_EPOCH"):
        from_env(env)
    assert from_env({**env, "BACKSTOP_EPOCH": "2"}).epoch == 2
