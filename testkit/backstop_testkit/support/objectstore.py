"""A real object store for tests: SeaweedFS started by ``hack/object-store.sh`` on free ports.

:class:`ObjectStore` runs the script's ``up``, ``env`` and ``down`` with a run directory
and ports of its own, so tests start a private store in a temporary directory and stop it
by its pid (never by name). :meth:`ObjectStore.down` then :meth:`ObjectStore.up` again is a
store outage: the data stays in the run directory, so the store comes back with its objects.
Without a ``weed`` binary ``up`` fails with the script's message.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "object-store.sh"


class ObjectStoreError(Exception):
    """The script failed; the message holds its output."""


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports of 127.0.0.1 that nothing listens on now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one that is not reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def parse_exports(text: str) -> dict[str, str]:
    """``{"A": "1", "B": "2"}`` from ``export A=1 B=2``.

    >>> parse_exports("export A=1 B=x=y")
    {'A': '1', 'B': 'x=y'}
    """
    words = text.split()
    if not words or words[0] != "export":
        raise ObjectStoreError(f"not an export line: {text!r}")
    return dict(w.split("=", 1) for w in words[1:])


def host_address() -> str:
    """This host's address that pods of real nodes reach (the source of its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("1.1.1.1", 9))  # no packet is sent: this picks the route's source
        return str(s.getsockname()[0])


class ObjectStore:
    """One SeaweedFS under ``run`` (its data, log, pid file) serving bucket ``bucket``; on
    127.0.0.1 only, or with ``for_pods`` on every address, its endpoint this host's address
    (pods of the real nodes, in their own network namespaces, reach it there)."""

    def __init__(self, run: Path, bucket: str = "backstop", *, for_pods: bool = False) -> None:
        self.run = run
        ports = free_ports(8)
        self.script_env = {
            **os.environ,
            "OBJECT_STORE_DIR": str(run),
            "OBJECT_STORE_BIND": "0.0.0.0" if for_pods else "127.0.0.1",
            "OBJECT_STORE_ADVERTISE": host_address() if for_pods else "127.0.0.1",
            "OBJECT_STORE_BUCKET": bucket,
            "OBJECT_STORE_STOP_TIMEOUT": "2",  # then SIGKILL: nothing here outlives the tests
        }
        for i, name in enumerate(["S3", "MASTER", "VOLUME", "FILER"]):
            self.script_env[f"OBJECT_STORE_{name}_PORT"] = str(ports[i])
            self.script_env[f"OBJECT_STORE_{name}_GRPC_PORT"] = str(ports[4 + i])
        self.pid: int | None = None
        self.sockets: list[str] = []

    def _script(self, verb: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), verb],
            env=self.script_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def up(self) -> dict[str, str]:
        """Start the store (again); the variables ``hack/object-store.sh env`` prints."""
        done = self._script("up")
        if done.returncode != 0:
            raise ObjectStoreError(f"hack/object-store.sh up failed:\n{done.stderr}{done.stdout}")
        pidfile, sockets = self.run / "weed.pid", self.run / "sockets"
        self.pid = int(pidfile.read_text()) if pidfile.exists() else None
        self.sockets = sockets.read_text().split() if sockets.exists() else []
        return parse_exports(self._script("env").stdout)

    def down(self) -> None:
        """Stop the store by its pid; its data stays for a later :meth:`up`."""
        self._script("down", timeout=60)


@contextmanager
def running_object_store(
    run: Path, bucket: str = "backstop", *, for_pods: bool = False
) -> Iterator[dict[str, str]]:
    """A running SeaweedFS for the ``with`` block: its S3 settings (``BACKSTOP_S3_*``,
    ``AWS_*``); stopped at the end, with a check that it left no process or socket."""
    store = ObjectStore(run, bucket, for_pods=for_pods)
    try:
        yield store.up()
    finally:
        store.down()
    if store.pid is None or alive(store.pid):
        raise ObjectStoreError("weed still runs after down")
    if not store.sockets or any(Path(s).exists() for s in store.sockets):
        raise ObjectStoreError("sockets left in /tmp")
