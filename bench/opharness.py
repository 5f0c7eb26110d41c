"""Shared harness of the operator benchmarks against the local control plane.

Why: ``bench_operator.py`` (apply → pods) and ``bench_operator_recovery.py``
(node loss → RecoveryPlans) drive the same things: a namespace, a pool of
simulated nodes labelled ``bench.backstop.dev/pool=<name>`` (the topologies select it
with ``spec.nodeSelector``, so nodes of anyone else never count), the node simulator
in a thread, and ``backstop operator`` as a subprocess with JSON logs (JSON carries a
timestamp and a severity per line; the plain format carries neither). Timings come
from API watches (an event is seen within milliseconds of the write), not from
polling, so the benchmark adds almost no load of its own.

Everything created here is removed by :meth:`Bench.close`, also on failure and on
SIGTERM/SIGINT.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.cluster import api_client
from backstop_testkit.sim.nodesim import NodeShape, Simulator
from backstop_testkit.support.chartrights import chart_operator
from backstop_testkit.support.kubetools import (
    SINGLE_HOST_ENV,
    create_namespace,
    free_port,
    install_crds,
    stop_operator,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent
POOL_LABEL = "bench.backstop.dev/pool"
TASK_LABEL = f"{GROUP}/task"
TOPOLOGY_LABEL = f"{GROUP}/topology"
DEFAULT_KUBECONFIG = Path.home() / ".cache" / "backstop" / "run" / "kubeconfig"


def log(msg: str) -> None:
    """Progress to stderr (stdout carries the markdown)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ topologies


def chain_topology(
    name: str,
    pool: str,
    parallelism: tuple[int, int, int, int],
    *,
    cpu: str,
    bound: float,
    latency: float = 0.5,
    recovery: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``src → map (shuffle) → agg (forward) → sink (shuffle)``, one CPU size for all tasks.

    ``(50, 200, 200, 50)`` gives 500 tasks and 20 200 task edges; ``(5, 20, 20, 5)``
    gives 50 tasks.
    """
    p_src, p_map, p_agg, p_sink = parallelism

    def op(op_name: str, p: int, inputs: list[tuple[str, str]]) -> dict[str, Any]:
        return {
            "name": op_name,
            "parallelism": p,
            "resources": {"cpu": cpu, "memory": "32Mi"},
            "reprocessingLatency": latency,
            "inputs": [{"operator": o, "grouping": g} for o, g in inputs],
        }

    spec: dict[str, Any] = {
        "image": "registry.example/bench:1",
        "recoveryLatencyBound": bound,
        "nodeSelector": {POOL_LABEL: pool},
        "operators": [
            op("src", p_src, []),
            op("map", p_map, [("src", "shuffle")]),
            op("agg", p_agg, [("map", "forward")]),
            op("sink", p_sink, [("agg", "shuffle")]),
        ],
    }
    if recovery:
        spec["recovery"] = recovery
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": spec,
    }


# ------------------------------------------------------------------ watches


class Watcher:
    """A background watch on one list call; ``on_event(type, obj, seen_at)`` per event.

    Objects arrive as plain dicts (no client-side model deserialization, which would
    compete with the operator for the CPU). The watch restarts when the server ends it.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        args: tuple[Any, ...],
        on_event: Callable[[str, dict[str, Any], float], None],
        **kwargs: Any,
    ) -> None:
        self.list_fn, self.args, self.kwargs, self.on_event = list_fn, args, kwargs, on_event
        self.stop = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        rv: str | None = None  # where the last watch ended: a new one resumes from there
        while not self.stop.is_set():
            w = watch.Watch()
            since = {"resource_version": rv} if rv else {}
            try:
                self.started.set()
                for ev in w.stream(
                    self.list_fn,
                    *self.args,
                    deserialize=False,
                    timeout_seconds=30,
                    **since,
                    **self.kwargs,
                ):
                    if self.stop.is_set():
                        w.stop()
                        break
                    obj = ev.get("object")
                    if isinstance(obj, dict):
                        self.on_event(str(ev.get("type")), obj, time.time())
                # not from the start again: at 10k pods every 30 s a new watch replayed
                # them all (33 MiB), on the cores the operator is measured on
                rv = w.resource_version
            except Exception as err:  # the watch may break (410 Gone, a reset): start over
                rv = None
                if not self.stop.is_set():
                    log(f"watch restarted: {type(err).__name__}: {str(err)[:120]}")
                    time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()


