"""Blob stores: the durable state of the task runtime as whole objects under string keys.

A task keeps checkpoints, epochs, its peer address and its logs in a store that every copy of
every task reaches, wherever it runs. Two kinds of store serve that:

* :class:`DirBlobs`, a directory shared by all nodes (a host directory locally, a
  ReadWriteMany volume on a cluster);
* :class:`S3Blobs`, a bucket of an object store through the S3 API, for a cluster of separate
  machines that share no file system.

Both offer the same operations (:class:`Blobs`). Objects are written whole: a reader sees the
previous content or the new one, never a part. :meth:`Blobs.create` writes a key only if it
is absent, atomically across processes and machines; fencing builds on it (two copies of a
task that claim the same epoch at once: exactly one gets it).

Keys are relative, ``/``-separated paths such as ``"topo/tasks/split-0/epochs/3"``. No part
may be empty, ``.`` or ``..``, or start with a dot: hidden names are the directory store's
temporary files, which :meth:`Blobs.list` never shows. No key is also the folder of another
(``a`` beside ``a/b``): a directory cannot hold both, so :class:`DirBlobs` refuses the
second with an :class:`OSError`.

:func:`open_blobs` picks the store from a location: ``s3://bucket/prefix`` or a directory.
"""

from __future__ import annotations

import abc
import contextlib
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from backstop_runtime.config import ConfigError

T = TypeVar("T")

DEFAULT_REGION = "us-east-1"
DEFAULT_DEADLINE = 30.0
"""Seconds an :class:`S3Blobs` operation keeps retrying an unreachable store."""


class StoreError(Exception):
    """The store refuses an operation for a reason a retry does not cure (a missing bucket,
    wrong credentials, a missing client library); the message says which."""


