"""The re-optimization job's object store reader: the JSON Lines metrics under an ``s3://``
prefix, listed and read with pyarrow's S3 filesystem.

Why pyarrow and not Spark's own ``s3a://``: ``s3a`` needs the hadoop-aws and AWS SDK jars,
which pyspark does not ship, while pyarrow (a dependency already, with S3 built into its
wheels) reads any S3-compatible store with the settings the task runtime uses
(:func:`filesystem`).

Why the lines go to Spark as text (:func:`backstop.jobs.sparkio.read_metrics` hands them to
``spark.read.json``) and not as a pandas frame to ``createDataFrame``: Spark's JSON reader
then parses them with the same schema, timestamp format and null handling as a directory
of the same files, so both give the same DataFrame and the job's ``DataFrame ->
DataFrame`` transforms are unchanged; and the rows travel from the driver, so executors of
a ``k8s://`` master need neither the store's credentials nor a shared temporary directory,
which downloading to a local directory for ``spark.read.json(dir)`` would.

The runtime writes one small object per task per interval (``tasks/<task>.e<epoch>.<seq>.jsonl``,
:mod:`backstop_runtime.metrics`), so the objects are read by :data:`READERS` threads at once:
the time goes into round trips, not bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from backstop.domain.metricspath import split_s3

__all__ = [
    "JSON_SUFFIXES",
    "READERS",
    "S3MetricsError",
    "filesystem",
    "pick",
    "read_lines",
]

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
READERS = 16
"""Objects read at once."""
DEFAULT_REGION = "us-east-1"


class S3MetricsError(Exception):
    """Metrics that cannot be read from the store; the message says where and why."""


def filesystem(env: Mapping[str, str] | None = None) -> pafs.S3FileSystem:
    """The object store, from the variables the task runtime reads (``open_blobs``).

    ``BACKSTOP_S3_ENDPOINT`` (else ``AWS_ENDPOINT_URL``, else AWS itself), ``AWS_ACCESS_KEY_ID``
    and ``AWS_SECRET_ACCESS_KEY`` (unset: pyarrow's own search, e.g. an instance role),
    ``AWS_REGION`` (else ``AWS_DEFAULT_REGION``, else us-east-1).
    """
    env = os.environ if env is None else env
    endpoint = env.get("BACKSTOP_S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL") or ""
    options: dict[str, object] = {
        "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        "connect_timeout": 5.0,
        "request_timeout": 30.0,
    }
    if endpoint:
        url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.update(endpoint_override=url.netloc + url.path.rstrip("/"), scheme=url.scheme)
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        options.update(access_key=key, secret_key=secret)
    return pafs.S3FileSystem(**options)


def _path(url: str) -> str:
    """``s3://bucket/key`` → pyarrow's ``bucket/key``."""
    try:
        bucket, key = split_s3(url)
    except ValueError as err:
        raise S3MetricsError(str(err)) from None
    return f"{bucket}/{key}" if key else bucket


def _info(s3: pafs.FileSystem, selector: pafs.FileSelector, url: str) -> list[pafs.FileInfo]:
    try:
        return list(s3.get_file_info(selector))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise S3MetricsError(f"cannot list {url}: {_reason(err)}") from None


def _reason(err: OSError) -> str:
    return " ".join(str(err).split())[:300]


def pick(s3: pafs.FileSystem, url: str, stem: str) -> str:
    """The ``tasks``/``nodes`` entry under ``url``, as an ``s3://`` URL: a folder of
    objects (``<stem>/``) or one object (``<stem>.jsonl``), as in a metrics directory."""
    base = _path(url)
    found = sorted(
        i.base_name
        for i in _info(s3, pafs.FileSelector(base, allow_not_found=True), url)
        if i.base_name.split(".")[0] == stem
    )
    if not found:
        raise S3MetricsError(f"{url} holds no {stem}/ or {stem}.jsonl (no metrics written yet?)")
    return f"{url.rstrip('/')}/{found[0]}"


def _keys(s3: pafs.FileSystem, url: str) -> list[str]:
    """The JSON Lines objects at ``url``: the object itself, or those under the prefix."""
    base = _path(url)
    (one,) = _info_of(s3, base, url)
    if one.type == pafs.FileType.File:
        return [base]
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    infos = _info(s3, selector, url)
    files = [i for i in infos if i.type == pafs.FileType.File]
    keys = sorted(i.path for i in files if i.base_name.endswith(JSON_SUFFIXES))
    if files and not keys:
        raise S3MetricsError(
            f"{url}: no .jsonl objects (an object store's metrics are read as JSON Lines)"
        )
    if not keys:
        raise S3MetricsError(f"{url} holds no objects (no metrics written yet?)")
    return keys


def _info_of(s3: pafs.FileSystem, base: str, url: str) -> list[pafs.FileInfo]:
    try:
        return [s3.get_file_info(base)]
    except OSError as err:
        raise S3MetricsError(f"cannot read {url}: {_reason(err)}") from None


def _read(s3: pafs.FileSystem, key: str) -> bytes:
    try:
        with s3.open_input_stream(key) as f:
            return bytes(f.read())
    except FileNotFoundError:  # removed since the listing (a topology being deleted)
        return b""
    except OSError as err:
        raise S3MetricsError(f"cannot read s3://{key}: {_reason(err)}") from None


def read_lines(url: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The non-blank lines of the JSON Lines object ``url``, or of every ``.jsonl`` /
    ``.json`` / ``.ndjson`` object under the prefix ``url``, in key order.

    Raises
    ------
    S3MetricsError
        No such objects, another format, or a store that cannot be listed or read.
    """
    s3 = filesystem(env)
    keys = _keys(s3, url)
    with ThreadPoolExecutor(min(READERS, len(keys))) as pool:
        blobs = list(pool.map(lambda k: _read(s3, k), keys))
    return [ln for b in blobs for ln in b.decode("utf-8", errors="replace").splitlines()
            if ln.strip()]  # fmt: skip