@dataclass
class PodTimes:
    """When the watch first saw a pod created, bound to a node, Running."""

    topology: str
    task: str
    uids: set[str] = field(default_factory=set)
    added: float | None = None
    bound: float | None = None
    running: float | None = None
    node: str | None = None
    deleted: bool = False


class PodRecorder:
    """Per pod name: first ADDED, first nodeName, first Running; every uid seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, PodTimes] = {}

    def __call__(self, kind: str, obj: dict[str, Any], at: float) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if TOPOLOGY_LABEL not in labels:
            return
        with self.lock:
            pt = self.pods.setdefault(
                meta["name"], PodTimes(labels[TOPOLOGY_LABEL], labels.get(TASK_LABEL, ""))
            )
            pt.uids.add(str(meta.get("uid")))
            if kind == "DELETED":
                pt.deleted = True
                return
            pt.deleted = False  # a pod re-created under the same name (a recovery's)
            pt.added = pt.added or at
            node = (obj.get("spec") or {}).get("nodeName")
            if node and pt.bound is None:
                pt.bound, pt.node = at, node
            if (obj.get("status") or {}).get("phase") == "Running" and pt.running is None:
                pt.running = at

    def of(self, topology: str) -> list[PodTimes]:
        with self.lock:
            return [p for p in self.pods.values() if p.topology == topology]


@dataclass
class TopologyTimes:
    created: float | None = None
    planned: float | None = None
    ready: float | None = None
    last: dict[str, Any] = field(default_factory=dict)


class TopologyRecorder:
    """Per StreamTopology: when the plan appeared in its status, when Ready turned True."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.topologies: dict[str, TopologyTimes] = {}

    def __call__(self, kind: str, obj: dict[str, Any], at: float) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        with self.lock:
            tt = self.topologies.setdefault(meta["name"], TopologyTimes())
            tt.last = obj
            if tt.planned is None and (status.get("plan") or {}).get("assignment"):
                tt.planned = at
            for c in status.get("conditions") or []:
                if (
                    c.get("type") == "Ready"
                    and c.get("status") == "True"
                    and c.get("observedGeneration") == meta.get("generation")
                    and tt.ready is None
                ):
                    tt.ready = at

    def get(self, name: str) -> TopologyTimes:
        with self.lock:
            return self.topologies.setdefault(name, TopologyTimes())


# ------------------------------------------------------------------ the bench


def operator_log(path: Path) -> list[dict[str, Any]]:
    """The operator's JSON log lines (other lines, e.g. tracebacks, as severity "raw")."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            rec = {"message": line, "severity": "raw"}
        if isinstance(rec, dict):
            out.append(rec)
    return out


def log_time(rec: dict[str, Any]) -> float | None:
    """Epoch seconds of a JSON log line's timestamp."""
    stamp = rec.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def problems(records: list[dict[str, Any]]) -> list[str]:
    """Messages of warning/error lines and non-JSON lines (tracebacks)."""
    return [
        f"{r.get('severity')}: {str(r.get('message'))[:200]}"
        for r in records
        if r.get("severity") in ("warn", "error", "fatal", "raw")
    ]


