"""``spec.reoptimization.metricsPath``: where the re-optimization job reads a topology's metrics.

Two forms: a directory the job can read (a volume holding the topologies' store, mounted
at ``/var/lib/backstop``), or a prefix of an S3-compatible object store,
``s3://<bucket>/<prefix>``, which the job lists and reads itself (:mod:`backstop.jobs.s3metrics`).
Both may hold the placeholders ``{namespace}``, ``{name}`` and ``{uid}``, filled in per run
(:func:`fill`): the task runtime writes its rows under
``<store>/<namespace>/<name>/<uid>/metrics/{tasks,nodes}/``.

An ``s3://`` path is read with the endpoint, region and credentials of the topology's own
``spec.store.objectStore`` (:func:`s3_problem` refuses one without), so a metricsPath left
unset on a topology whose store is an object store defaults to that store's metrics
(:func:`effective`): the rows its tasks write are where the job looks, with nothing to set.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from backstop.domain.storespec import BUCKET, StoreSpec

__all__ = [
    "PLACEHOLDERS",
    "S3_SCHEME",
    "check_path",
    "check_s3_store",
    "default_for",
    "effective",
    "fill",
    "is_s3",
    "path_problem",
    "s3_problem",
    "split_s3",
]

S3_SCHEME = "s3://"
PLACEHOLDERS = ("{namespace}", "{name}", "{uid}")
T = TypeVar("T")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_s3(path: str) -> bool:
    """Whether ``path`` names an object store prefix.

    >>> is_s3("s3://state/prod/{namespace}/{name}/{uid}/metrics"), is_s3("/var/lib/backstop")
    (True, False)
    """
    return path.startswith(S3_SCHEME)


def split_s3(url: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` → ``(bucket, "key/prefix")`` (no leading or trailing ``/``).

    >>> split_s3("s3://state/prod/ns/wc/u1/metrics/")
    ('state', 'prod/ns/wc/u1/metrics')
    >>> split_s3("s3://state")
    ('state', '')
    >>> split_s3("s3:///x")
    Traceback (most recent call last):
    ...
    ValueError: 's3:///x' has no bucket (expected s3://bucket/prefix)
    """
    if not is_s3(url):
        raise ValueError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url.removeprefix(S3_SCHEME).partition("/")
    if not bucket:
        raise ValueError(f"{url!r} has no bucket (expected s3://bucket/prefix)")
    return bucket, key.strip("/")


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a metricsPath, or ``None``: another URL scheme than ``s3://``
    (Spark's ``s3a://`` needs jars the job's image lacks), an ``s3://`` URL without a valid
    bucket, or a relative directory.

    >>> path_problem("s3://state/{namespace}/{name}/{uid}/metrics") is None
    True
    >>> path_problem("s3a://state/m")
    "metricsPath 's3a://state/m': use s3://bucket/prefix or an absolute directory"
    >>> path_problem("s3://S/m")
    "metricsPath 's3://S/m': 'S' is not a bucket name"
    >>> path_problem("metrics/")
    "metricsPath 'metrics/': use s3://bucket/prefix or an absolute directory"
    """
    if is_s3(path):
        try:
            bucket, _ = split_s3(path)
        except ValueError as err:
            return f"metricsPath {err}"
        if not re.match(BUCKET, bucket):
            return f"metricsPath {path!r}: {bucket!r} is not a bucket name"
        return None
    if _SCHEME.match(path) or not path.startswith("/"):
        return f"metricsPath {path!r}: use s3://bucket/prefix or an absolute directory"
    return None


def s3_problem(path: str | None, store: StoreSpec) -> str | None:
    """Why the job could not read the ``s3://`` metricsPath ``path`` of a topology with
    ``store``, or ``None``: the endpoint and credentials come from ``spec.store.objectStore``.

    >>> s3_problem("s3://state/m", StoreSpec()) is not None
    True
    >>> s3_problem("/var/lib/backstop/m", StoreSpec()) is None
    True
    """
    if path is None or not is_s3(path) or store.object_store is not None:
        return None
    return (
        f"metricsPath {path!r} is in an object store, which needs spec.store.objectStore "
        "(the job reads the metrics with its endpoint, region and credentials)"
    )


def default_for(store: StoreSpec) -> str | None:
    """Where the task runtime writes its metrics rows in an object store ``store``, with
    the placeholders; ``None`` for a volume (the job's mount of it is the operator's).

    >>> default_for(StoreSpec.model_validate({"objectStore": {"bucket": "st", "prefix": "p"}}))
    's3://st/p/{namespace}/{name}/{uid}/metrics'
    >>> default_for(StoreSpec.model_validate({"objectStore": {"bucket": "st"}}))
    's3://st/{namespace}/{name}/{uid}/metrics'
    >>> default_for(StoreSpec()) is None
    True
    """
    obj = store.object_store
    if obj is None:
        return None
    prefix = f"{obj.prefix}/" if obj.prefix else ""
    return f"s3://{obj.bucket}/{prefix}{'/'.join(PLACEHOLDERS)}/metrics"


def effective(path: str | None, store: StoreSpec) -> str | None:
    """The metricsPath a run reads: the one given, else the object store's own
    (:func:`default_for`), else ``None`` (no metrics to read)."""
    return path or default_for(store)


def fill(path: str, namespace: str, name: str, uid: str) -> str:
    """``path`` with ``{namespace}``, ``{name}`` and ``{uid}`` replaced by the topology's
    own (a uid is known only once the topology exists).

    >>> fill("/var/lib/backstop/{namespace}/{name}/{uid}/metrics", "ns", "wc", "u1")
    '/var/lib/backstop/ns/wc/u1/metrics'
    >>> fill("s3://st/p/{namespace}/{name}/{uid}/metrics", "ns", "wc", "u1")
    's3://st/p/ns/wc/u1/metrics'
    """
    for key, value in zip(PLACEHOLDERS, (namespace, name, uid), strict=True):
        path = path.replace(key, value)
    return path


def check_path(path: str | None) -> str | None:
    """The metricsPath field's validator: ``path``, or a ``ValueError`` (:func:`path_problem`)."""
    problem = None if path is None else path_problem(path)
    if problem is not None:
        raise ValueError(problem)
    return path


def check_s3_store(spec: T) -> T:
    """The topology's validator: an ``s3://`` metricsPath needs an object store
    (:func:`s3_problem`); ``spec`` is a ``StreamTopologySpec``."""
    model: Any = spec
    policy = model.reoptimization
    problem = s3_problem(policy.metrics_path if policy else None, model.store)
    if problem is not None:
        raise ValueError(f"reoptimization.{problem}")
    return spec
