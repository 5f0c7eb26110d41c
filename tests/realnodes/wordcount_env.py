"""The word count on three real nodes, shared by the real-node runtime tests.

One environment (:class:`Env`) for every module under ``tests/realnodes`` that runs the word
count (``examples/wordcount.yaml``, a copy per run) on real nodes: three nodes (kubelet +
containerd each, ``hack/real-node.sh``), a SeaweedFS object store on this host, outside the
nodes (input segments, checkpoints, batch logs, the peer registry and the sink's output are
all in its bucket), and the operator as a host process, without the single-host allowance
for node-local stores. ``tests/realnodes/conftest.py`` starts it once for the package
(:func:`open_env`), with the helpers the tests share: a run under way, the node with the
most tasks, the failure's moment when it is killed, each lost task's catch-up against the
topology's bound (:mod:`backstop_testkit.support.catchup`), the lost tasks recreated
elsewhere, and the exact output.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.kubeio import plan_age
from backstop_runtime.blobs import Blobs, open_blobs
from backstop_runtime.input import put_files
from backstop_testkit.cli import app
from backstop_testkit.support.catchup import CatchUp, ContainerDeath, steady_lags
from backstop_testkit.support.kubetools import (
    create_namespace,
    install_crds,
    start_operator,
    stop_operator,
    wait_for,
)
from backstop_testkit.support.objectstore import ObjectStore
from backstop_testkit.support.realnodes import build_runtime_image, real_node_pool, require_root
from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    counts_of,
    expected_counts,
    output_lines,
    output_objects,
    write_input,
)

POOL = "test.backstop.dev/wordcount-pool"
STATE, SECRET = "state", "object-store"  # the topologies' key prefix and store Secret
NO_NODE_LOCAL = {"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "false"}
STEADY_SECONDS = 3.0  # the steady stream before a kill: each task's median lag
REF_RATE, KILL_RATE = 2000.0, 120.0  # records/s per source task
ZOMBIE_RATE = 50.0  # a run of ~60 s: the zombies write while the new copies run
BOUND_RATE = 40.0  # 0.8 rounds/s of 50 records: a run of ~75 s, 60 rounds in all
BOUND_ROUNDS = 10  # the kill at about round 14 (after the steady lags): ~58 s of input left
FILES, PER_FILE = 2, 3000  # one input file per source task: a run at KILL_RATE lasts ~25 s


@dataclass(frozen=True)
class Placement:
    """Where a run's tasks may go: the topology's node selector, each task's CPU request
    and, when set, its recovery latency bound (seconds)."""

    selector: dict[str, str]
    cpu: str = "400m"
    bound: float | None = None


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
    blobs: dict[str, Blobs] = field(default_factory=dict)  # the tasks' state, opened once

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
        if STATE not in self.blobs:  # one client: a status is read up to 10 times a second
            self.blobs[STATE] = open_blobs(f"{self.bucket}/{STATE}", self.s3)
        raw = self.blobs[STATE].get(key)
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

    @contextlib.contextmanager
    def operator_with(self, extra_env: dict[str, str]) -> Iterator[None]:
        """The operator restarted with ``extra_env`` for the ``with`` block (it gives its
        Lease up when it stops, so the next one leads at once), then as before."""
        stop_operator(self.operator)
        self.operator = start_operator(
            self.cluster,
            self.namespace,
            self.operator_log,
            extra_env={**NO_NODE_LOCAL, **extra_env},
        )
        try:
            yield
        finally:
            stop_operator(self.operator)
            self.operator = start_operator(
                self.cluster, self.namespace, self.operator_log, extra_env=NO_NODE_LOCAL
            )

    def alive(self) -> None:
        assert self.operator.poll() is None, "operator exited:\n" + self.operator_log.read_text()

    def create(
        self,
        name: str,
        rate: float,
        broken_count: bool = False,
        inp: str | None = None,
        placement: Placement | None = None,
        replication: str | None = None,
        batch: int = 50,
    ) -> None:
        """Create the word count ``name`` (400m CPU per task on the pool's nodes, unless
        ``placement`` says otherwise; active replicas on ``replication`` spare CPU; source
        rounds of ``batch`` records)."""
        where = placement or Placement({POOL: self.nodes[0]})
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
        spec["nodeSelector"] = dict(where.selector)
        if where.bound is not None:
            spec["recoveryLatencyBound"] = where.bound
        spec["recovery"] = {"gracePeriodSeconds": 2}
        if replication is not None:
            spec["replication"] = {"spareCpu": replication}
        for op in spec["operators"]:
            op["resources"]["cpu"] = where.cpu
            if op["name"] == "source":
                op["config"].update(
                    path=inp or f"{self.bucket}/input",
                    bounded=True,
                    maxRecordsPerSecond=rate,
                    maxRecordsPerBatch=batch,
                )
            if op["name"] == "sink":
                op["config"]["path"] = self.output(name)
            if op["name"] == "count" and broken_count:
                op["config"]["windowSeconds"] = -1  # a config error: the task exits (code 2)
        self.submit(doc)

    def submit(self, doc: dict[str, Any]) -> None:
        """Create the StreamTopology ``doc`` in the namespace (its uid kept: its state's key)."""
        created = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", doc
        )
        self.uids[doc["metadata"]["name"]] = created["metadata"]["uid"]

    def save_logs(self, name: str, folder: Path) -> Path:
        """Every pod's log of ``name`` that the API server still serves (a killed node's
        pods are gone with it), one file per pod under ``folder``, for a failure's story."""
        folder.mkdir(parents=True, exist_ok=True)
        for p in self.pods(name):
            try:
                text = self.core.read_namespaced_pod_log(p.metadata.name, self.namespace)
            except ApiException as err:
                text = f"(no log: {err.status} {err.reason})"
            (folder / f"{p.metadata.name}.log").write_text(text)
        return folder

    def settled(self, timeout: float = 150.0) -> None:
        """Wait until no pod of an earlier run is left in the namespace (the bound tests do,
        before they create their run; nothing else runs beside them). A deleted run's pods
        are deleted by the garbage collector a moment after their topology, and hold their
        CPU on their nodes (for the scheduler and the operator's capacity ledger alike)
        until the API server removes them; the kubelets here (v1.20) remove a stopped pod
        only after their container garbage collection, once a minute. A node killed before
        that would leave its tasks no room to be recovered in."""

        def none_left() -> bool:
            return not self.core.list_namespaced_pod(self.namespace).items

        wait_for(none_left, timeout, "the pods of the runs before deleted", 0.5)

    def bound(self, name: str) -> float:
        """The topology's ``spec.recoveryLatencyBound`` R, as the API server holds it."""
        st = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", name
        )
        return float(st["spec"]["recoveryLatencyBound"])

    def story(self, name: str) -> str:
        """What the operator recorded of ``name``'s recoveries, for a failure's message: its
        ``status.recovery`` and ``status.restore`` and its Events, oldest first."""
        st = (
            self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "streamtopologies", name
            ).get("status")
            or {}
        )
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        said = [
            f"  {e.last_timestamp or e.event_time} {e.reason}: {e.message}"
            for e in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time))
        ]
        return "\n".join(
            [f"recovery: {st.get('recovery')}", f"restore: {st.get('restore')}", *said]
        )

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


