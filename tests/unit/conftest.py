"""Fixtures of the unit tests: a real S3 object store (SeaweedFS) for the tests that keep
data in a bucket.

``object_store_env`` starts SeaweedFS once per test session with ``hack/object-store.sh up``
in a temporary directory on free ports and stops it by its pid at the end (``down``).
Without a ``weed`` binary the tests that use it fail with the script's message.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OBJECT_STORE = ROOT / "hack" / "object-store.sh"


def _free_ports(n: int) -> list[int]:
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


@pytest.fixture(scope="session")
def object_store_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running SeaweedFS: the variables ``hack/object-store.sh env`` prints for it
    (``BACKSTOP_S3_ENDPOINT``, ``BACKSTOP_S3_BUCKET``, the credentials)."""
    ports = _free_ports(8)
    run = tmp_path_factory.mktemp("objectstore")
    env = {
        **os.environ,
        "OBJECT_STORE_DIR": str(run),
        "OBJECT_STORE_BIND": "127.0.0.1",
        "OBJECT_STORE_ADVERTISE": "127.0.0.1",
        "OBJECT_STORE_BUCKET": "data",
        "OBJECT_STORE_STOP_TIMEOUT": "2",
    }
    for i, name in enumerate(["S3", "MASTER", "VOLUME", "FILER"]):
        env[f"OBJECT_STORE_{name}_PORT"] = str(ports[i])
        env[f"OBJECT_STORE_{name}_GRPC_PORT"] = str(ports[4 + i])
    script = str(OBJECT_STORE)
    try:
        up = subprocess.run([script, "up"], env=env, capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            pytest.fail(f"hack/object-store.sh up failed:\n{up.stderr}{up.stdout}", pytrace=False)
        printed = subprocess.run(
            [script, "env"], env=env, capture_output=True, text=True, check=True
        ).stdout
        words = printed.split()
        assert words and words[0] == "export", printed
        yield dict(w.split("=", 1) for w in words[1:])
    finally:
        subprocess.run([script, "down"], env=env, capture_output=True, timeout=60)


@pytest.fixture(params=["dir", "s3"])
def data_location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh place for data (a directory, or a prefix of the bucket) and the environment
    that opens it (:func:`backstop_runtime.blobs.open_blobs`)."""
    if request.param == "dir":
        return str(tmp_path / "data"), {}
    env: dict[str, str] = request.getfixturevalue("object_store_env")
    return f"s3://{env['BACKSTOP_S3_BUCKET']}/t-{uuid.uuid4().hex[:12]}", env
