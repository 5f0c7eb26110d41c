"""Real nodes (a kubelet and a containerd per node on this host, ``hack/real-node.sh``).

What the node simulator cannot show: that the test kit's ``nodes kill`` really ends a node's
processes (its kubelet, shims and every container), that a revived node comes back with its
containers gone, and that ``kubectl logs`` reaches the kubelet of every real node (the API
server prefers each node's InternalIP and its own kubelet port). The task pods here are made
by the real operator from a tiny image (busybox from Debian, built without a container
engine); ``make e2e`` runs the real task runtime on real nodes with the operator in-cluster.

Real nodes need root. Outside CI these tests skip with that reason when not root; under
``CI=true`` they fail instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, NODE_KIND_LABEL, VERSION
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import (
    ROOT,
    install_crds,
    node_ready,
    start_operator,
    stop_operator,
    wait_for,
)
from backstop_testkit.support.realnodes import (
    CACHE,
    containerd_socket,
    node_processes,
    process_gone,
    real_node,
    require_root,
    task_pids,
)

pytestmark = pytest.mark.cluster

TASK_IMAGE = "backstop/test-task:1"
POOL = "test.backstop.dev/real-pool"
SHOW_TEMPLATE = (
    'echo "$SECRET_TOKEN|${WHO:-none}|$BACKSTOP_NODE_NAME"; cat /etc/settings/greeting.txt'
)
"""Run in a task's container: the env from the Secret and the template, the mounted file."""
DEDICATED = {"key": "test.backstop.dev/dedicated", "value": "streams", "effect": "NoSchedule"}