def recovery_plans(env: Env, name: str) -> list[dict[str, Any]]:
    """The specs of the run's RecoveryPlans (one per recovery step), oldest first (by
    session, then step: every session numbers its steps from 1); read them before the
    topology is deleted (they are its dependents)."""
    items = env.custom.list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "recoveryplans", label_selector=f"{GROUP}/topology={name}"
    )["items"]
    return [p["spec"] for p in sorted(items, key=plan_age)]


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


def watch_lost(env: Env, name: str, tasks: list[str], lost: list[str]) -> CatchUp:
    """Each task's median lag over :data:`STEADY_SECONDS` of the steady stream (the run
    under way); the ``lost`` tasks' watch from then on (their store epochs now)."""
    status = functools.partial(env.status, name)
    env.alive()
    return CatchUp(status, lost, steady_lags(status, tasks, STEADY_SECONDS, 0.25))


def kill_node(env: Env, victim: str) -> float:
    """Kill ``victim`` with the test kit's CLI (``nodes kill``); the failure: the moment its
    first container process was gone (epoch seconds, :class:`ContainerDeath`)."""
    death = ContainerDeath(victim)
    assert death.pids, f"no container on {victim}"
    death.start()
    result = CliRunner().invoke(app, ["nodes", "kill", victim, "--kubeconfig", env.cluster])
    failure = death.moment(5.0)
    assert result.exit_code == 0, result.output
    assert failure is not None, f"no container of {victim} seen gone within 5 s of the kill"
    return failure


