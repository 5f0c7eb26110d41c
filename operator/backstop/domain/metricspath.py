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

The credentials reach the job as the tasks get them: a Job in the topology's namespace
refers to the topology's Secret (``secretKeyRef``, the values never in a pod spec); a Job
in the operator's namespace cannot refer to a Secret of another namespace, so it refers to
the operator's own (``reoptimization.objectStoreSecret``) instead (:func:`job_store_env`).
A run in the operator's process (``mode: local``) gets the endpoint and region of the
topology and the credentials of the operator's environment (:func:`local_store_env`): the
operator never reads a Secret.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from backstop.domain.storespec import BUCKET, StoreSpec, store_env

__all__ = [
    "DESCRIPTION",
    "PLACEHOLDERS",
    "S3_SCHEME",
    "check_path",
    "check_s3_store",
    "default_for",
    "effective",
    "fill",
    "is_s3",
    "job_store_env",
    "local_store_env",
    "path_problem",
    "s3_problem",
    "split_s3",
]

S3_SCHEME = "s3://"
PLACEHOLDERS = ("{namespace}", "{name}", "{uid}")
DESCRIPTION = (
    "Where the job reads the metrics: `s3://bucket/prefix` (read with "
    "spec.store.objectStore's endpoint and credentials) or an absolute directory the job "
    "can read, with tasks and nodes (folders of .jsonl rows, or tasks.parquet, "
    "nodes.parquet); `{namespace}`, `{name}` and `{uid}` are the topology's own. Unset: "
    "the object store's own metrics (`s3://<bucket>/<prefix>/{namespace}/{name}/{uid}/"
    "metrics`), or no runs with a volume store."
)
"""The description of ``spec.reoptimization.metricsPath`` (CRD and docs)."""
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

    >>> default_for(StoreSpec.model_validate({"objectStore": {"bucket": "sta", "prefix": "p"}}))
    's3://sta/p/{namespace}/{name}/{uid}/metrics'
    >>> default_for(StoreSpec.model_validate({"objectStore": {"bucket": "sta"}}))
    's3://sta/{namespace}/{name}/{uid}/metrics'
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


def job_store_env(
    store: StoreSpec, job_namespace: str, topology_namespace: str, secret: str | None = None
) -> list[dict[str, Any]]:
    """The object store settings of the re-optimization Job's container.

    The endpoint and region of ``store``; the credentials from its ``secretRef`` when the
    Job runs in the topology's namespace, else from ``secret``, a Secret of the Job's
    namespace with the keys ``accessKeyId`` and ``secretAccessKey``. Empty for a volume.

    Raises
    ------
    ValueError
        The store has a Secret the Job cannot refer to, and no ``secret`` is given.

    Examples
    --------
    >>> s = StoreSpec.model_validate({"objectStore": {"endpoint": "http://s3:9000",
    ...     "bucket": "state", "secretRef": {"name": "creds"}}})
    >>> [e["name"] for e in job_store_env(s, "prod", "prod")]
    ['BACKSTOP_S3_ENDPOINT', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY']
    >>> job_store_env(s, "ops", "prod", "reopt-s3")[1]["valueFrom"]["secretKeyRef"]
    {'name': 'reopt-s3', 'key': 'accessKeyId'}
    """
    obj = store.object_store
    if obj is None:
        return []
    env = [e for e in store_env(store) if e["name"] != "BACKSTOP_STORE"]
    if obj.secret_ref is None or job_namespace == topology_namespace:
        return env
    if not secret:
        raise ValueError(
            f"the Job runs in namespace {job_namespace} and cannot use Secret "
            f"{topology_namespace}/{obj.secret_ref.name} of spec.store.objectStore: set "
            f"reoptimization.objectStoreSecret (a Secret in {job_namespace}), or run the Job "
            "in the topology's namespace"
        )
    plain = [e for e in env if "valueFrom" not in e]
    return plain + [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, key in (("AWS_ACCESS_KEY_ID", "accessKeyId"),
                          ("AWS_SECRET_ACCESS_KEY", "secretAccessKey"))
    ]  # fmt: skip


def local_store_env(store: StoreSpec) -> dict[str, str]:
    """The object store settings of a run in the operator's process: the endpoint and
    region of ``store`` (the credentials are the operator's own environment's).

    >>> local_store_env(StoreSpec.model_validate({"objectStore": {"bucket": "state",
    ...     "endpoint": "http://s3:9000", "region": "eu-1", "secretRef": {"name": "c"}}}))
    {'BACKSTOP_S3_ENDPOINT': 'http://s3:9000', 'AWS_REGION': 'eu-1'}
    """
    return {e["name"]: e["value"] for e in store_env(store)
            if "value" in e and e["name"] != "BACKSTOP_STORE"}  # fmt: skip
