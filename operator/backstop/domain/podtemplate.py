"""``spec.podTemplate`` and ``spec.operators[].podTemplate``: what users add to task pods.

A pod template has the shape of a Kubernetes ``PodTemplateSpec`` (``metadata`` with
labels and annotations, ``spec`` a ``PodSpec``), as in Flink's operator. The models
describe the parts the operator reads or guards (containers, their env, mounts and
resources; volumes; tolerations; image pull secrets) and keep every other PodSpec field
as written (``x-kubernetes-preserve-unknown-fields``), so the CRD stays small while a
template the operator would turn into a pod the API server refuses, or one that
overrides what the operator owns, is refused here, naming the field: in the CLI, in the
``Planned`` condition, and at admission (the webhook runs this model).

What the operator owns (the template may not set it, and the merge in
:mod:`backstop.domain.podmerge` lets the operator's value win): placement (``nodeName``,
``nodeSelector``, ``affinity``, ``topologySpreadConstraints``; use ``spec.nodeSelector``),
``restartPolicy`` (``Always``), labels and annotations under ``streams.backstop.dev/``,
the volumes ``recovery`` and ``store`` and their mount paths, and in the task's own
container (named :data:`TASK_CONTAINER`) its image, command and args, every ``BACKSTOP_*``
variable, and the CPU and memory requests (``operators[].resources``, the planners'
weights).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from backstop.domain.constants import DNS_LABEL, GROUP, SESSION_MOUNT, STORE_MOUNT
from backstop.domain.quantity import parse_quantity

TASK_CONTAINER = "task"
"""Name of the task's own container: a template container of this name is merged into it."""
OWNED_ENV_PREFIX = "BACKSTOP_"
RUNTIME_SETTINGS = (
    "BACKSTOP_LOG_LEVEL",
    "BACKSTOP_LOG_FORMAT",
    "BACKSTOP_BATCH_INTERVAL",
    "BACKSTOP_BUFFER_BYTES",
    "BACKSTOP_BUFFER_ROUNDS",
    "BACKSTOP_READAHEAD_BYTES",
    "BACKSTOP_CAUGHT_UP_LAG",
    "BACKSTOP_SUSPECT_AFTER",
    "BACKSTOP_METRICS_INTERVAL",
    "BACKSTOP_PEER_TIMEOUT",
)
"""The task runtime's own settings: the only ``BACKSTOP_*`` variables a template may set."""
OWNED_VOLUMES = ("recovery", "store")
OWNED_MOUNTS = (SESSION_MOUNT, STORE_MOUNT)
OWNED_POD_FIELDS = {
    "nodeName": "the operator pins every pod to its planned node",
    "nodeSelector": "use spec.nodeSelector (the planners only use nodes that carry it)",
    "affinity": "the operator pins every pod to its planned node with a node affinity",
    "topologySpreadConstraints": "the planners decide where tasks go",
}
OWNED_TASK_FIELDS = {
    "image": "use spec.image or spec.operators[].image",
    "command": "the task runtime's entrypoint runs the task",
    "args": "the task runtime's entrypoint runs the task",
}
_EXTENSIBLE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}


class _Strict(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class _Open(BaseModel):
    """A Kubernetes object whose other fields are kept as written (the API server checks
    them when the pod is created)."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="allow", frozen=True, json_schema_extra=_EXTENSIBLE
    )


class EnvVar(_Strict):
    """An environment variable: a `value`, or a `valueFrom` (a Secret's or a ConfigMap's key,
    a field of the pod, a resource of the container)."""

    name: str = Field(min_length=1, pattern=r"^[^=]+$")
    value: str | None = None
    value_from: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_EXTENSIBLE)

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        # an empty valueFrom beside a value is what a dump of this model writes (the field's
        # default): not a second source, so a dumped topology parses again
        given = bool(self.value_from) or (
            "value_from" in self.model_fields_set and self.value is None
        )
        if self.value is not None and given:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        if given:
            kinds = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")
            found = [k for k in kinds if k in self.value_from]
            if len(found) != 1 or len(self.value_from) != 1:
                raise ValueError(f"env {self.name}: valueFrom needs exactly one of {kinds}")
            ref = self.value_from[found[0]]
            need = {"secretKeyRef": ("name", "key"), "configMapKeyRef": ("name", "key")}
            missing = [f for f in need.get(found[0], ()) if not (ref or {}).get(f)]
            if missing:
                raise ValueError(f"env {self.name}: valueFrom.{found[0]} needs {missing[0]}")
        return self


class VolumeMount(_Open):
    name: str = Field(min_length=1)
    mount_path: str = Field(pattern=r"^/")


class Container(_Open):
    """A container of the template: the task's own (`name: task`) or a sidecar."""

    name: str = Field(pattern=DNS_LABEL, max_length=63)
    image: str | None = Field(None, description="A sidecar's image (not the task's).")
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra={"items": {"type": "object", **_EXTENSIBLE}}
    )
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    resources: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_EXTENSIBLE)

    @model_validator(mode="after")
    def _names_unique(self) -> Container:
        for kind, names in (
            ("env", [e.name for e in self.env]),
            ("volumeMounts", [m.mount_path for m in self.volume_mounts]),
        ):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"container {self.name}: {kind} {dup[0]} given twice")
        for part in ("requests", "limits"):
            for kind, value in (self.resources.get(part) or {}).items():
                try:
                    parse_quantity(str(value))
                except ValueError:
                    raise ValueError(
                        f"container {self.name}: resources.{part}.{kind}: {value!r} is not "
                        "a Kubernetes quantity"
                    ) from None
        _check_container(self)
        return self