def api_stamp(stamp: str | None) -> float:
    """Epoch seconds of an API timestamp (1 s resolution)."""
    if not stamp:
        return 0.0
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Bench:
    """Namespace + node pool + node simulator + operator, all removed by :meth:`close`."""

    def __init__(self, kubeconfig: str, workdir: Path, *, sim_interval: float = 1.0) -> None:
        self.kubeconfig = kubeconfig
        self.api = api_client(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        tag = uuid.uuid4().hex[:5]
        self.namespace = f"bench-op-{tag}"
        self.prefix = f"bo{tag}"
        self.pool = f"bench-{tag}"
        self.workdir = workdir
        self.log_path = workdir / f"operator-{tag}.log"
        self.nodes: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchers: list[Watcher] = []
        self.sim = Simulator(self.api)
        self._sim_stop = threading.Event()
        self._sim_thread: threading.Thread | None = None
        self.sim_interval = sim_interval
        self._closed = False

    # -------------------------------------------------------------- setup
    def start(self) -> None:
        install_crds(self.api)
        create_namespace(self.core, self.namespace)  # waits for the default ServiceAccount
        self._sim_thread = threading.Thread(
            target=self.sim.run, args=(self.sim_interval, self._sim_stop), daemon=True
        )
        self._sim_thread.start()
        log(f"namespace {self.namespace}, node pool {self.pool}, operator log {self.log_path}")

    def add_node(self, cpu: str, *, ready_after: float = 0.0) -> str:
        name = f"{self.prefix}-{len(self.nodes)}"
        self.nodes.append(name)  # before create: cleanup covers a half-created node
        self.sim.create(name, NodeShape(cpu=cpu), ready_after=ready_after)
        self.core.patch_node(name, {"metadata": {"labels": {POOL_LABEL: self.pool}}})
        return name

    def node_ready(self, name: str) -> bool:
        conds = self.core.read_node(name).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conds)

    def wait_nodes_ready(self, names: list[str], timeout: float = 60) -> None:
        wait_for(lambda: all(self.node_ready(n) for n in names), timeout, "pool nodes Ready")

    def start_operator(self, extra_env: dict[str, str] | None = None) -> None:
        port = free_port()
        args = ["--namespace", self.namespace, "--liveness", f"http://127.0.0.1:{port}/healthz",
                "--log-format", "json"]  # fmt: skip
        # as installed by the chart: its ServiceAccount and RBAC, not the admin's rights
        kubeconfig, args, env = chart_operator(
            self.kubeconfig,
            self.namespace,
            args,
            {**SINGLE_HOST_ENV, **(extra_env or {})},
            self.log_path.parent,
        )
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "backstop", "operator", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": kubeconfig, **env},
                cwd=ROOT,
            )
        # ready once Kopf's liveness endpoint answers
        import urllib.request

        def alive() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited early; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return True
            except OSError:
                return False

        wait_for(alive, 180, "the operator's liveness endpoint", interval=0.2)  # slow under load
        time.sleep(1.0)  # let its watches and indexes start

    def watch(
        self, list_fn: Callable[..., Any], args: tuple[Any, ...], rec: Any, **kwargs: Any
    ) -> Watcher:
        w = Watcher(list_fn, args, rec, **kwargs)
        self.watchers.append(w)
        w.started.wait(5)
        return w

    def watch_pods(self) -> PodRecorder:
        rec = PodRecorder()
        self.watch(self.core.list_namespaced_pod, (self.namespace,), rec)
        return rec

    def watch_topologies(self) -> TopologyRecorder:
        rec = TopologyRecorder()
        self.watch(
            self.custom.list_namespaced_custom_object,
            (GROUP, VERSION, self.namespace, "streamtopologies"),
            rec,
        )
        return rec

    def create_topology(self, doc: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", doc
        )
        return obj

    def get_topology(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", name
        )
        return obj

    def recoveryplans(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "recoveryplans"
        )["items"]
        return sorted(items, key=lambda p: int(p["spec"]["step"]))

    # -------------------------------------------------------------- teardown
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        log("cleaning up")
        for w in self.watchers:
            w.close()
        if self.proc is not None:
            stop_operator(self.proc)
        # with no operator left to remove Kopf's finalizers, drop them so the namespace can go
        with contextlib.suppress(ApiException):
            items = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "streamtopologies"
            )["items"]
            for item in items:
                with contextlib.suppress(ApiException):
                    self.custom.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.namespace,
                        "streamtopologies",
                        item["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)
        # pods on dead nodes never finish terminating: remove them at once (one call: at
        # 10k pods one call per pod took minutes)
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        for n in self.nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(n)
        self._sim_stop.set()
        if self._sim_thread is not None:
            self._sim_thread.join(timeout=15)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                self.core.read_namespace(self.namespace)
            except ApiException as err:
                if err.status == 404:
                    break
            time.sleep(1)
        else:
            log(f"namespace {self.namespace} still terminating; it goes on its own")


@contextlib.contextmanager
def bench(kubeconfig: str, workdir: Path, *, sim_interval: float = 1.0) -> Iterator[Bench]:
    """A started :class:`Bench`, closed on exit, on SIGTERM and on Ctrl-C."""
    b = Bench(kubeconfig, workdir, sim_interval=sim_interval)

    def on_term(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        b.start()
        yield b
    finally:
        b.close()
        signal.signal(signal.SIGTERM, old)


# ------------------------------------------------------------------ output


def fmt_s(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"
