"""Helpers for tests against the local control plane: CRDs, the operator process, waiting."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from backstop.domain.constants import GROUP, VERSION
from backstop_testkit.sim.nodesim import NodeShape, Simulator
from backstop_testkit.support.chartrights import chart_operator

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def hack_script(name: str) -> ModuleType:
    """``hack/<name>.py`` as a module: the scripts there are no package, and their tests
    call their functions instead of parsing what they print."""
    spec = importlib.util.spec_from_file_location(f"hack_{name}", ROOT / "hack" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``pred`` until it returns something truthy; fail naming ``what``."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = pred()
        except ApiException as err:
            last = err
        else:
            if last:
                return last  # type: ignore[no-any-return]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def create_namespace(core: client.CoreV1Api, name: str, timeout: float = 30) -> None:
    """Create a namespace and wait for its ``default`` ServiceAccount and that account's token.

    With the ServiceAccount admission plugin on (as on any real cluster), the API server
    refuses pods in a namespace until the ServiceAccount controller has created that account
    and the token controller has given it a token Secret ("No API token found").
    """
    core.create_namespace({"metadata": {"name": name}})

    def has_token() -> bool:
        try:
            sa = core.read_namespaced_service_account("default", name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return bool(sa.secrets)

    wait_for(has_token, timeout, f"the default ServiceAccount of namespace {name}", 0.2)


def install_crds(api: client.ApiClient) -> None:
    """Create or replace the project's CRDs and wait until they are established."""
    ext = client.ApiextensionsV1Api(api)
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            old = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = old.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
        except ApiException as err:
            if err.status != 404:
                raise
            ext.create_custom_resource_definition(crd)

        def established(n: str = name) -> bool:
            conds = ext.read_custom_resource_definition(n).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conds)

        wait_for(established, 30, f"CRD {name} established")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SINGLE_HOST_ENV = {"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "true"}
"""The operator environment of the local cluster: its nodes (simulated, or real kubelets on
this host) all see the host's directories, so the examples' ``hostPath`` store is shared
(``extra_env`` may override it, e.g. to test the refusal)."""


def start_operator(
    kubeconfig: str,
    namespace: str,
    log: Path,
    extra: tuple[str, ...] = (),
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``backstop operator`` for one namespace (``extra`` arguments), logging to ``log``
    (``extra_env``: more environment, e.g. an armed ``BACKSTOP_FAULT_POINT``).

    ``kubeconfig`` is the admin's; the operator runs as the chart's ServiceAccount with the
    chart's rights for these arguments (:mod:`.chartrights`), so a verb the chart does not
    grant fails the test with a 403."""
    port = free_port()
    args = ["--namespace", namespace, "--liveness", f"http://127.0.0.1:{port}/healthz",
            "--log-format", "plain", *extra]  # fmt: skip
    env = {**SINGLE_HOST_ENV, **(extra_env or {})}
    kubeconfig, args, env = chart_operator(kubeconfig, namespace, args, env, log.parent)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "backstop", "operator", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": kubeconfig, **env},
        )


def stop_operator(proc: subprocess.Popen[bytes]) -> None:
    """Stop an operator we started (by its PID), forcefully if it lingers."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def operator_process(
    kubeconfig: str, namespace: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``backstop operator`` for the duration of a ``with`` block."""
    proc = start_operator(kubeconfig, namespace, log)
    try:
        yield proc
    finally:
        stop_operator(proc)


def topology_manifest(path: Path, name: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    if name:
        doc["metadata"]["name"] = name
    return doc


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
LABEL = f"{GROUP}/topology"
POOL_LABEL = "test.backstop.dev/pool"


@dataclass
class Env:
    kubeconfig: str
    namespace: str
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    nodes: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    created: list[str] = field(default_factory=list)
    simulator: Simulator | None = None
    pool: str = ""
    operator_env: dict[str, str] = field(default_factory=dict)
    """Environment every start of this env's operator gets (operator-wide settings)."""
    metrics_port: int | None = None
    """The operator serves ``/metrics`` on this port (``--metrics-port``) when set."""

    def cleanup(self) -> None:
        """Delete the topologies a test created and wait for their pods to go."""
        for name in self.created:
            with contextlib.suppress(ApiException):
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "streamtopologies", name
                )
        for name in self.created:
            # pods on killed (or already deleted) test nodes would stay Terminating
            for pod in self.pods(name):
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_pod(
                        pod.metadata.name, self.namespace, grace_period_seconds=0
                    )
            wait_for(partial(self.no_pods, name), 60, f"pods of {name} to go")
        self.created.clear()

    def no_pods(self, name: str) -> bool:
        return self.pods(name) == []

    def restart_operator(self, extra_env: dict[str, str] | None = None) -> None:
        if self.proc is not None:
            stop_operator(self.proc)
        env = {**self.operator_env, **(extra_env or {})}
        extra = () if self.metrics_port is None else ("--metrics-port", str(self.metrics_port))
        self.proc = start_operator(self.kubeconfig, self.namespace, self.log, extra, extra_env=env)

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The operator's ``/metrics`` over HTTP: ``{(sample, labels): value}``."""
        assert self.metrics_port is not None
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def get(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", name
        )
        return obj

    def create(self, doc: dict[str, Any]) -> None:
        """Create a topology; unless it selects nodes itself, it runs on this env's nodes."""
        self.created.append(doc["metadata"]["name"])
        doc["spec"].setdefault("nodeSelector", {POOL_LABEL: self.pool})
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "streamtopologies", doc
        )

    def pods(self, name: str) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL}={name}").items
        )

    def wait_condition(
        self,
        name: str,
        ctype: str,
        status: str,
        timeout: float = 60,
        reason: str | None = None,
    ) -> Any:
        """Wait until condition ``ctype`` of the current generation has ``status`` (and reason)."""

        def ok() -> dict[str, Any] | None:
            obj = self.get(name)
            c = condition(obj, ctype)
            gen = obj["metadata"]["generation"]
            current = c is not None and c.get("observedGeneration") == gen
            if current and c and c["status"] == status and reason in (None, c.get("reason")):
                return obj
            return None

        return wait_for(ok, timeout, f"{name}: {ctype}={status} {reason or ''}")


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    conds = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conds)