class StoreUnavailable(StoreError):
    """The store cannot be reached, or keeps failing, for longer than the deadline."""


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid key, else raise :class:`ValueError`.

    >>> check_key("topo/tasks/a-0/epochs/3")
    'topo/tasks/a-0/epochs/3'
    >>> check_key("topo/../etc")
    Traceback (most recent call last):
    ...
    ValueError: invalid store key 'topo/../etc': parts must be non-empty and not start with '.'
    """
    parts = key.split("/")
    if not key or any(not p or p.startswith(".") for p in parts):
        raise ValueError(
            f"invalid store key {key!r}: parts must be non-empty and not start with '.'"
        )
    return key


class Blobs(abc.ABC):
    """Whole objects under string keys; the operations every store offers."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes | None:
        """The content of ``key``, or ``None`` if there is no such key."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` to ``key`` whole, replacing what was there."""

    @abc.abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` to ``key`` only if the key is absent.

        Of several callers racing on one key, from any processes or machines, exactly one
        gets ``True``. A caller that needs to tell its own write from an equal one by
        another caller (after a retried request) puts a token of its own in ``data``.

        Returns
        -------
        bool
            ``True`` if this call created the key, ``False`` if it existed (its content
            stays).
        """

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """The keys that start with ``prefix`` (a string prefix, not only whole parts),
        sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; removing an absent key does nothing."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""
        return self.get(key) is not None

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """The length in bytes of each key that starts with ``prefix``: from the listing
        where the store's listing has it, so nothing is fetched to learn it."""
        return {k: len(data) for k in self.list(prefix) if (data := self.get(k)) is not None}

    def get_range(self, key: str, start: int) -> bytes | None:
        """The content of ``key`` from byte ``start`` to its end (empty at or past the
        end), or ``None`` if there is no such key: a reader of a long object resumes at
        an offset without fetching what it read already."""
        data = self.get(key)
        return None if data is None else data[start:]


def _fsync_dir(path: Path) -> None:
    """Make a rename or link in the directory ``path`` durable (where the OS allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory; the data is synced
        pass
    finally:
        os.close(fd)


class DirBlobs(Blobs):
    """Objects as files under ``root``, a directory every task reaches.

    Each write goes to a temporary file of a name no other writer uses (a random UUID, not
    the process id, which is 1 in every container), is flushed to disk, and is then renamed
    into place (:meth:`put`) or linked to its key only if the key is absent
    (:meth:`create`), so a reader never sees a partial file.

    Examples
    --------
    >>> import tempfile
    >>> blobs = DirBlobs(Path(tempfile.mkdtemp()))
    >>> blobs.get("t/epochs/1") is None
    True
    >>> blobs.create("t/epochs/1", b"a"), blobs.create("t/epochs/1", b"b")
    (True, False)
    >>> blobs.put("t/status.json", b"{}")
    >>> blobs.get("t/epochs/1"), blobs.list("t/"), blobs.list("t/e")
    (b'a', ['t/epochs/1', 't/status.json'], ['t/epochs/1'])
    >>> blobs.delete("t/epochs/1"); blobs.exists("t/epochs/1")
    False
    """

    def __init__(self, root: Path, *, sync: bool = True) -> None:
        self.root = Path(root)
        self.sync = sync

    def __repr__(self) -> str:
        return f"DirBlobs({str(self.root)!r})"

    def path(self, key: str) -> Path:
        """The file that holds ``key``."""
        return self.root / check_key(key)

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def get_range(self, key: str, start: int) -> bytes | None:
        try:
            with self.path(key).open("rb") as f:
                f.seek(start)
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _write_temp(self, path: Path, data: bytes) -> Path:
        """A complete, flushed temporary file beside ``path`` holding ``data``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("xb") as f:
                f.write(data)
                if self.sync:
                    f.flush()
                    os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def put(self, key: str, data: bytes) -> None:
        path = self.path(key)
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if self.sync:
            _fsync_dir(path.parent)

    def create(self, key: str, data: bytes) -> bool:
        """See :meth:`Blobs.create`: a hard link of a complete temporary file to the key,
        which fails if the key exists. On NFS a retransmitted ``link`` can report that the
        key exists although it made it; the temporary file's link count then says so (the
        lock-file method of the Linux ``open(2)`` manual page, section on ``O_EXCL``)."""
        path = self.path(key)
        tmp = self._write_temp(path, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return os.stat(tmp).st_nlink == 2
            if self.sync:
                _fsync_dir(path.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        head, _, _ = prefix.rpartition("/")
        start = self.root / head if head else self.root
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if rel == "." else rel + "/"
            out.extend(
                base + name
                for name in filenames
                if not name.startswith(".") and (base + name).startswith(prefix)
            )
        return sorted(out)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            self.path(key).unlink()

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()


_RETRIED_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "OperationAborted", "ConditionalRequestConflict"}
)
"""S3 error codes that a retry can cure (besides every 5xx status). Of concurrent
conditional writes, S3 may answer 409 ``ConditionalRequestConflict`` to all but one; the
retried write then fails its condition or succeeds."""
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
_RANGE_CODES = frozenset({"InvalidRange", "416"})


def _code(err: Any) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _retried(err: Any) -> bool:
    status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status >= 500 or _code(err) in _RETRIED_CODES


class S3Blobs(Blobs):
    """Objects in ``bucket`` under ``prefix`` of an object store, through the S3 API (boto3).

    :meth:`create` is a conditional ``PutObject`` (``If-None-Match: *``), which the store
    refuses with 412 if the key exists: atomic across machines. An operation that cannot
    reach the store (refused or dropped connections, timeouts, 5xx answers) is retried with
    a backoff (0.05 s doubling to 1 s) until ``deadline`` seconds have passed, then raises
    :class:`StoreUnavailable`; an answer that a retry cannot change (no such bucket, wrong
    credentials) raises :class:`StoreError` at once. boto3 is imported here, so a directory
    store works without it.

    Parameters
    ----------
    endpoint
        The store's URL, such as ``http://10.0.0.5:18333``; ``None`` for AWS itself.
    bucket, prefix
        Where the keys live: key ``k`` is object ``prefix/k`` of ``bucket``.
    access_key, secret_key
        The credentials; ``None`` leaves them to boto3's own search (its environment
        variables, files and instance roles).
    region
        The region that requests are signed for.
    deadline
        Seconds an operation keeps retrying before :class:`StoreUnavailable`.
    connect_timeout, read_timeout
        Seconds one request waits to connect and for an answer.
    """

    def __init__(
        self,
        endpoint: str | None,
        bucket: str,
        prefix: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = DEFAULT_REGION,
        *,
        deadline: float = DEFAULT_DEADLINE,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
    ) -> None:
        try:
            import boto3
            import botocore.exceptions as bex
            from botocore.config import Config
        except ImportError as err:
            raise StoreError(f"an s3:// store needs boto3, which is not installed ({err})") from err
        if not bucket:
            raise ValueError("S3Blobs needs a bucket name")
        self.endpoint, self.bucket, self.deadline = endpoint, bucket, deadline
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        config = Config(
            connect_timeout=min(connect_timeout, max(deadline, 0.1)),
            read_timeout=read_timeout,
            retries={"total_max_attempts": 1},  # retried here, up to the deadline
            s3={"addressing_style": "path"} if endpoint else None,
        )
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
            config=config,
        )
        self._client_error: type[Exception] = bex.ClientError
        self._net_errors: tuple[type[Exception], ...] = (
            bex.ConnectionError,
            bex.HTTPClientError,
            bex.IncompleteReadError,
        )

    def __repr__(self) -> str:
        return f"S3Blobs({self.endpoint or 'aws'}, s3://{self.bucket}/{self.prefix})"

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried while the store is unreachable, up to the deadline."""
        end = time.monotonic() + self.deadline
        delay = 0.05
        while True:
            try:
                return fn()
            except self._net_errors as err:
                last: Exception = err
            except self._client_error as err:
                if not _retried(err):
                    raise StoreError(f"{self!r}: {what}: {err}") from err
                last = err
            left = end - time.monotonic()
            if left <= 0:
                raise StoreUnavailable(
                    f"{self!r}: {what} failed for {self.deadline:g} s: {last}"
                ) from last
            time.sleep(min(delay, left))
            delay = min(delay * 2, 1.0)

    def get(self, key: str) -> bytes | None:
        full = self.prefix + check_key(key)

        def attempt() -> bytes | None:
            try:
                obj = self._client.get_object(Bucket=self.bucket, Key=full)
            except self._client_error as err:
                if _code(err) in _MISSING_CODES:
                    return None
                raise
            return bytes(obj["Body"].read())

        return self._call(f"get {key}", attempt)

    def get_range(self, key: str, start: int) -> bytes | None:
        """See :meth:`Blobs.get_range`: a ranged ``GetObject``; the store answers 416
        ``InvalidRange`` for a start at or past the end, which reads as empty."""
        if start <= 0:
            return self.get(key)
        full = self.prefix + check_key(key)

        def attempt() -> bytes | None:
            try:
                obj = self._client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes={start}-")
            except self._client_error as err:
                if _code(err) in _MISSING_CODES:
                    return None
                if _code(err) in _RANGE_CODES:
                    return b""
                raise
            return bytes(obj["Body"].read())

        return self._call(f"get {key} from {start}", attempt)

    def put(self, key: str, data: bytes) -> None:
        full = self.prefix + check_key(key)
        self._call(
            f"put {key}",
            lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=data),
        )

    def create(self, key: str, data: bytes) -> bool:
        """See :meth:`Blobs.create`. If an earlier attempt of this call may have reached
        the store before its connection failed, a refusal of the retry can be this call's
        own write: then the key's content decides (equal to ``data``: created here)."""
        full = self.prefix + check_key(key)
        attempts = 0

        def attempt() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
            except self._client_error as err:
                if _code(err) not in _EXISTS_CODES:
                    raise
                if attempts == 1:
                    return False
                obj = self._client.get_object(Bucket=self.bucket, Key=full)
                return bytes(obj["Body"].read()) == data
            return True

        return self._call(f"create {key}", attempt)

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        def attempt() -> dict[str, int]:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            cut = len(self.prefix)
            return {
                o["Key"][cut:]: int(o["Size"]) for page in pages for o in page.get("Contents", [])
            }

        return self._call(f"list {prefix}", attempt)

    def delete(self, key: str) -> None:
        full = self.prefix + check_key(key)
        self._call(
            f"delete {key}", lambda: self._client.delete_object(Bucket=self.bucket, Key=full)
        )

    def exists(self, key: str) -> bool:
        full = self.prefix + check_key(key)

        def attempt() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=full)
            except self._client_error as err:
                if _code(err) in _MISSING_CODES:
                    return False
                raise
            return True

        return self._call(f"exists {key}", attempt)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{name}={text!r}: expected a positive number of seconds")
    return value


def open_blobs(location: str | Path, env: Mapping[str, str] | None = None) -> Blobs:
    """The store at ``location``: ``s3://bucket/prefix`` or a directory path.

    Parameters
    ----------
    location
        ``s3://bucket/prefix`` (:class:`S3Blobs`) or a directory (:class:`DirBlobs`).
    env
        The settings of an S3 store (``os.environ`` if ``None``): the endpoint
        (``BACKSTOP_S3_ENDPOINT``, else ``AWS_ENDPOINT_URL``, else AWS itself), the
        credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), the region
        (``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else us-east-1) and how long an
        operation retries an unreachable store (``BACKSTOP_S3_DEADLINE`` seconds, 30).

    Raises
    ------
    ConfigError
        For another scheme, an ``s3://`` location without a bucket or a bad deadline.

    Examples
    --------
    >>> open_blobs("/var/lib/backstop")
    DirBlobs('/var/lib/backstop')
    >>> open_blobs("s3://state/prod", {"BACKSTOP_S3_ENDPOINT": "http://127.0.0.1:18333"})
    S3Blobs(http://127.0.0.1:18333, s3://state/prod/)
    >>> open_blobs("gs://x")
    Traceback (most recent call last):
    ...
    backstop_runtime.config.ConfigError: store 'gs://x': use s3://bucket/prefix or a directory
    """
    env = os.environ if env is None else env
    text = str(location)
    if text.startswith("s3://"):
        bucket, _, prefix = text.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigError(f"store {text!r}: no bucket (expected s3://bucket/prefix)")
        return S3Blobs(
            env.get("BACKSTOP_S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL") or None,
            bucket,
            prefix,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            deadline=_seconds(env, "BACKSTOP_S3_DEADLINE", DEFAULT_DEADLINE),
        )
    if "://" in text:
        raise ConfigError(f"store {text!r}: use s3://bucket/prefix or a directory")
    return DirBlobs(Path(text))