# ---------------------------------------------------------------- fixtures
def task_image(dest: Path) -> Path:
    """A one-layer image archive: Debian's static busybox, printing who it is, then sleeping.

    The operator runs it as the task image: the entrypoint echoes the runtime contract's
    environment so ``kubectl logs`` has something to show.
    """
    root = dest / "rootfs"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(CACHE / "images" / "busybox" / "rootfs" / "bin" / "busybox", root / "bin")
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        tar.add(root / "bin" / "busybox", arcname="bin/busybox")
        for tool in ("sh", "sleep", "echo", "cat"):
            info = tarfile.TarInfo(f"bin/{tool}")
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)
    data = layer.getvalue()
    layer_id = hashlib.sha256(data).hexdigest()
    script = (
        'trap "exit 0" TERM; echo "task $BACKSTOP_TASK_ID ($BACKSTOP_ROLE) up"; '
        "while true; do sleep 1; done"
    )
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            # a numeric non-root user: task pods run with runAsNonRoot (restricted)
            "config": {"Entrypoint": ["/bin/sh", "-c", script], "User": "65532:65532"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        }
    ).encode()
    config_id = hashlib.sha256(config).hexdigest()
    out = dest / "test-task.tar"
    manifest = [{"Config": f"{config_id}.json", "RepoTags": [TASK_IMAGE], "Layers": ["l.tar"]}]
    with tarfile.open(out, "w") as tar:
        for name, blob in (
            ("l.tar", data),
            (f"{config_id}.json", config),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return out


@pytest.fixture(scope="module")
def real_nodes(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Two real nodes in the test cluster, with the test task image; removed afterwards."""
    require_root()
    core = client.CoreV1Api(kube)
    endpoint = core.read_namespaced_endpoints("kubernetes", "default").subsets[0].addresses[0].ip
    if endpoint.startswith("127."):
        pytest.fail(
            "the running control plane advertises 127.0.0.1, so it was started by an older "
            "hack/local-cluster.sh (no ServiceAccount admission, kubelets reached by name): "
            "restart it with `make cluster-down cluster-up`"
        )
    run_dir = Path(cluster).parent
    real_node(run_dir, "deps")
    image_dir = tmp_path_factory.mktemp("image")
    task_image(image_dir)
    names = [f"rn{uuid.uuid4().hex[:5]}-{i}" for i in range(2)]
    try:
        for name in names:
            # the node imports only the test image (not what `make images` built)
            real_node(run_dir, "up", name, env={"REAL_NODE_IMAGES": str(image_dir)})
            core.patch_node(name, {"metadata": {"labels": {POOL: names[0]}}})
        yield names
    finally:
        for name in names:
            real_node(run_dir, "down", name)


def busybox_pod(name: str, node: str, command: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "c",
                    "image": TASK_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", command],
                    "resources": {"requests": {"cpu": "10m"}},
                }
            ],
        },
    }


def container_id(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    statuses = pod.status.container_statuses or []
    if pod.status.phase != "Running" or not statuses or not statuses[0].state.running:
        return None
    cid = statuses[0].container_id or ""
    return cid if cid.startswith("containerd://") else None


# ---------------------------------------------------------------- tests
def test_real_nodes_are_labelled_and_report_the_hosts_cpus(
    real_nodes: list[str], kube: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube)
    for name in real_nodes:
        node = core.read_node(name)
        assert node.metadata.labels[NODE_KIND_LABEL] == "real"
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        assert node.status.allocatable["cpu"] == str(os.cpu_count())
        addresses = {a.type: a.address for a in node.status.addresses}
        assert not addresses["InternalIP"].startswith("127.")
    result = CliRunner().invoke(app, ["nodes", "list"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[1:]}
    for name in real_nodes:
        assert rows[name][1:3] == ["real", "True"]


def test_kill_ends_the_nodes_processes_and_revive_brings_it_back_without_them(
    real_nodes: list[str], kube: client.ApiClient, cluster: str, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    node = real_nodes[1]
    sock = containerd_socket(cluster, node)
    core.create_namespaced_pod(
        namespace, busybox_pod("victim", node, "echo started; exec sleep 2147483647")
    )
    cid = wait_for(lambda: container_id(core, namespace, "victim"), 60, "the pod in a container")
    assert cid is not None
    cid = cid.removeprefix("containerd://")
    pid = task_pids(sock)[cid]
    assert b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes(), "the container's own process"
    assert node_processes(sock, node), "kubelet, containerd and a shim run before the kill"

    result = CliRunner().invoke(app, ["nodes", "kill", node, "--kubeconfig", cluster])
    assert result.exit_code == 0, result.output
    assert "SIGKILL" in result.output
    wait_for(lambda: process_gone(pid), 10, f"the container's process {pid} to be gone")
    assert node_processes(sock, node) == [], "kubelet, containerd and shims are gone too"
    wait_for(lambda: not node_ready(core, node), 90, f"{node} NotReady (node-lifecycle controller)")
    assert node_ready(core, real_nodes[0]), "the other real node is untouched"

    result = CliRunner().invoke(app, ["nodes", "revive", node, "--kubeconfig", cluster])
    assert result.exit_code == 0, result.output
    wait_for(lambda: node_ready(core, node), 60, f"{node} Ready again")
    assert process_gone(pid)
    # as after a reboot: the old container does not run; the kubelet starts the pod anew
    new = wait_for(
        lambda: (c := container_id(core, namespace, "victim")) and c != f"containerd://{cid}",
        90,
        "a new container for the pod",
    )
    assert new
    assert cid not in task_pids(sock)
    core.delete_namespaced_pod("victim", namespace, grace_period_seconds=0)


def test_cli_refuses_unknown_nodes_and_real_nodes_of_another_cluster(
    real_nodes: list[str], cluster: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, ["nodes", "kill", "no-such-node", "--kubeconfig", cluster])
    assert result.exit_code == 1 and "node no-such-node not found" in result.output
    assert "Traceback" not in result.output
    # a kubeconfig copied elsewhere has no real-node script next to it
    elsewhere = tmp_path / "kubeconfig"
    elsewhere.write_text(Path(cluster).read_text())
    result = CliRunner().invoke(
        app, ["nodes", "kill", real_nodes[0], "--kubeconfig", str(elsewhere)]
    )
    assert result.exit_code == 2 and "REAL_NODES=2 make cluster-up" in result.output
    assert "Traceback" not in result.output


def pod_template(secret: str, settings: str) -> dict[str, Any]:
    """The topology's pod template: env from a Secret, a ConfigMap volume, a toleration."""
    return {
        "metadata": {"labels": {"team": "streams"}},
        "spec": {
            "tolerations": [{**DEDICATED, "operator": "Equal"}],
            "volumes": [{"name": "settings", "configMap": {"name": settings}}],
            "containers": [
                {
                    "name": "task",
                    "env": [
                        {
                            "name": "SECRET_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}},
                        }
                    ],
                    "volumeMounts": [
                        {"name": "settings", "mountPath": "/etc/settings", "readOnly": True}
                    ],
                }
            ],
        },
    }


def exec_in(kubectl: str, cluster: str, namespace: str, pod: str, script: str) -> str | None:
    """``kubectl exec POD -- sh -c SCRIPT``: its output, or ``None`` while it fails."""
    out = subprocess.run(
        [kubectl, "--kubeconfig", cluster, "exec", "-n", namespace, pod, "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return out.stdout if out.returncode == 0 else None


def test_kubectl_logs_of_task_pods_on_every_real_node(
    real_nodes: list[str], kube: client.ApiClient, cluster: str, namespace: str, tmp_path: Path
) -> None:
    """The operator places a topology on the real nodes; kubectl logs works on each task pod.

    One of the two nodes is tainted NoSchedule and the topology's pod template tolerates
    it: the plan needs both nodes, so it uses the tainted one, and the task
    there sees the env value from the Secret and the file of the mounted ConfigMap.
    """
    kubectl = shutil.which("kubectl") or str(ROOT / ".tools" / "bin" / "kubectl")
    assert os.access(kubectl, os.X_OK), "kubectl missing: run `make tools`"
    install_crds(kube)
    core = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    token = f"s3cret-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"token": token}}
    )
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"greeting.txt": "hello, tasks"}}
    )
    tainted = real_nodes[1]
    core.patch_node(tainted, {"spec": {"taints": [DEDICATED]}})
    # each source task takes over half a node, so the plan needs both real nodes
    cpu = float(core.read_node(real_nodes[0]).status.allocatable["cpu"])
    spec = {
        "image": TASK_IMAGE,
        "recoveryLatencyBound": 1.5,
        "nodeSelector": {POOL: real_nodes[0]},
        "podTemplate": pod_template("creds", "settings"),
        "operators": [
            {
                "name": "src",
                "parallelism": 2,
                "resources": {"cpu": f"{int(cpu * 550)}m", "memory": "32Mi"},
                "reprocessingLatency": 0.5,
                "podTemplate": {
                    "spec": {
                        "containers": [{"name": "task", "env": [{"name": "WHO", "value": "src"}]}]
                    }
                },
            },
            {
                "name": "sink",
                "parallelism": 1,
                "resources": {"cpu": "100m", "memory": "32Mi"},
                "reprocessingLatency": 0.5,
                "inputs": [{"operator": "src", "grouping": "shuffle"}],
            },
        ],
    }
    doc = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": "logs"},
        "spec": spec,
    }
    log = tmp_path / "operator.log"
    proc = start_operator(cluster, namespace, log)
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "streamtopologies", doc)

        def running() -> list[Any] | None:
            assert proc.poll() is None, "operator exited:\n" + log.read_text()
            pods = core.list_namespaced_pod(
                namespace, label_selector=f"{GROUP}/topology=logs"
            ).items
            ok = len(pods) == 3 and all(
                p.status.phase == "Running"
                and (p.status.container_statuses or [None])[0] is not None
                and (p.status.container_statuses[0].container_id or "").startswith("containerd://")
                for p in pods
            )
            return pods if ok else None

        pods = wait_for(running, 120, "3 task pods Running in containerd containers")
        assert pods is not None
        assert {p.spec.node_name for p in pods} == set(real_nodes), "tasks on both real nodes"
        on_tainted = [p for p in pods if p.spec.node_name == tainted]
        assert on_tainted, f"no task on the tainted node {tainted}"
        for pod in on_tainted:
            assert pod.metadata.labels["team"] == "streams"
            out = exec_in(
                kubectl,
                cluster,
                namespace,
                pod.metadata.name,
                SHOW_TEMPLATE,
            )
            assert out is not None, f"kubectl exec into {pod.metadata.name} failed"
            who = "src" if pod.metadata.labels[f"{GROUP}/operator"] == "src" else "none"
            assert out.splitlines() == [f"{token}|{who}|{tainted}", "hello, tasks"], out
        for pod in pods:
            task = pod.metadata.labels[f"{GROUP}/task"]

            def logs(name: str = pod.metadata.name) -> str | None:
                out = subprocess.run(
                    [kubectl, "--kubeconfig", cluster, "logs", "-n", namespace, name],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                return out.stdout if out.returncode == 0 and out.stdout else None

            text = wait_for(
                logs, 30, f"kubectl logs of {pod.metadata.name} on {pod.spec.node_name}"
            )
            assert text is not None and f"task {task} (primary) up" in text, text
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "streamtopologies", "logs"
        )

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "streamtopologies", "logs"
                )
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait_for(gone, 60, "the topology deleted (operator's finalizer released)")
    finally:
        stop_operator(proc)
        core.patch_node(tainted, {"spec": {"taints": None}})
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "streamtopologies",
                "logs",
                {"metadata": {"finalizers": None}},
            )