def topology_env(
    kubeconfig: str,
    kube: client.ApiClient,
    simulator: Simulator,
    tmp: Path,
    *,
    node_cpu: str,
    nodes: int,
    operator_env: Mapping[str, str] | None = None,
    metrics: bool = False,
) -> Iterator[Env]:
    """A namespace, fresh simulated nodes and a running operator (``operator_env``: its
    operator-wide settings; serving ``/metrics`` with ``metrics``); all removed afterwards."""
    install_crds(kube)
    core = client.CoreV1Api(kube)
    ns = f"op-{uuid.uuid4().hex[:6]}"
    create_namespace(core, ns)
    prefix = f"op{uuid.uuid4().hex[:4]}"
    names = labelled_nodes(core, simulator, prefix, nodes, node_cpu)
    e = Env(kubeconfig, ns, core, client.CustomObjectsApi(kube), names, tmp / "operator.log")
    e.simulator = simulator
    e.pool = prefix
    e.operator_env = dict(operator_env or {})
    e.metrics_port = free_port() if metrics else None
    e.restart_operator()
    try:
        yield e
    finally:
        if e.proc is not None:
            stop_operator(e.proc)
        core.delete_namespace(ns)
        for n in core.list_node().items:
            if n.metadata.name.startswith(prefix + "-"):
                with contextlib.suppress(ApiException):
                    core.delete_node(n.metadata.name)