class Volume(_Open):
    """A pod volume: a name and exactly one source (`emptyDir`, `configMap`, ...)."""

    name: str = Field(pattern=DNS_LABEL, max_length=63)

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        sources = sorted(self.model_extra or {})
        if len(sources) != 1:
            raise ValueError(
                f"volume {self.name}: needs exactly one source (emptyDir, configMap, secret, "
                f"persistentVolumeClaim, ...), got {sources or 'none'}"
            )
        return self


class Toleration(_Strict):
    """A Kubernetes toleration (`operator: Exists` without a key tolerates every taint)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds applies to effect NoExecute only")
        return self


class LocalObjectReference(_Strict):
    name: str = Field(min_length=1)


class PodSpecTemplate(_Open):
    """The `spec` of a pod template: a Kubernetes PodSpec, merged into every task pod."""

    containers: list[Container] = Field(
        default_factory=list,
        validate_default=True,
        description="At least one: `name: task` is merged into the task's own container; "
        "any other name is a sidecar (with its own `image`).",
    )
    init_containers: list[Container] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _owned(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in OWNED_POD_FIELDS.items():
                if key in data:
                    raise ValueError(f"{key} is the operator's: {why}")
            if data.get("restartPolicy", "Always") != "Always":
                raise ValueError("restartPolicy is the operator's (Always)")
        return data

    @field_validator("containers")
    @classmethod
    def _some(cls, containers: list[Container]) -> list[Container]:
        if not containers:
            raise ValueError(
                "a pod template needs at least one container (`name: task` adds to the "
                "task's own container; any other name is a sidecar)"
            )
        return containers

    @model_validator(mode="after")
    def _checked(self) -> PodSpecTemplate:
        names = [c.name for c in [*self.containers, *self.init_containers]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"containers: {dup[0]} given twice")
        if TASK_CONTAINER in (c.name for c in self.init_containers):
            raise ValueError(f"initContainers: {TASK_CONTAINER!r} names the task's container")
        vols = [v.name for v in self.volumes]
        for name in vols:
            if vols.count(name) > 1:
                raise ValueError(f"volumes: {name} given twice")
            if name in OWNED_VOLUMES:
                raise ValueError(f"volumes: {name} is the operator's ({', '.join(OWNED_VOLUMES)})")
        return self


def _check_container(c: Container) -> None:
    """What a container may not set: the operator's fields of the task container, mounts
    over the operator's paths; a sidecar needs an image."""
    where = f"container {c.name}"
    for m in c.volume_mounts:
        if m.mount_path.rstrip("/") in OWNED_MOUNTS or m.name in OWNED_VOLUMES:
            raise ValueError(f"{where}: volumeMount {m.mount_path} is the operator's")
    if c.name != TASK_CONTAINER:
        if not c.image:
            raise ValueError(f"{where}: a sidecar needs an image")
        return
    extra = c.model_extra or {}
    for key, why in OWNED_TASK_FIELDS.items():
        if key in extra or (key == "image" and c.image):
            raise ValueError(f"{where}: {key} is the operator's: {why}")
    for e in c.env:
        if e.name.startswith(OWNED_ENV_PREFIX) and e.name not in RUNTIME_SETTINGS:
            raise ValueError(
                f"{where}: env {e.name} is the operator's (every {OWNED_ENV_PREFIX}* variable "
                f"but the runtime settings {', '.join(RUNTIME_SETTINGS)})"
            )
    requests = c.resources.get("requests") or {}
    for kind in ("cpu", "memory"):
        if kind in requests:
            raise ValueError(
                f"{where}: resources.requests.{kind} is the operator's: use "
                f"spec.operators[].resources.{kind} (the planners' weight)"
            )


