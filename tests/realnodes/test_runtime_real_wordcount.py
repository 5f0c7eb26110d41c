"""The word count example on REAL nodes: exactly-once output when a node with tasks is killed.

``examples/wordcount.yaml`` (a copy: a bounded, rate-limited source on a fixed input log,
its own node pool) is run by the operator (a host process, as in the other operator tests)
as pods of the task-runtime image ``backstop/runtime:0.1.0`` on three real nodes (kubelet +
containerd each, ``hack/real-node.sh``). The store is SeaweedFS (S3 API) on this host,
outside the nodes, as a cloud's S3 is outside a cluster: the input segments, checkpoints,
batch logs, peer registry and the sink's output objects are all in its bucket, and no task
pod mounts a host directory (checked on every pod). The operator runs without the
single-host allowance for node-local stores. Each task asks for 400m CPU, so the plan
spreads them (at most four fit a 2-CPU node under the 0.8 utilization cap) and the tasks
left on the surviving nodes must find their recreated peers on another node. Once without
failure; once with the test kit's ``nodes kill`` of the node with the most tasks mid-stream:
its kubelet, containerd and every task container get SIGKILL (checked: their processes are
gone), the node-lifecycle controller turns it NotReady and the operator recreates the lost
pods on the other nodes, where they restore their checkpoints and replay.
The sink's output (the set of lines) must be the same in both runs and equal to the counts
this test computes from the input itself (``tests/runtime_data.expected_counts``: a plain
Counter, lowercase words split on non-letters, 10-second tumbling event-time windows).

The runtime image is built by ``hack/images.sh`` (warm: seconds; cold: about 1 min, which the
e2e then reuses). Needs root: outside CI the test skips without it, under ``CI=true`` it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, VERSION
from backstop_runtime.blobs import open_blobs
from backstop_runtime.input import put_files
from backstop_runtime.sources import owner
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import (
    create_namespace,
    install_crds,
    node_ready,
    start_operator,
    stop_operator,
    wait_for,
)
from backstop_testkit.support.objectstore import ObjectStore
from backstop_testkit.support.realnodes import (
    build_runtime_image,
    containerd_socket,
    frozen_node,
    process_gone,
    process_stopped,
    real_node_pool,
    require_root,
    task_pids,
)
from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    counts_of,
    expected_counts,
    output_lines,
    output_objects,
    write_input,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

POOL = "test.backstop.dev/wordcount-pool"
STATE, SECRET = "state", "object-store"  # the topologies' key prefix and store Secret
NO_NODE_LOCAL = {"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "false"}
REF_RATE, KILL_RATE = 2000.0, 120.0  # records/s per source task
ZOMBIE_RATE = 50.0  # a run of ~60 s: the zombies write while the new copies run
FILES, PER_FILE = 2, 3000  # one input file per source task: the killed run lasts ~25 s


@dataclass
class Env:
    cluster: str
    kube: client.ApiClient
    namespace: str
    nodes: list[str]
    store: ObjectStore
    s3: dict[str, str]  # BACKSTOP_S3_ENDPOINT, AWS_*, BACKSTOP_S3_BUCKET of the store
    input: Path  # the input segments as written to the bucket, for the expected counts
    operator_log: Path
    operator: subprocess.Popen[bytes]
    uids: dict[str, str] = field(default_factory=dict)  # of the topologies created
    seen: dict[str, Any] = field(default_factory=dict)  # every task pod seen, by uid

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.kube)

    @property
    def bucket(self) -> str:
        return f"s3://{self.s3['BACKSTOP_S3_BUCKET']}"

    def status(self, topology: str, task: str) -> dict[str, Any]:
        """The task's status object, ``<prefix>/<namespace>/<name>/<uid>/tasks/<task>/``."""
        uid = self.uids.get(topology, "-")
        key = f"{self.namespace}/{topology}/{uid}/tasks/{task}/status.json"
        raw = open_blobs(f"{self.bucket}/{STATE}", self.s3).get(key)
        try:
            doc = json.loads(raw) if raw is not None else {}
        except json.JSONDecodeError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def output(self, topology: str) -> str:
        return f"{self.bucket}/{topology}/output"

    def pods(self, topology: str) -> list[Any]:
        items = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{GROUP}/topology={topology}"
        ).items
        self.seen.update((p.metadata.uid, p) for p in items)
        return [p for p in items if not p.metadata.deletion_timestamp]

    def alive(self) -> None:
        assert self.operator.poll() is None, "operator exited:\n" + self.operator_log.read_text()

    def create(
        self, name: str, rate: float, broken_count: bool = False, inp: str | None = None
    ) -> None:
        doc = yaml.safe_load(WORDCOUNT.read_text())
        doc["metadata"] = {"name": name}
        spec = doc["spec"]
        spec["store"] = {
            "objectStore": {
                "bucket": self.s3["BACKSTOP_S3_BUCKET"],
                "prefix": STATE,
                "secretRef": {"name": SECRET},  # the endpoint too, under its key "endpoint"
            }
        }
        spec["nodeSelector"] = {POOL: self.nodes[0]}
        spec["recovery"] = {"gracePeriodSeconds": 2}
        for op in spec["operators"]:
            op["resources"]["cpu"] = "400m"
            if op["name"] == "source":
                op["config"].update(
                    path=inp or f"{self.bucket}/input",
                    bounded=True,
                    maxRecordsPerSecond=rate,
                    maxRecordsPerBatch=50,
                )
            if op["name"] == "sink":
                op["config"]["path"] = self.output(name)
            if op["name"] == "count" and broken_count:
                op["config"]["windowSeconds"] = -1  # a config error: the task exits (code 2)
        created = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", doc
        )
        self.uids[name] = created["metadata"]["uid"]

    def wait_end(self, name: str, timeout: float) -> None:
        def ended() -> bool:
            self.alive()
            return self.status(name, "sink-0").get("eos") is True

        wait_for(ended, timeout, f"the end of the stream at the sink of {name}", 0.2)

    def delete(self, name: str) -> None:
        self.pods(name)
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "streamtopologies", name
            )

        def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "streamtopologies", name
                )
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait_for(gone, 90, f"{name} deleted (the operator's finalizer released)")


