"""Fixtures of the unit tests: a real S3 object store (SeaweedFS) for the tests that keep
data in a bucket.

``object_store_env`` starts SeaweedFS once per test session with ``hack/object-store.sh up``
in a temporary directory on free ports and stops it by its pid at the end (``down``), through
:mod:`backstop_testkit.support.objectstore`.
Without a ``weed`` binary the tests that use it fail with the script's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backstop_testkit.support.objectstore import ObjectStoreError, running_object_store


@pytest.fixture(scope="session")
def object_store_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running SeaweedFS: the variables ``hack/object-store.sh env`` prints for it
    (``BACKSTOP_S3_ENDPOINT``, ``BACKSTOP_S3_BUCKET``, the credentials)."""
    try:
        with running_object_store(tmp_path_factory.mktemp("objectstore"), "data") as env:
            yield env
    except ObjectStoreError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(params=["dir", "s3"])
def data_location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh place for data (a directory, or a prefix of the bucket) and the environment
    that opens it (:func:`backstop_runtime.blobs.open_blobs`)."""
    if request.param == "dir":
        return str(tmp_path / "data"), {}
    env: dict[str, str] = request.getfixturevalue("object_store_env")
    return f"s3://{env['BACKSTOP_S3_BUCKET']}/t-{uuid.uuid4().hex[:12]}", env