class PodMetadata(_Strict):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_ours(self) -> PodMetadata:
        for kind, keys in (("labels", self.labels), ("annotations", self.annotations)):
            for key in keys:
                if key.startswith(f"{GROUP}/"):
                    raise ValueError(f"{kind}: {key} is the operator's ({GROUP}/*)")
        return self


class PodTemplate(_Strict):
    """Labels, annotations and a Kubernetes PodSpec for task pods (and active replicas).

    **Merge** (as Flink's operator merges pod templates, arrays by name): the operator's
    pod, then `spec.podTemplate`, then `spec.operators[].podTemplate`, then the operator's
    own fields again. Objects merge key by key (the later wins); lists of named items
    (containers, env, volumes, volumeMounts, ports, imagePullSecrets) merge item by item by
    name, new names appended; other lists (tolerations, envFrom) are joined; lists of
    strings are replaced. The container named `task` is the task's own (it stays the
    pod's first container); any other container is a sidecar and needs its own `image`.

    **The operator's fields** (refused in a template, naming the field): `nodeName`,
    `nodeSelector` (use `spec.nodeSelector`), `affinity`, `topologySpreadConstraints`,
    `restartPolicy` other than `Always`; labels and annotations under
    `streams.backstop.dev/`; the volumes `recovery` and `store` and mounts at
    `/etc/backstop/recovery` and `/var/lib/backstop`; in the `task` container: `image`
    (use `spec.image`/`operators[].image`), `command`, `args`, every `BACKSTOP_*` env
    variable but the runtime's settings (`BACKSTOP_LOG_LEVEL`, `_LOG_FORMAT`, `_BATCH_INTERVAL`,
    `_BUFFER_BYTES`, `_BUFFER_ROUNDS`, `_READAHEAD_BYTES`, `_CAUGHT_UP_LAG`,
    `_METRICS_INTERVAL`, `_PEER_TIMEOUT`),
    `resources.requests.cpu`/`memory` (use `operators[].resources`), and its
    `data`/`metrics` ports. Limits the template sets must cover the requests;
    `resources.cpuLimit`/`memoryLimit` win over them. The other PodSpec fields are kept as
    written and checked by the API server: the operator creates each templated operator's
    first pod in a server-side dry run, and a refusal is `InvalidSpec` quoting it.

    **Defaults a template may change**: the pod's and the task container's
    `securityContext` (the `restricted` profile: runAsNonRoot, RuntimeDefault seccomp,
    no privilege escalation, all capabilities dropped; merged key by key),
    `enableServiceLinks: false`, `terminationMessagePolicy: FallbackToLogsOnError`,
    `serviceAccountName` and `automountServiceAccountToken` (over `spec.`'s).

    **Planning**: a sidecar's or init container's requests count in the task's CPU
    weight and memory. A node with NoSchedule/NoExecute taints is used only when the
    pods of every operator tolerate all of them (the planners may put any task on any
    node); the `node.kubernetes.io/*` taints (not-ready, unreachable, pressure,
    unschedulable) are never tolerated for planning: not-ready and unreachable mean the
    node is lost.
    """

    metadata: PodMetadata = Field(default_factory=PodMetadata)
    spec: PodSpecTemplate | None = None

    def raw(self) -> dict[str, Any]:
        """The template as written (camelCase, only the fields given)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


TOPOLOGY_TEMPLATE: Any = Field(
    None,
    description="Labels, annotations and a PodSpec merged into every task pod: env (from "
    "Secrets too), volumes and mounts, tolerations, a ServiceAccount, limits, security "
    "contexts, sidecars, image pull secrets; see PodTemplate for the merge and the fields "
    "that stay the operator's.",
)
OPERATOR_TEMPLATE: Any = Field(
    None,
    description="This operator's pod template, merged over spec.podTemplate (it wins).",
)
