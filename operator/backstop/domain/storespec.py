"""``spec.store``: where the tasks keep their durable state, an object store or a volume.

Two forms, one model (:class:`StoreSpec`):

* ``{objectStore: {endpoint, bucket, prefix, region, secretRef}}``: an S3-compatible object
  store (AWS S3, MinIO, SeaweedFS, Google Cloud Storage's XML API with HMAC keys). No volume
  is mounted; the task pods get ``BACKSTOP_STORE=s3://<bucket>/<prefix>`` and the endpoint,
  region and credentials in their environment (:func:`store_env`), the credentials as
  ``secretKeyRef`` so the Secret's values never appear in a pod spec.
* ``{volume: {<a Kubernetes volume source>}}``, or the volume source itself at the top level
  (``{hostPath: {...}}``, ``{persistentVolumeClaim: {...}}``, ...): mounted in every task at
  ``/var/lib/backstop``. Empty: an ``emptyDir`` per pod.

A volume private to a pod (``emptyDir``) or to a node (``hostPath``) cannot hold state that
tasks on several nodes share: :func:`backstop.domain.admission.node_local_problem` says so in
one line, and the admission webhook and the reconcile refuse such a topology unless the
operator runs with ``BACKSTOP_ALLOW_NODE_LOCAL_STORE`` (a single-host development cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from backstop.domain.constants import DNS_SUBDOMAIN, STORE_MOUNT

BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
"""An S3 bucket name (also a valid GCS bucket name)."""
PREFIX = r"^[A-Za-z0-9._=-]+(/[A-Za-z0-9._=-]+)*$"
"""A key prefix: path segments without empty ones or a leading or trailing ``/``."""
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret's data."""
FORMS = ("objectStore", "volume")
"""The keys of the explicit forms; any other key is a volume source at the top level."""
DESCRIPTION = (
    "Where the tasks keep their durable state (checkpoints, source positions, sink commits, "
    "dead letters, metrics, the peer registry): `objectStore` (an S3-compatible object store, "
    "credentials from a Secret) or `volume` (a Kubernetes volume source mounted at "
    "/var/lib/backstop, e.g. a ReadWriteMany `{persistentVolumeClaim: {claimName: x}}`); a "
    "volume source written directly here (`{hostPath: {path: /srv/backstop}}`) is the volume "
    "form. Empty: each pod's own emptyDir. An emptyDir or hostPath store of tasks that may run "
    "on several nodes is refused unless the operator allows node-local stores (single-host "
    "development)."
)
"""The description of ``spec.store`` (CRD and docs)."""


def _no_crd_default(schema: dict[str, Any]) -> None:
    """No default in the CRD: Kubernetes 1.20 reads an empty string default as null and
    refuses the CRD; the model's default applies instead."""
    schema.pop("default", None)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class SecretRef(_Model):
    """The Secret (in the topology's namespace) holding the object store's credentials."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253, description="The Secret's name.")
    access_key_id_key: str = Field(
        "accessKeyId",
        pattern=SECRET_KEY,
        max_length=253,
        description="Key of the access key id in the Secret (AWS_ACCESS_KEY_ID).",
    )
    secret_access_key_key: str = Field(
        "secretAccessKey",
        pattern=SECRET_KEY,
        max_length=253,
        description="Key of the secret access key in the Secret (AWS_SECRET_ACCESS_KEY).",
    )
    endpoint_key: str = Field(
        "endpoint",
        pattern=SECRET_KEY,
        max_length=253,
        description="Key of the S3 API's URL in the Secret, read when `endpoint` is unset "
        "and the key exists (one Secret can then say where the store is and how to log in).",
    )


class ObjectStore(_Model):
    """An S3-compatible object store; state lives under ``<prefix>/<namespace>/<name>/<uid>``."""

    endpoint: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        max_length=2048,
        description="The S3 API's URL (`http://minio.storage:9000`, "
        "`https://storage.googleapis.com` for GCS); unset: AWS S3 of the region.",
    )
    bucket: str = Field(pattern=BUCKET, description="The bucket (it must exist).")
    prefix: str = Field(
        "",
        max_length=512,
        pattern=f"^$|{PREFIX}",
        description="Key prefix inside the bucket (`prod`, `team/prod`); unset: the root.",
        json_schema_extra=_no_crd_default,
    )
    region: str | None = Field(
        None,
        pattern=r"^[a-z0-9-]+$",
        max_length=64,
        description="The bucket's region (AWS_REGION); unset: the runtime's default, us-east-1.",
    )
    secret_ref: SecretRef | None = Field(
        None,
        description="The Secret with the credentials; unset: the pod's own (e.g. a "
        "ServiceAccount bound to a cloud role).",
    )

    @property
    def location(self) -> str:
        """``s3://<bucket>/<prefix>`` (BACKSTOP_STORE of the task runtime)."""
        return f"s3://{self.bucket}/{self.prefix}"


