"""Fixtures of the unit tests: a real S3 object store (SeaweedFS) for the tests that keep
data in a bucket.

``object_store_server`` starts SeaweedFS once per test session with ``hack/object-store.sh
up`` in a temporary directory on free ports and stops it by its pid at the end (``down``),
through :mod:`backstop_testkit.support.objectstore`; a test may stop it and start it again
(an outage: the data stays), and ``object_store_env`` gives its settings. Every test keeps
its data under a prefix of its own. Without a ``weed`` binary the tests that use it fail
with the script's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backstop_testkit.support.objectstore import ObjectStore, ObjectStoreError, alive


@pytest.fixture(scope="session")
def object_store_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ObjectStore, dict[str, str]]]:
    """A running SeaweedFS and the variables ``hack/object-store.sh env`` prints for it
    (``BACKSTOP_S3_ENDPOINT``, ``BACKSTOP_S3_BUCKET``, the credentials); at the end, a check
    that it left no process or socket."""
    store = ObjectStore(tmp_path_factory.mktemp("objectstore"), "data")
    try:
        try:
            env = store.up()
        except ObjectStoreError as err:
            pytest.fail(str(err), pytrace=False)
        yield store, env
    finally:
        store.down()
    if store.pid is None or alive(store.pid):
        pytest.fail("weed still runs after down", pytrace=False)
    if not store.sockets or any(Path(s).exists() for s in store.sockets):
        pytest.fail("sockets left in /tmp", pytrace=False)


@pytest.fixture(scope="session")
def object_store_env(object_store_server: tuple[ObjectStore, dict[str, str]]) -> dict[str, str]:
    """The session's SeaweedFS: the variables ``hack/object-store.sh env`` prints for it."""
    return object_store_server[1]


@pytest.fixture(params=["dir", "s3"])
def data_location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh place for data (a directory, or a prefix of the bucket) and the environment
    that opens it (:func:`backstop_runtime.blobs.open_blobs`)."""
    if request.param == "dir":
        return str(tmp_path / "data"), {}
    env: dict[str, str] = request.getfixturevalue("object_store_env")
    return f"s3://{env['BACKSTOP_S3_BUCKET']}/t-{uuid.uuid4().hex[:12]}", env
