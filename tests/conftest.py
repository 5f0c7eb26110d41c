"""Shared fixtures: the real local control plane and the node simulator.

Tests that need Kubernetes use the ``cluster`` fixture. It reuses a control plane
that is already up (``make cluster-up``) or starts one with ``hack/local-cluster.sh``
and stops it again at the end of the session. It never skips: when the control
plane cannot start, the tests that need it fail with the script's output.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from backstop.k8s.cluster import api_client
from backstop_testkit.sim.nodesim import Simulator
from backstop_testkit.support.kubetools import create_namespace

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "hack" / "local-cluster.sh"
CACHE = Path(os.environ.get("BACKSTOP_CACHE", Path.home() / ".cache" / "backstop"))
RUN_DIR = Path(os.environ.get("K8S_RUN_DIR") or CACHE / "run")  # as hack/local-cluster.sh
KUBECONFIG = RUN_DIR / "kubeconfig"


def _reachable(kubeconfig: Path) -> bool:
    if not kubeconfig.exists():
        return False
    try:
        api = api_client(str(kubeconfig))
        client.VersionApi(api).get_code(_request_timeout=3)
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def cluster() -> Iterator[str]:
    """Path of a kubeconfig for a running local control plane."""
    started = False
    if not _reachable(KUBECONFIG):
        # Nodes turn NotReady 15 s after their last heartbeat (the script's default is 20 s):
        # the simulator beats every second and a real kubelet renews its Lease every 10 s,
        # and every node-loss test waits this long once.
        env = {**os.environ, "NODE_MONITOR_GRACE": os.environ.get("NODE_MONITOR_GRACE", "15s")}
        proc = subprocess.run(
            [str(SCRIPT), "up"], capture_output=True, text=True, timeout=1800, check=False, env=env
        )
        if proc.returncode != 0 or not _reachable(KUBECONFIG):
            pytest.fail(
                "the local control plane did not start:\n" + proc.stdout + proc.stderr[-4000:]
            )
        started = True
    os.environ["KUBECONFIG"] = str(KUBECONFIG)
    yield str(KUBECONFIG)
    if started:
        subprocess.run([str(SCRIPT), "down"], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def kube(cluster: str) -> client.ApiClient:
    return api_client(cluster)


@pytest.fixture(scope="session")
def simulator(kube: client.ApiClient) -> Iterator[Simulator]:
    """The node simulator's heartbeat loop, running in a background thread."""
    sim = Simulator(kube)
    stop = threading.Event()
    thread = threading.Thread(target=sim.run, args=(1.0, stop), daemon=True)
    thread.start()
    yield sim
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def namespace(kube: client.ApiClient) -> Iterator[str]:
    """A fresh namespace, deleted after the test."""
    core = client.CoreV1Api(kube)
    name = f"t-{uuid.uuid4().hex[:8]}"
    create_namespace(core, name)  # waits for its default ServiceAccount (admission)
    yield name
    core.delete_namespace(name)


@pytest.fixture
def node_prefix(kube: client.ApiClient) -> Iterator[str]:
    """A unique prefix for simulated nodes; those nodes are deleted after the test."""
    prefix = f"n{uuid.uuid4().hex[:6]}"
    yield prefix
    core = client.CoreV1Api(kube)
    for node in core.list_node().items:
        if node.metadata.name.startswith(prefix + "-"):
            core.delete_node(node.metadata.name)