class StoreSpec(_Model):
    """The tasks' durable state: an object store or a volume (the volume source itself at the
    top level is read as ``volume``)."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    object_store: ObjectStore | None = Field(
        None, description="An S3-compatible object store (no volume is mounted)."
    )
    volume: dict[str, Any] = Field(
        default_factory=dict,
        description="A Kubernetes volume source mounted at /var/lib/backstop in every task "
        "(`{persistentVolumeClaim: {claimName: x}}`, ReadWriteMany); the source may also be "
        "written directly under spec.store.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_volume(cls, data: Any) -> Any:
        """A volume source at the top level (``{hostPath: ...}``) is the volume form."""
        if not isinstance(data, Mapping):
            return data
        explicit = [k for k in data if k in (*FORMS, "object_store")]
        other = sorted(str(k) for k in data if k not in (*FORMS, "object_store"))
        if explicit and other:
            raise ValueError(
                f"{explicit[0]} cannot be combined with a volume source at the top level "
                f"({', '.join(other)})"
            )
        return dict(data) if explicit or not other else {"volume": dict(data)}

    @model_validator(mode="after")
    def _one_form(self) -> StoreSpec:
        if self.object_store is not None and self.volume:
            raise ValueError("give objectStore or volume, not both")
        if len(self.volume) > 1:
            raise ValueError(f"volume: one volume source, got {', '.join(sorted(self.volume))}")
        return self

    def volume_source(self) -> dict[str, Any] | None:
        """The volume mounted at /var/lib/backstop; ``None`` with an object store."""
        if self.object_store is not None:
            return None
        return dict(self.volume) or {"emptyDir": {}}

    def kind(self) -> str:
        """``objectStore`` or the volume source's kind (``emptyDir`` when none is given)."""
        source = self.volume_source()
        return "objectStore" if source is None else next(iter(source))


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def store_env(store: StoreSpec) -> list[dict[str, Any]]:
    """The task runtime's store settings (what ``backstop_runtime.blobs.open_blobs`` reads).

    Examples
    --------
    >>> s = StoreSpec.model_validate({"objectStore": {"bucket": "state", "prefix": "p",
    ...     "secretRef": {"name": "creds"}}})
    >>> [e["name"] for e in store_env(s)]
    ['BACKSTOP_STORE', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'BACKSTOP_S3_ENDPOINT']
    >>> store_env(s)[-1]["valueFrom"]
    {'secretKeyRef': {'name': 'creds', 'key': 'endpoint', 'optional': True}}
    >>> store_env(StoreSpec.model_validate({"hostPath": {"path": "/srv"}}))
    [{'name': 'BACKSTOP_STORE', 'value': '/var/lib/backstop'}]
    """
    obj = store.object_store
    if obj is None:
        return [{"name": "BACKSTOP_STORE", "value": STORE_MOUNT}]
    env: list[dict[str, Any]] = [{"name": "BACKSTOP_STORE", "value": obj.location}]
    if obj.endpoint:
        env.append({"name": "BACKSTOP_S3_ENDPOINT", "value": obj.endpoint})
    if obj.region:
        env.append({"name": "AWS_REGION", "value": obj.region})
    if obj.secret_ref is not None:
        ref = obj.secret_ref
        env.append(_secret_env("AWS_ACCESS_KEY_ID", ref.name, ref.access_key_id_key))
        env.append(_secret_env("AWS_SECRET_ACCESS_KEY", ref.name, ref.secret_access_key_key))
        if not obj.endpoint:
            env.append(_secret_env("BACKSTOP_S3_ENDPOINT", ref.name, ref.endpoint_key, True))
    return env