def env_fixture(
    tmp: str,
    *,
    node_cpu: str,
    nodes: int,
    metrics: bool = False,
    operator_env: Mapping[str, str] | None = None,
) -> Callable[..., Iterator[Env]]:
    """A module-scoped ``env`` fixture: :func:`topology_env` with these nodes (its log under
    a temporary directory named ``tmp``). Assign it in the module: ``env = env_fixture(...)``."""

    @pytest.fixture(scope="module")
    def env(
        cluster: str, kube: client.ApiClient, simulator: Simulator, tmp_path_factory: Any
    ) -> Iterator[Env]:
        yield from topology_env(
            cluster,
            kube,
            simulator,
            tmp_path_factory.mktemp(tmp),
            node_cpu=node_cpu,
            nodes=nodes,
            metrics=metrics,
            operator_env=operator_env,
        )

    return env


def cleanup_fixture() -> Callable[..., Iterator[None]]:
    """An autouse fixture deleting what each test created (``_cleanup = cleanup_fixture()``)."""

    @pytest.fixture(autouse=True)
    def _cleanup(env: Env) -> Iterator[None]:
        yield
        env.cleanup()

    return _cleanup


class Pool:
    """Simulated nodes of one test, all labelled ``POOL_LABEL=<name>``."""

    def __init__(self, env: Env) -> None:
        assert env.simulator is not None
        self.env, self.sim = env, env.simulator
        self.name = f"p{uuid.uuid4().hex[:5]}"
        self.nodes: list[str] = []

    def add(self, cpu: str, *, ready_after: float = 0.0) -> str:
        node = f"{self.name}-{len(self.nodes)}"
        self.sim.create(node, NodeShape(cpu=cpu), ready_after=ready_after)
        self.sim.core.patch_node(node, {"metadata": {"labels": {POOL_LABEL: self.name}}})
        self.nodes.append(node)
        return node

    def wait_ready(self, nodes: list[str] | None = None) -> None:
        todo = nodes or self.nodes
        wait_for(lambda: all(node_ready(self.sim.core, n) for n in todo), 30, f"{todo} Ready")

    def delete(self) -> None:
        for n in self.nodes:
            with contextlib.suppress(ApiException):
                self.sim.core.delete_node(n)


def pool_fixture(*, cleanup: bool) -> Callable[..., Iterator[Pool]]:
    """A ``pool`` fixture: a fresh :class:`Pool` per test, its nodes deleted after it (and,
    with ``cleanup``, the test's topologies first)."""

    @pytest.fixture
    def pool(env: Env) -> Iterator[Pool]:
        p = Pool(env)
        yield p
        if cleanup:
            env.cleanup()
        p.delete()

    return pool


def labelled_nodes(
    core: client.CoreV1Api,
    simulator: Simulator,
    prefix: str,
    count: int,
    cpu: str,
    *,
    wait: bool = True,
) -> list[str]:
    """``count`` simulated nodes ``<prefix>-<i>`` of ``cpu`` in two zones, labelled
    ``POOL_LABEL=<prefix>`` (and Ready, with ``wait``)."""
    nodes = [f"{prefix}-{i}" for i in range(count)]
    for i, n in enumerate(nodes):
        simulator.create(n, NodeShape(cpu=cpu), zone=f"zone-{i % 2}")
        core.patch_node(n, {"metadata": {"labels": {POOL_LABEL: prefix}}})
    if wait:
        wait_for(lambda: all(node_ready(core, n) for n in nodes), 30, f"{prefix} nodes Ready")
    return nodes


def plans(env: Env, name: str) -> list[dict[str, Any]]:
    """The topology's RecoveryPlans, by step."""
    items = env.custom.list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "recoveryplans", label_selector=f"{GROUP}/topology={name}"
    )["items"]
    return sorted(items, key=lambda p: p["spec"]["step"])


def recovery(env: Env, name: str) -> dict[str, Any]:
    """``status.recovery`` of the topology (``{}`` when none)."""
    return dict((env.get(name).get("status") or {}).get("recovery") or {})
