"""Real nodes for tests (``hack/real-node.sh``): start, kill and inspect them from pytest.

Shared by the tests that run on real nodes (a kubelet and a containerd per node on this host):
``tests/realnodes/test_real_nodes.py`` and the runtime's real-node tests. Real nodes need
root; outside CI a test that needs them skips with that reason, under ``CI=true`` it fails instead.
Besides killing and freezing a node, a test can cut its pods off the network for a while
(:func:`cut_node_network`): the node's kubelet goes on, so the node stays Ready.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "real-node.sh"
CACHE = Path(os.environ.get("BACKSTOP_CACHE", Path.home() / ".cache" / "backstop"))


def require_root() -> None:
    if os.geteuid() == 0:
        return
    reason = "real nodes need root (kubelet, containerd, bridges, iptables)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must run these tests as root")
    pytest.skip(reason)


def real_node(
    run_dir: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> str:
    """Run ``hack/real-node.sh ARGS`` for the test cluster; fail with its output."""
    env = {**os.environ, "K8S_RUN_DIR": str(run_dir), **(env or {})}
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"real-node.sh {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def containerd_socket(cluster: str, node: str) -> str:
    port = re.search(r"server: https://[^:]+:(\d+)", Path(cluster).read_text())
    assert port is not None
    return f"/run/backstop-{port.group(1)}/{node}/containerd.sock"


def task_pids(sock: str) -> dict[str, int]:
    """Container id -> host PID of its init process, from the node's containerd."""
    out = subprocess.run(
        ["ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {row[0]: int(row[1]) for row in rows}


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie holds no resources and runs nothing


def node_processes(sock: str, node: str) -> list[int]:
    """Host PIDs of the node's kubelet, containerd and shims (matched by their own sockets)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if f"--hostname-override={node} " in cmd or f"-address {sock} " in cmd:
                found.append(int(proc.name))
    return [p for p in found if not process_gone(p)]


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    return ""


def process_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (state ``T``)."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] == "T"
    return False


@contextlib.contextmanager
def frozen_node(sock: str, node: str) -> Iterator[list[int]]:
    """The node's kubelet and containerd stopped (SIGSTOP) for the ``with`` block, then
    continued (SIGCONT), while its containers and their shims keep running: a half-dead
    node, whose tasks go on writing while nothing on the node answers the API server.
    Yields the stopped pids."""
    pids = []
    for proc in Path("/proc").iterdir():
        cmd = _cmdline(int(proc.name)) if proc.name.isdigit() else ""
        kubelet = f"--hostname-override={node} " in cmd
        containerd = cmd.startswith("containerd --config ") and f"/{node}/containerd.toml" in cmd
        if (kubelet or containerd) and not process_gone(int(proc.name)):
            pids.append(int(proc.name))
    assert len(pids) == 2, f"kubelet and containerd of {node}: found {pids}"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def real_node_pool(
    run_dir: Path, names: list[str], env: dict[str, str] | None = None
) -> Iterator[list[str]]:
    """Start real nodes ``names`` in parallel (``hack/real-node.sh up``); ``down`` them after.

    ``env`` reaches the script (e.g. ``REAL_NODE_IMAGES``: the image archives each node imports).
    """
    full = {**os.environ, "K8S_RUN_DIR": str(run_dir), **(env or {})}
    try:
        procs = [
            subprocess.Popen(
                ["bash", str(SCRIPT), "up", name],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=full,
            )
            for name in names
        ]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        for name, proc, out in zip(names, procs, outs, strict=True):
            assert proc.returncode == 0, f"real-node.sh up {name}:\n{out}"
        yield names
    finally:
        for name in names:
            real_node(run_dir, "down", name, env=env)


def build_image(image: str) -> None:
    """``IMAGES=<image> hack/images.sh`` into ``$BACKSTOP_CACHE/images`` (cached: seconds),
    with no cluster to load it into."""
    env = {**os.environ, "IMAGES": image, "K8S_RUN_DIR": str(CACHE / "no-cluster")}
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "images.sh")],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, (
        f"IMAGES={image} hack/images.sh:\n{proc.stdout}{proc.stderr[-4000:]}"
    )


def build_runtime_image() -> Path:
    """The runtime image (:func:`build_image`); a folder with only its archive."""
    build_image("runtime")
    only = Path(tempfile.mkdtemp(prefix="backstop-runtime-image-"))
    for name in ("runtime.tar", "runtime.id"):
        (only / name).symlink_to(CACHE / "images" / "load" / name)
    return only


def node_subnet(cluster: str, node: str) -> str:
    """The pod subnet of real node ``node``: ``NET.INDEX.0/24`` (``hack/real-node.sh``'s
    ``net-info`` and ``list``)."""
    run_dir = Path(cluster).parent
    net = real_node(run_dir, "net-info").split()[0]
    for line in real_node(run_dir, "list").splitlines():
        name, index, *_ = line.split()
        if name == node:
            return f"{net}.{index}.0/24"
    raise AssertionError(f"no real node {node} in {run_dir}")


def _iptables(*args: str) -> None:
    proc = subprocess.run(
        ["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, f"iptables {' '.join(args)}: {proc.stderr}"


def tagged_rules(tag: str) -> list[str]:
    """The filter table's rules (``iptables-save`` lines) whose comment is ``tag``."""
    out = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return [line for line in out.splitlines() if line.startswith("-A ") and tag in line]


@dataclass(frozen=True)
class NetworkCut:
    """A node's pods cut off: their subnet, and the comment on each rule of the cut."""

    node: str
    subnet: str
    tag: str


@contextlib.contextmanager
def cut_node_network(cluster: str, node: str) -> Iterator[NetworkCut]:
    """The pods of real node ``node`` cut off the network for the ``with`` block: every
    packet between them and the other nodes' pods, and between them and this host (the
    operator, the object store, the API server), is dropped, as in a network partition
    around the machine. Its pods still reach each other (its bridge), and its kubelet and
    containerd, which live in the host's network namespace and talk to the API server on
    this host's address, go on: the node stays Ready. The rules (iptables, filter table,
    inserted first in ``FORWARD``, ``INPUT`` and ``OUTPUT``) carry a comment of their own,
    by which they, and only they, are removed at the end, whatever happened."""
    cut = NetworkCut(node, node_subnet(cluster, node), f"backstop-cut-{uuid.uuid4().hex[:12]}")
    sub = cut.subnet
    rules = [
        ("FORWARD", "-s", sub, "!", "-d", sub),  # to the other nodes' pods
        ("FORWARD", "-d", sub, "!", "-s", sub),  # from them
        ("INPUT", "-s", sub),  # to this host
        ("OUTPUT", "-d", sub),  # from this host
    ]
    try:
        for chain, *match in rules:
            _iptables("-I", chain, "1", *match, "-m", "comment", "--comment", cut.tag, "-j", "DROP")
        yield cut
    finally:
        for line in tagged_rules(cut.tag):
            _iptables("-D", *shlex.split(line)[1:])
        left = tagged_rules(cut.tag)
        assert not left, f"rules of {cut.tag} left in place: {left}"
