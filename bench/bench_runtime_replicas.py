#!/usr/bin/env python3
"""Active replicas on REAL nodes: how long a lost task's output is missing at its consumers.

The selective-replication seed (*Adaptive and Selective Replication for Stream Processing*)
compares the recovery time of replicated and non-replicated operators. This measures it
where users see it: ``examples/wordcount.yaml`` (a copy: a bounded, rate-limited source on a
fixed input in an S3 bucket, one task per operator, ``spec.replication`` with room for
tokenize's and count's replicas) runs on five real nodes (kubelet + containerd each,
``hack/real-node.sh``) with the operator as a host process; the store is a SeaweedFS on this
host. The source and the sink ask for so much CPU that each runs alone, so tokenize and
count share a third node and their replicas a fourth (the fifth stays free: room for the
new replicas of promoted tasks). Once every task runs and every replica
follows its primary, the node holding the most primaries of replicated tasks is killed
(``python -m backstop_testkit nodes kill``: kubelet, containerd and containers SIGKILLed).
Every surviving task's ``/status`` is read 20 times a second; it says, per producer, the
last batch taken and from which copy (``inputs``). For each lost task and each surviving
consumer of it, **resumed** is the time from the kill (the node's first container process
gone, polled every 10 ms) to the consumer's first new batch of
that task, and **from** is the copy it came from: a replica (no gap expected) or the new
primary the operator started elsewhere (detection, pod start, restore, replay). The run
then ends and the sink's output is checked against counts computed from the input.

Beside the consumers' view, the seed's own measure: per lost task, **primary again** is the
time from the kill to a copy of the task that owns it again (labelled primary, on a live
node, its ``/status`` showing a store epoch newer than the lost primary's and caught up): a
replica promoted in place (``status.plan.promoted``, the same pod, no container restart),
or a new pod restarted elsewhere from the task's checkpoint. **new replica** is the time
until a replica of a promoted task runs again.

Needs root, a running control plane (``K8S_RUN_DIR``, default the shared one) and the
``weed`` binary (``make install``). ``--out`` writes ``docs/benchmarks/runtime-replicas.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client, config

from backstop.domain.constants import GROUP, METRICS_PORT, VERSION
from backstop_runtime.blobs import open_blobs
from backstop_runtime.input import put_files
from backstop_testkit.support.catchup import ContainerDeath
from backstop_testkit.support.docsection import emit
from backstop_testkit.support.kubetools import (
    create_namespace,
    install_crds,
    start_operator,
    stop_operator,
    wait_for,
)
from backstop_testkit.support.objectstore import ObjectStore
from backstop_testkit.support.realnodes import (
    build_runtime_image,
    real_node,
    real_node_pool,
    require_root,
)
from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    counts_of,
    expected_counts,
    output_lines,
    write_input,
)

HEADING = "## Active replicas on real nodes: a lost task's output at its consumers"
POOL = "bench.backstop.dev/replica-pool"
SAMPLE = 0.05
"""Seconds between two reads of every surviving task's ``/status``."""
WATCH = 60.0
"""Seconds after the kill within which every lost task's output must be back."""
OWNERS_EVERY = 0.1
"""Seconds between two looks at who owns the lost tasks."""