def caught_up_within_bound(env: Env, name: str, catch: CatchUp, failure: float) -> float:
    """Watch the lost tasks until each one's new copy has caught up (or R + 30 s passed);
    assert that each did within the topology's R from ``failure``. Returns R."""
    bound = env.bound(name)
    catch.watch(failure + bound + 30.0)
    took = catch.since(failure)
    times = ", ".join(f"{t} {s:.2f} s" for t, s in sorted(took.items(), key=lambda x: x[1]))
    assert len(took) == len(catch.lost), (
        f"{name}: {bound + 30:g} s after the failure (R = {bound:g} s + 30 s), "
        f"{catch.late()} (caught up: {times or 'none'})\n{env.story(name)}"
    )
    worst = max(took.values())
    assert worst <= bound, (
        f"{name}: a lost task caught up {worst:.2f} s after the failure, over the "
        f"topology's recoveryLatencyBound R = {bound:g} s (from the failure: {times})\n"
        f"{env.story(name)}"
    )
    return bound


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


@contextlib.contextmanager
def open_env(cluster: str, kube: client.ApiClient, work: Path, nodes: int = 3) -> Iterator[Env]:
    """The environment: the nodes, the store with the input segments, the operator; every
    topology left is deleted, and everything stopped, at the end."""
    require_root()
    images = build_runtime_image()
    core = client.CoreV1Api(kube)
    install_crds(kube)
    namespace = f"wc-{uuid.uuid4().hex[:6]}"
    create_namespace(core, namespace)
    write_input(work / "input", files=FILES, per_file=PER_FILE)
    names = [f"wc{uuid.uuid4().hex[:4]}-{i}" for i in range(nodes)]
    log = work / "operator.log"
    store = ObjectStore(work / "objectstore", for_pods=True)
    try:
        s3 = store.up()
        with real_node_pool(
            Path(cluster).parent, names, env={"REAL_NODE_IMAGES": str(images)}
        ) as up:
            bucket = f"s3://{s3['BACKSTOP_S3_BUCKET']}"
            put_files(f"{bucket}/input", sorted((work / "input").glob("*.jsonl")), env=s3)
            store_secret(core, namespace, s3)
            for name in up:
                core.patch_node(name, {"metadata": {"labels": {POOL: up[0]}}})
            # no single-host allowance: a node-local store would be refused
            proc = start_operator(cluster, namespace, log, extra_env=NO_NODE_LOCAL)
            e = Env(cluster, kube, namespace, up, store, s3, work / "input", log, proc)
            try:
                yield e
            finally:
                for st in e.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "streamtopologies"
                )["items"]:
                    with contextlib.suppress(Exception):
                        e.delete(st["metadata"]["name"])
                stop_operator(e.operator)
    finally:
        store.down()
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)
        shutil.rmtree(images, ignore_errors=True)