def host_directories(pods: list[Any]) -> list[str]:
    """``pod: volume`` for every hostPath volume of ``pods`` (none may have one)."""
    return [
        f"{p.metadata.name}: {v.name}"
        for p in pods
        for v in p.spec.volumes or []
        if v.host_path is not None
    ]


def store_secret(core: client.CoreV1Api, namespace: str, s3: dict[str, str]) -> None:
    """The Secret the topologies' ``spec.store.objectStore.secretRef`` names: the endpoint
    (this host's address, which pods reach) and the credentials."""
    data = {
        "endpoint": s3["BACKSTOP_S3_ENDPOINT"],
        "accessKeyId": s3["AWS_ACCESS_KEY_ID"],
        "secretAccessKey": s3["AWS_SECRET_ACCESS_KEY"],
    }
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=SECRET), string_data=data)
    core.create_namespaced_secret(namespace, body)


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    require_root()
    images = build_runtime_image()
    core = client.CoreV1Api(kube)
    install_crds(kube)
    namespace = f"wc-{uuid.uuid4().hex[:6]}"
    create_namespace(core, namespace)
    work = tmp_path_factory.mktemp("wordcount")
    write_input(work / "input", files=FILES, per_file=PER_FILE)
    names = [f"wc{uuid.uuid4().hex[:4]}-{i}" for i in range(3)]
    log = work / "operator.log"
    proc: subprocess.Popen[bytes] | None = None
    store = ObjectStore(work / "objectstore", for_pods=True)
    try:
        s3 = store.up()
        with real_node_pool(
            Path(cluster).parent, names, env={"REAL_NODE_IMAGES": str(images)}
        ) as nodes:
            bucket = f"s3://{s3['BACKSTOP_S3_BUCKET']}"
            put_files(f"{bucket}/input", sorted((work / "input").glob("*.jsonl")), env=s3)
            store_secret(core, namespace, s3)
            for name in nodes:
                core.patch_node(name, {"metadata": {"labels": {POOL: nodes[0]}}})
            # no single-host allowance: a node-local store would be refused
            proc = start_operator(cluster, namespace, log, extra_env=NO_NODE_LOCAL)
            e = Env(cluster, kube, namespace, nodes, store, s3, work / "input", log, proc)
            try:
                yield e
            finally:
                for st in e.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "streamtopologies"
                )["items"]:
                    with contextlib.suppress(Exception):
                        e.delete(st["metadata"]["name"])
                stop_operator(proc)
    finally:
        store.down()
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)
        shutil.rmtree(images, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(env: Env) -> list[str]:
    """The sink's lines from a run without failure."""
    t0 = time.monotonic()
    env.create("wc-ref", REF_RATE)
    env.wait_end("wc-ref", 240)
    pods = env.pods("wc-ref")
    assert len(pods) == 7
    assert all(p.spec.node_name in env.nodes for p in pods), "every task on a real node"
    assert host_directories(pods) == []
    lines = output_lines(env.output("wc-ref"), env.s3)
    env.delete("wc-ref")
    print(f"reference run: {time.monotonic() - t0:.0f}s, {len(lines)} lines")
    return lines


def test_wordcount_on_real_nodes_counts_every_word_once(reference: list[str], env: Env) -> None:
    assert reference, "the sink wrote nothing"
    assert len(reference) == len(set(reference)), "a line was written twice"
    assert counts_of(reference) == dict(expected_counts(env.input))


def under_way(env: Env, name: str, rounds: int = 40) -> list[Any]:
    """The run's 7 pods once the sink has checkpointed ``rounds`` rounds and committed
    output."""

    def ready() -> list[Any] | None:
        env.alive()
        pods = env.pods(name)
        sink = env.status(name, "sink-0")
        written = bool(output_objects(env.output(name), env.s3))
        ok = len(pods) == 7 and sink.get("round", 0) >= rounds and written
        return pods if ok else None

    pods = wait_for(ready, 240, f"{name} under way (sink output written)", 0.2)
    assert pods is not None
    assert not env.status(name, "sink-0").get("eos"), "the fault would come after the end"
    return pods


def busiest(pods: list[Any]) -> tuple[str, list[str], int]:
    """The node with the most tasks, its tasks, and how many nodes run tasks."""
    per_node: dict[str, list[str]] = {}
    for p in pods:
        per_node.setdefault(p.spec.node_name, []).append(p.metadata.labels[f"{GROUP}/task"])
    victim = max(per_node, key=lambda n: len(per_node[n]))
    return victim, sorted(per_node[victim]), len(per_node)


def wait_recreated(env: Env, name: str, lost: list[str], victim: str) -> None:
    def recreated() -> bool:
        env.alive()
        now = {p.metadata.labels[f"{GROUP}/task"]: p for p in env.pods(name)}
        return all(t in now and now[t].spec.node_name not in (None, victim) for t in lost)

    wait_for(recreated, 120, f"the lost tasks {lost} recreated on other nodes")


def exact_output(env: Env, name: str, reference: list[str], inp: Path | None = None) -> int:
    """Check the run's committed output: no line twice, the counts computed from the
    input, and (on the common input) the reference run's lines. Returns the line count."""
    lines = output_lines(env.output(name), env.s3)
    env.delete(name)
    assert len(lines) == len(set(lines)), "a line was written twice"
    if inp is None:
        assert lines == reference
    assert counts_of(lines) == dict(expected_counts(inp or env.input))
    return len(lines)


def test_killing_a_real_node_mid_stream_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    name = "wc-kill"
    t0 = time.monotonic()
    env.create(name, KILL_RATE)
    victim, lost, spread = busiest(under_way(env, name))
    sock = containerd_socket(env.cluster, victim)
    pids = list(task_pids(sock).values())
    assert pids, f"no containers on {victim}"
    epochs = {t: env.status(name, t).get("epoch") for t in lost}

    result = CliRunner().invoke(app, ["nodes", "kill", victim, "--kubeconfig", env.cluster])
    assert result.exit_code == 0, result.output
    killed_at = time.monotonic()
    wait_for(lambda: all(process_gone(p) for p in pids), 10, f"the containers of {victim} gone")
    assert not env.status(name, "sink-0").get("eos"), "the node was killed after the end"
    wait_for(lambda: not node_ready(env.core, victim), 90, f"{victim} NotReady")
    wait_recreated(env, name, lost, victim)
    env.wait_end(name, 300)
    assert spread > 1, f"every task on {victim}: nothing survived the kill"
    for t in lost:  # the lost tasks really ran again (a new epoch), on another node
        assert env.status(name, t).get("epoch", 0) > (epochs[t] or 0), t
    n = exact_output(env, name, reference)
    # the node boots again (its containers gone): the runs after this one have three nodes
    result = CliRunner().invoke(app, ["nodes", "revive", victim, "--kubeconfig", env.cluster])
    assert result.exit_code == 0, result.output
    wait_for(lambda: node_ready(env.core, victim), 120, f"{victim} Ready again")
    print(
        f"killed {victim} with {lost} {time.monotonic() - killed_at:.0f}s before the end; "
        f"run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_a_half_dead_node_whose_tasks_write_on_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    """The node's kubelet and containerd are frozen (SIGSTOP) for 60 s while its task
    containers run on: the node turns NotReady, the operator recreates its tasks elsewhere,
    and the old copies (zombies: alive, connected to the store, fenced by the new copies'
    epoch claims) go on until the node comes back and its kubelet stops them."""
    name = "wc-zombie"
    t0 = time.monotonic()
    env.create(name, ZOMBIE_RATE)
    victim, lost, spread = busiest(under_way(env, name))
    assert spread > 1, f"every task on {victim}"
    sock = containerd_socket(env.cluster, victim)
    zombies = list(task_pids(sock).values())
    assert zombies, f"no containers on {victim}"
    epochs = {t: env.status(name, t).get("epoch") for t in lost}
    with frozen_node(sock, victim) as stopped:
        frozen_at = time.monotonic()
        # a signal is delivered asynchronously: the state turns T a moment later
        wait_for(lambda: all(process_stopped(p) for p in stopped), 5, f"{victim} frozen")
        wait_for(lambda: not node_ready(env.core, victim), 90, f"{victim} NotReady")
        wait_recreated(env, name, lost, victim)

        def claimed() -> bool:  # the new copies run: each claimed a newer epoch
            return all(env.status(name, t).get("epoch", 0) > (epochs[t] or 0) for t in lost)

        wait_for(claimed, 60, f"the new copies of {lost} running")
        alive = [p for p in zombies if not process_gone(p)]
        assert alive == zombies, "the frozen node's containers must run on (a half-dead node)"
        time.sleep(max(0.0, 60 - (time.monotonic() - frozen_at)))
    resumed_at = time.monotonic()
    env.wait_end(name, 300)
    wait_for(lambda: all(process_gone(p) for p in zombies), 120, "the zombies stopped")
    n = exact_output(env, name, reference)
    print(
        f"froze {victim} with {lost} for {resumed_at - frozen_at:.0f}s; the zombies lived "
        f"{time.monotonic() - frozen_at:.0f}s; run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_the_object_store_stopped_for_10_s_mid_stream_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    """The store goes away for 10 s while every task writes checkpoints, batch logs and
    output into it, and comes back with its data: the tasks wait (each call retries up to
    its deadline, 30 s) or restart and restore, and the output is the same."""
    name = "wc-outage"
    t0 = time.monotonic()
    env.create(name, KILL_RATE)
    under_way(env, name)
    env.store.down()
    down_at = time.monotonic()
    time.sleep(10)
    env.store.up()
    outage = time.monotonic() - down_at
    env.wait_end(name, 300)
    restarts = sum(
        c.restart_count for p in env.pods(name) for c in p.status.container_statuses or []
    )
    n = exact_output(env, name, reference)
    print(
        f"store down {outage:.1f}s; {restarts} task restarts; "
        f"run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_a_new_input_segment_sorting_between_two_others_is_counted_once(
    env: Env, tmp_path: Path
) -> None:
    """A fourth segment whose name sorts between two others appears in the bucket while the
    stream runs: each of its lines is counted once and no other segment is read again."""
    name = "wc-newfile"
    assert {owner(f"part-{k:02d}.jsonl", 2) for k in (0, 2, 3)} == {0, 1}
    staging, inp = tmp_path / "staging", tmp_path / "input"
    write_input(staging, files=4, per_file=PER_FILE // 2)
    inp.mkdir()
    for k in (0, 2, 3):
        os.replace(staging / f"part-{k:02d}.jsonl", inp / f"part-{k:02d}.jsonl")
    docs = [json.loads(line) for p in inp.glob("*.jsonl") for line in p.read_text().splitlines()]
    end = max(d["ts"] for d in docs)  # the new segment goes on from there: no line is late
    late = [json.loads(line) for line in (staging / "part-01.jsonl").read_text().splitlines()]
    (staging / "part-01.jsonl").write_text(
        "".join(json.dumps({**d, "ts": d["ts"] + end}) + "\n" for d in late)
    )
    location = f"{env.bucket}/{name}/input"
    put_files(location, sorted(inp.glob("*.jsonl")), env=env.s3)
    env.create(name, KILL_RATE / 2, inp=location)
    under_way(env, name, rounds=3)
    reader = f"source-{owner('part-01.jsonl', 2)}"  # sources.owner: its choice, not the test's
    assert not env.status(name, reader).get("eos"), f"too late: {reader} is at its end"
    put_files(location, [staging / "part-01.jsonl"], env=env.s3)
    os.replace(staging / "part-01.jsonl", inp / "part-01.jsonl")
    env.wait_end(name, 300)
    expected = expected_counts(inp)
    assert sum(expected[k] for k in expected if k[0] >= end // 10 * 10 + 10) > 0  # it counts
    n = exact_output(env, name, [], inp)
    assert n == len(expected)


def test_a_task_config_error_and_a_peer_that_never_answers_show_in_the_topology_status(
    env: Env,
) -> None:
    """``count``'s config is invalid: the runtime exits with a configuration error, the
    kubelet restarts it (CrashLoopBackOff, while the pod phase stays Running), and the sink,
    whose producers never answer, turns unready (its readiness probe). The topology's Ready
    condition (``kubectl get st``, ``kubectl describe st``) names both pods and why: the
    runtime's own log line (the termination message) and the producers the sink waits for."""
    name = "wc-bad"
    env.create(name, REF_RATE, broken_count=True)

    def reported() -> dict[str, Any] | None:
        env.alive()
        st = env.custom.get_namespaced_custom_object(
            GROUP, VERSION, env.namespace, "streamtopologies", name
        )
        conds = {c["type"]: c for c in (st.get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready") or {}
        both = "NotAnswering" in ready.get("message", "") and "exit 2" in ready["message"]
        return ready if ready.get("reason") == "TaskFailing" and both else None

    ready = wait_for(reported, 120, f"{name}: Ready=False, reason TaskFailing, both pods")
    assert ready is not None and ready["status"] == "False"
    message = ready["message"]
    # each count task is between two restarts now and then (exited, or waiting to restart)
    assert re.search(rf"{name}--count-[01]: (CrashLoopBackOff|Error) \(exit 2\)", message), message
    assert "config.windowSeconds must be a positive number" in message, message
    assert f"{name}--sink-0: NotAnswering: no answer from count-0: " in message, message
    env.delete(name)


def test_no_task_pod_of_any_run_mounts_a_host_directory(env: Env) -> None:
    """Every task pod the runs above created, the recreated ones included (the module's
    tests run first): the state is in the bucket only."""
    pods = list(env.seen.values())
    assert len(pods) >= 7 + 7 + 4, f"only {len(pods)} task pods seen: did the runs above run?"
    assert host_directories(pods) == []