def log(msg: str) -> None:
    print(f"    [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Run:
    """One deployment: where its pods are and what its consumers saw."""

    kube: client.ApiClient
    namespace: str
    name: str
    bucket: str
    s3: dict[str, str]
    samples: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    """``(monotonic time, reader task, its /status inputs)``."""

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def topology(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", self.name
        )
        return obj

    def ended(self) -> bool:
        """Whether the sink's status in the store says the stream ended."""
        uid = self.topology()["metadata"]["uid"]
        key = f"{self.namespace}/{self.name}/{uid}/tasks/sink-0/status.json"
        raw = open_blobs(f"{self.bucket}/state", self.s3).get(key)
        with contextlib.suppress(ValueError):
            return raw is not None and json.loads(raw).get("eos") is True
        return False

    def pods(self, deleting: bool = False) -> list[Any]:
        """The deployment's pods (``deleting``: also those being deleted)."""
        items = (
            client.CoreV1Api(self.kube)
            .list_namespaced_pod(self.namespace, label_selector=f"{GROUP}/topology={self.name}")
            .items
        )
        return [p for p in items if deleting or not p.metadata.deletion_timestamp]


def copy_of(pod: Any) -> str:
    """The pod's copy name: its task, or ``<task>#r<k>`` for a replica."""
    task = pod.metadata.labels[f"{GROUP}/task"]
    if pod.metadata.labels.get(f"{GROUP}/role") != "replica":
        return str(task)
    return f"{task}#r{pod.metadata.name.rpartition('--r')[2]}"


def status(ip: str) -> dict[str, Any]:
    """A task pod's live ``/status`` (empty if it does not answer within a second)."""
    try:
        with urllib.request.urlopen(f"http://{ip}:{METRICS_PORT}/status", timeout=1) as resp:
            doc = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def manifest(run: Run, rate: float, spare_cpu: str | None, pool: str) -> dict[str, Any]:
    """The word count with a bounded input at ``rate`` records/s, replicas on ``spare_cpu``
    (none without), on the nodes labelled ``pool``."""
    doc: dict[str, Any] = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"] = {"name": run.name}
    spec = doc["spec"]
    spec["store"] = {
        "objectStore": {"bucket": run.s3["BACKSTOP_S3_BUCKET"], "prefix": "state"},
    }
    spec["store"]["objectStore"]["secretRef"] = {"name": "object-store"}
    spec["nodeSelector"] = {POOL: pool}
    spec["recovery"] = {"gracePeriodSeconds": 2}
    if spare_cpu is not None:
        spec["replication"] = {"spareCpu": spare_cpu}
    for op in spec["operators"]:
        # one task per operator; the source and the sink each alone on a node (no other
        # task fits beside 1950m on a 2-CPU node), tokenize and count
        # small on a third, their replicas on a fourth: the kill of the third leaves the
        # input and the reader of the replicated tasks alive, so only the replicas stand
        # between the kill and the sink's next batch
        op["parallelism"] = 1
        big = op["name"] in ("source", "sink")
        op["resources"]["cpu"] = "1950m" if big else "100m"
        if op["name"] == "source":
            op["config"].update(
                path=f"{run.bucket}/input",
                bounded=True,
                maxRecordsPerSecond=rate,
                maxRecordsPerBatch=20,
            )
        if op["name"] == "sink":
            op["config"]["path"] = f"{run.bucket}/{run.name}/output"
    return doc


def standing_by(copy: str) -> bool:
    """A replica of a source or a sink: it stands by (serves nothing, see the runtime)."""
    return "#" in copy and copy.startswith(("source-", "sink-"))


def following(run: Run) -> bool:
    """Every task pod runs and answers, and each replica that follows (not a source's or a
    sink's) is within 10 rounds of its primary, the sink well under way."""
    pods = run.pods()
    if not pods or any(p.status.phase != "Running" or not p.status.pod_ip for p in pods):
        return False
    rounds = {
        copy_of(p): status(p.status.pod_ip).get("round")
        for p in pods
        if not standing_by(copy_of(p))
    }
    ok = all(r is not None for r in rounds.values()) and (rounds.get("sink-0") or 0) >= 40
    ok = ok and all(
        abs(int(r) - int(rounds.get(c.split("#")[0]) or 0)) <= 10
        for c, r in rounds.items()
        if "#" in c and r is not None
    )
    if not ok and int(time.monotonic()) % 15 == 0:
        log(f"not yet: rounds {rounds}")
    return ok


def victim(run: Run) -> tuple[str, list[str], set[str]]:
    """The node with the most primaries of tasks that are neither sources nor sinks (those
    a replica can stand in for), its primaries, and the replicated tasks."""
    replicated = set((run.topology().get("status", {}).get("plan") or {}).get("replicas") or {})
    running = {
        copy_of(p): p.spec.node_name
        for p in run.pods()
        if p.metadata.labels.get(f"{GROUP}/role") != "replica"
    }
    middle = {t for t in running if not t.startswith(("source-", "sink-"))}
    per_node: dict[str, list[str]] = {}
    for task, node in running.items():
        per_node.setdefault(node, []).append(task)
    best = max(per_node, key=lambda n: (len(middle & set(per_node[n])), -len(per_node[n])))
    return best, sorted(per_node[best]), replicated


class Owners(threading.Thread):
    """Polls the topology's pods every :data:`OWNERS_EVERY` s after the kill: when each
    lost task is owned again by a primary (see the module docstring), how, and when each
    promoted task has a running replica again."""

    def __init__(self, run: Run, dead: str, lost: list[str], epochs: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.run_, self.dead, self.lost, self.epochs = run, dead, lost, epochs
        self.done, self.start_at = threading.Event(), time.monotonic()
        self.owned: dict[str, tuple[float, str]] = {}
        """Task → (seconds after the sampler started, how)."""
        self.replica_back: dict[str, float] = {}

    def run(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(Exception):
                self._look(self.run_.pods())
            time.sleep(OWNERS_EVERY)

    def _look(self, pods: list[Any]) -> None:
        now = time.monotonic() - self.start_at
        for p in pods:
            task = p.metadata.labels[f"{GROUP}/task"]
            if task not in self.lost or p.spec.node_name == self.dead:
                continue
            running = p.status.phase == "Running" and p.status.pod_ip
            if p.metadata.labels.get(f"{GROUP}/role") == "replica":
                if running and task in self.owned and "promoted" in self.owned[task][1]:
                    self.replica_back.setdefault(task, now)
                continue
            if task in self.owned or not running:
                continue
            doc = status(p.status.pod_ip)
            if (
                int(doc.get("epoch") or 0) > self.epochs.get(task, 0)
                and doc.get("recovery_seconds") is not None
            ):
                restarts = sum(c.restart_count for c in p.status.container_statuses or [])
                how = (
                    f"promoted in place ({p.metadata.name}, {restarts} restarts)"
                    if "--r" in p.metadata.name
                    else "restarted from its checkpoint"
                )
                self.owned[task] = (now, how)


class Sampler(threading.Thread):
    """Reads every given pod's ``/status`` every :data:`SAMPLE` seconds into the run."""

    def __init__(self, run: Run, pods: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.run_, self.pods, self.done = run, pods, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for copy, ip in self.pods.items():
                doc = status(ip)
                if doc:
                    self.run_.samples.append((time.monotonic(), copy, doc.get("inputs") or {}))
            time.sleep(SAMPLE)


@dataclass(frozen=True)
class Resumed:
    task: str
    replicated: bool
    consumer: str
    seconds: float | None
    source: str
    owned: float | None = None
    """Seconds from the kill until a primary owns the task again (see the docstring)."""
    how: str = "-"
    replica_back: float | None = None


def resumed(run: Run, lost: list[str], replicated: set[str], killed: float) -> list[Resumed]:
    """Per lost task and consumer that read it: the first new batch after the kill."""
    out = []
    for task in lost:
        readers = sorted({c for _, c, ins in run.samples if task in ins})
        for reader in readers:
            seen = [(t, ins[task]) for t, c, ins in run.samples if c == reader and task in ins]
            before = [d["round"] for t, d in seen if t <= killed]
            at_kill = before[-1] if before else -1
            after = [(t, d) for t, d in seen if t > killed and d["round"] > at_kill]
            first = after[0] if after else None
            out.append(
                Resumed(
                    task,
                    task in replicated,
                    reader,
                    None if first is None else first[0] - killed,
                    "-" if first is None else str(first[1]["from"]),
                )
            )
    return out


def all_back(run: Run, lost: list[str], killed: float) -> bool:
    """Whether every lost task that had a surviving reader has been read from again."""
    readers: dict[str, set[str]] = {}
    back: dict[str, set[str]] = {}
    for _, c, ins in run.samples:
        for task in lost:
            if task in ins:
                readers.setdefault(task, set()).add(c)
    for r in resumed(run, lost, set(), killed):
        if r.seconds is not None:
            back.setdefault(r.task, set()).add(r.consumer)
    return all(back.get(t, set()) >= cs for t, cs in readers.items())


def _secs(value: float | None) -> str:
    return f"not within {WATCH:.0f} s" if value is None else f"{value:.2f} s"


def section(
    args: argparse.Namespace, results: list[tuple[str | None, str, list[Resumed], int]]
) -> str:
    out = [
        HEADING,
        "",
        f"Input {args.rate:g} records/s (one source), grace period 2 s; one deployment without "
        f"replicas, then one with `spec.replication.spareCpu: {args.spare_cpu}`; in each, the "
        "node with tokenize and count killed once every task ran. Both sinks' output equals the "
        "counts computed from the input.",
        "",
        "| replicas | lost task | consumer | its output back after the kill | from "
        "| primary again after the kill | how | new replica after the kill |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, _, rows, _ in results:
        for r in rows:
            kind = "yes" if r.replicated else "no"
            out.append(
                f"| {kind} | {r.task} | {r.consumer} | {_secs(r.seconds)} | {r.source} "
                f"| {_secs(r.owned)} | {r.how} | {_secs(r.replica_back) if r.replicated else '-'} |"
            )
    out += [
        "",
        "; ".join(f"{'with' if s else 'without'}: killed {n}, {k} lines" for s, n, _, k in results)
        + ".",
    ]
    return "\n".join(out) + "\n"


def next_run(run: Run, node: str) -> None:
    """Bring the killed node back and remove the deployment (its pods gone)."""
    real_node(run_dir(), "revive", node)
    core = client.CoreV1Api(run.kube)

    def ready() -> bool:
        conds = core.read_node(node).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conds)

    wait_for(ready, 180, f"{node} Ready again", 1)
    run.custom.delete_namespaced_custom_object(
        GROUP, VERSION, run.namespace, "streamtopologies", run.name
    )
    # gone for good: a pod still terminating holds its CPU, which the next plan counts
    wait_for(lambda: not run.pods(deleting=True), 180, f"the pods of {run.name} gone", 1)


@contextlib.contextmanager
def cluster_env(args: argparse.Namespace, work: Path) -> Iterator[tuple[Run, list[str]]]:
    """Object store, real nodes, input, Secret and operator; one :class:`Run` to fill."""
    kubeconfig = str(run_dir() / "kubeconfig")
    kube = config.new_client_from_config(kubeconfig)
    images = build_runtime_image()
    install_crds(kube)
    core = client.CoreV1Api(kube)
    namespace = f"bench-rep-{uuid.uuid4().hex[:6]}"
    create_namespace(core, namespace)
    store = ObjectStore(work / "objectstore", for_pods=True)
    names = [f"rp{uuid.uuid4().hex[:4]}-{i}" for i in range(5)]
    proc = None
    try:
        s3 = store.up()
        write_input(work / "input", files=2, per_file=int(args.rate * args.seconds / 2))
        with real_node_pool(run_dir(), names, env={"REAL_NODE_IMAGES": str(images)}) as nodes:
            bucket = f"s3://{s3['BACKSTOP_S3_BUCKET']}"
            put_files(f"{bucket}/input", sorted((work / "input").glob("*.jsonl")), env=s3)
            data = {
                "endpoint": s3["BACKSTOP_S3_ENDPOINT"],
                "accessKeyId": s3["AWS_ACCESS_KEY_ID"],
                "secretAccessKey": s3["AWS_SECRET_ACCESS_KEY"],
            }
            secret = client.V1Secret(
                metadata=client.V1ObjectMeta(name="object-store"), string_data=data
            )
            core.create_namespaced_secret(namespace, secret)
            for n in nodes:
                core.patch_node(n, {"metadata": {"labels": {POOL: nodes[0]}}})
            env = {"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "false"}
            proc = start_operator(kubeconfig, namespace, work / "operator.log", extra_env=env)
            yield Run(kube, namespace, "wc-plain", bucket, s3), nodes
    finally:
        if proc is not None:
            stop_operator(proc)
        store.down()
        with contextlib.suppress(Exception):
            core.delete_namespace(namespace)


def run_dir() -> Path:
    """The control plane's run directory (as ``hack/local-cluster.sh``)."""
    return Path(os.environ.get("K8S_RUN_DIR") or Path.home() / ".cache/backstop/run")


def measure(
    run: Run, nodes: list[str], rate: float, spare: str | None
) -> tuple[list[Resumed], str]:
    """Deploy, kill the victim, sample until every lost task is read again; the rows."""
    doc = manifest(run, rate, spare, nodes[0])
    run.custom.create_namespaced_custom_object(
        GROUP, VERSION, run.namespace, "streamtopologies", doc
    )
    wait_for(lambda: following(run), 300, "every task running and every replica following", 1)
    node, lost, replicated = victim(run)
    assert spare is None or replicated, "no replica planned: the nodes have no room left"
    log(f"killing {node}: {lost}; replicated {sorted(replicated)}")
    survivors = {copy_of(p): p.status.pod_ip for p in run.pods() if p.spec.node_name != node}
    epochs = {
        copy_of(p): int(status(p.status.pod_ip).get("epoch") or 0)
        for p in run.pods()
        if copy_of(p) in lost
    }
    sampler = Sampler(run, survivors)
    sampler.start()
    owners = Owners(run, node, lost, epochs)
    time.sleep(2.0)
    death = ContainerDeath(node)  # the failure: the node's first container gone
    death.start()
    owners.start()
    real_node(run_dir(), "kill", node)
    death.join(10)
    assert death.at is not None, f"no container of {node} seen to die"
    killed = time.monotonic() - (time.time() - death.at)

    def back() -> bool:
        return time.monotonic() - killed > 5 and all_back(run, lost, killed)

    def owned() -> bool:
        promoted = [t for t, (_, how) in owners.owned.items() if "promoted" in how]
        return set(owners.owned) >= set(lost) and set(owners.replica_back) >= set(promoted)

    for what, done in (("the lost tasks read again", back), ("their owners back", owned)):
        try:
            wait_for(done, WATCH, what, 0.5)
        except AssertionError as err:  # the table says which did not come back
            log(str(err))
    sampler.done.set()
    owners.done.set()
    shift = owners.start_at - killed
    rows = []
    for r in resumed(run, lost, replicated, killed):
        at, how = owners.owned.get(r.task, (None, "-"))
        again = owners.replica_back.get(r.task)
        rows.append(
            replace(
                r,
                owned=None if at is None else at + shift,
                how=how,
                replica_back=None if again is None else again + shift,
            )
        )
    return rows, node


def keep_logs(run: Run, work: Path) -> None:
    """Every task container's log (the current and the previous one) under ``work/logs``."""
    core = client.CoreV1Api(run.kube)
    (work / "logs").mkdir(exist_ok=True)
    for pod in run.pods():
        for previous in (False, True):
            with contextlib.suppress(Exception):
                text = core.read_namespaced_pod_log(
                    pod.metadata.name, run.namespace, container="task", previous=previous
                )
                suffix = ".previous" if previous else ""
                (work / "logs" / f"{pod.metadata.name}{suffix}.log").write_text(text)
    log(f"task logs in {work / 'logs'}, the operator's in {work / 'operator.log'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rate", type=float, default=200.0, help="records/s of the source")
    ap.add_argument("--seconds", type=float, default=150.0, help="the input's length at --rate")
    ap.add_argument(
        "--spare-cpu", default="200m", help="spec.replication.spareCpu (tokenize's and count's)"
    )
    ap.add_argument("--out", action="store_true", help="write docs/benchmarks/runtime-replicas.md")
    args = ap.parse_args(argv)
    require_root()
    # SIGTERM unwinds like Ctrl-C: the nodes, the store and the operator are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    log(f"work directory (logs kept on failure): {work}")
    results = []
    with cluster_env(args, work) as (run, nodes):
        for spare in (None, args.spare_cpu):
            run.name, run.samples = ("wc-plain" if spare is None else "wc-rep"), []
            try:
                rows, node = measure(run, nodes, args.rate, spare)
                wait_for(run.ended, 300, "the end of the stream at the sink", 1)
            except AssertionError:
                keep_logs(run, work)
                raise
            lines = output_lines(f"{run.bucket}/{run.name}/output", run.s3)
            assert len(lines) == len(set(lines)), "a line was written twice"
            assert counts_of(lines) == dict(expected_counts(work / "input")), "wrong counts"
            results.append((spare, node, rows, len(lines)))
            if spare is None:  # the next deployment has all five nodes again
                next_run(run, node)
    shutil.rmtree(work, ignore_errors=True)
    out = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "runtime-replicas.md"
    return emit(
        section(args, results),
        out if args.out else None,
        HEADING,
        log,
        command="python bench/bench_runtime_replicas.py --out",
    )


if __name__ == "__main__":
    raise SystemExit(main())
