"""The StreamTopology model: the single source of truth for manifests, CLI and CRD.

Every entry point (``backstop`` CLI, the Kopf handlers, the CRD generator) parses
a manifest once into these pydantic models and then calls :func:`expand` to get
the task DAG the planners work on. Keeping one model means the CRD schema, the
CLI's validation and the operator's validation can never disagree. The lifecycle
fields (:mod:`backstop.domain.lifecycle_spec`) and the recovery, replication and
re-optimization policies (:mod:`backstop.domain.policy_spec`) are in modules of their own.
"""

from __future__ import annotations

import graphlib
import hashlib
import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from backstop.domain.budget import budget, check_fixed_terms
from backstop.domain.constants import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    IMAGE_MAX,
    LABEL_KEY_MAX,
    MAX_INPUTS,
    MAX_OPERATORS,
    MAX_PARALLELISM,
    OPERATOR_NAME,
    OPERATOR_NAME_MAX,
    SECONDS_MAX,
    TOPOLOGY_NAME_MAX,
)
from backstop.domain.groupings import KEY_GROUPINGS as KEY_GROUPINGS
from backstop.domain.groupings import Grouping as Grouping
from backstop.domain.lifecycle_spec import LifecycleFields
from backstop.domain.limits import (
    OFFLINE,
    check_input_count,
    check_operator_count,
    check_parallelism,
    cluster_size,
)
from backstop.domain.metricspath import check_s3_store
from backstop.domain.names import (
    check_topology_name,
    format_validation_error,
    one_of,
    registered,
)
from backstop.domain.podmerge import check_templates, pod_weight
from backstop.domain.podtemplate import OPERATOR_TEMPLATE, TOPOLOGY_TEMPLATE, PodTemplate
from backstop.domain.policy_spec import ApplyMode as ApplyMode
from backstop.domain.policy_spec import RecoveryMode as RecoveryMode
from backstop.domain.policy_spec import RecoveryPolicy as RecoveryPolicy
from backstop.domain.policy_spec import ReoptimizationPolicy as ReoptimizationPolicy
from backstop.domain.policy_spec import ReplicationPolicy as ReplicationPolicy
from backstop.domain.quantity import parse_quantity, positive_quantity
from backstop.domain.storespec import DESCRIPTION as STORE_DESCRIPTION
from backstop.domain.storespec import StoreSpec
from backstop.domain.yamlio import load_all
from planners import InvalidTopology, TaskGraph
from planners.placement import PLACEMENT_ALGORITHMS


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Input(_Model):
    """One upstream operator of an operator."""

    operator: str = Field(
        pattern=OPERATOR_NAME,
        max_length=OPERATOR_NAME_MAX,
        description="Name of the upstream operator.",
    )
    grouping: Grouping = Field(
        Grouping.key,
        description="forward: task i -> task i (equal parallelism); key (alias fields): "
        "by the hash of the record's key; rebalance: evenly, not by key (round-robin, the "
        "same on a replay); broadcast: to every task; global: to task 0. shuffle: the key "
        "hash, with a Warning: name it key (a later API version reads shuffle as rebalance).",
    )


def cpu_cores(quantity: str | int | float) -> float:
    """A Kubernetes CPU quantity (``250m``, ``1``, ``0.5``) in cores."""
    return float(parse_quantity(str(quantity)))


class Resources(_Model):
    """Requests of one task; the CPU request is the task's weight in the planners."""

    cpu: str = Field(
        "100m",
        description="CPU request per task (Kubernetes quantity).",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    memory: str = Field(
        "128Mi",
        description="Memory request per task (Kubernetes quantity).",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    cpu_limit: str | None = Field(
        None,
        description="CPU limit per task (Kubernetes quantity, at least `cpu`); unset: none.",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    memory_limit: str | None = Field(
        None,
        description="Memory limit per task (Kubernetes quantity, at least `memory`); unset: none.",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> Resources:
        for kind, request, limit in (
            ("cpu", self.cpu, self.cpu_limit),
            ("memory", self.memory, self.memory_limit),
        ):
            if limit is not None and parse_quantity(limit) < parse_quantity(request):
                raise ValueError(f"{kind}Limit {limit} is below the {kind} request {request}")
        return self

    @field_validator("cpu", "memory", "cpu_limit", "memory_limit", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> str | None:
        return positive_quantity(value)

    @property
    def cpu_cores(self) -> float:
        return cpu_cores(self.cpu)


class OperatorSpec(_Model):
    """One operator of the topology; it expands into ``parallelism`` tasks."""

    name: str = Field(
        pattern=OPERATOR_NAME,
        max_length=OPERATOR_NAME_MAX,
        description="A DNS-1123 label without `--` (the separator of pod names "
        "`<topology>--<operator>-<index>`).",
    )
    parallelism: int = Field(
        1, ge=1, description="Number of tasks.", json_schema_extra={"maximum": MAX_PARALLELISM}
    )
    image: str | None = Field(
        None, min_length=1, max_length=IMAGE_MAX, description="Task image; default spec.image."
    )
    resources: Resources = Field(default_factory=Resources)
    reprocessing_latency: float = Field(
        gt=0,
        le=SECONDS_MAX,
        description="Seconds a task needs to reprocess from its last checkpoint (t_v).",
    )
    inputs: list[Input] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_INPUTS})
    output: bool | None = Field(
        None, description="Whether this operator is a query output; default: no consumers."
    )
    priority: int = Field(1, ge=1, le=10, description="Query priority (output operators).")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form settings for the task runtime, passed to every task of the "
        "operator as JSON in BACKSTOP_CONFIG; `function` names the user class "
        "(`module:Class`), the rest is the class's own (e.g. `path`).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    pod_template: PodTemplate | None = OPERATOR_TEMPLATE

    # in a cluster only (the CRD states them too); the CLI plans any size offline
    _parallelism = field_validator("parallelism")(check_parallelism)
    _inputs = field_validator("inputs")(check_input_count)


class BackupMode(StrEnum):
    all = "all"
    planned = "planned"


class StreamTopologySpec(_Model, LifecycleFields):
    """The desired state of a stream topology."""

    image: str | None = Field(
        None,
        min_length=1,
        max_length=IMAGE_MAX,
        description="Default task image; unset: the operator's (the chart's <registry>/runtime).",
    )
    recovery_latency_bound: float = Field(
        gt=0, le=SECONDS_MAX, description="Seconds (R of the seeds)."
    )
    operators: list[OperatorSpec] = Field(
        min_length=1,
        description="Keyed by name: the API server refuses two operators of one name.",
        json_schema_extra={
            "maxItems": MAX_OPERATORS,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )
    backups: BackupMode = Field(BackupMode.planned, description="all: every task keeps backups.")
    placement_algorithm: str = registered("auto", PLACEMENT_ALGORITHMS, "Placement planner name.")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Labels a node must carry to run this topology's tasks (a node pool).",
    )
    topology_key: str | None = Field(
        None,
        max_length=LABEL_KEY_MAX,
        description="Node label of a failure domain (zone/rack) the plan must survive.",
    )
    store: StoreSpec = Field(default_factory=StoreSpec, description=STORE_DESCRIPTION)
    service_account_name: str | None = Field(
        None,
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        description="ServiceAccount of the task pods; unset: `default`.",
    )
    automount_service_account_token: bool = Field(
        False,
        description="Mount the ServiceAccount's API token in the task pods (only if the tasks "
        "call the Kubernetes API).",
    )
    pod_template: PodTemplate | None = TOPOLOGY_TEMPLATE
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    replication: ReplicationPolicy | None = None
    reoptimization: ReoptimizationPolicy | None = None

    _placement = field_validator("placement_algorithm")(
        one_of("placement algorithm", PLACEMENT_ALGORITHMS)
    )
    _templates = model_validator(mode="after")(check_templates)  # merged: mounts, limits
    _count = field_validator("operators")(check_operator_count)  # in a cluster only
    _size = model_validator(mode="after")(cluster_size)  # tasks, edges: before expand()
    _metrics_store = model_validator(mode="after")(check_s3_store)  # s3:// needs objectStore

    @field_validator("operators")
    @classmethod
    def _unique_names(cls, operators: list[OperatorSpec]) -> list[OperatorSpec]:
        seen: set[str] = set()
        for op in operators:
            if op.name in seen:
                raise ValueError(f"duplicate operator name {op.name!r}")
            seen.add(op.name)
        return operators

    _fixed_terms = model_validator(mode="after")(check_fixed_terms)  # d + c below R

    @property
    def planning_bound(self) -> float:
        """What the planners keep ``H(K_p)`` within: ``R − d − c`` (:mod:`.budget`)."""
        return budget(self)


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=DNS_LABEL, max_length=TOPOLOGY_NAME_MAX)
    namespace: str | None = None


class StreamTopology(_Model):
    """A whole ``StreamTopology`` manifest."""

    api_version: Literal["streams.backstop.dev/v1alpha1"] = "streams.backstop.dev/v1alpha1"
    kind: Literal["StreamTopology"] = "StreamTopology"
    metadata: Metadata
    spec: StreamTopologySpec


def parse_topology(doc: Any, *, cluster: bool = False) -> StreamTopology:
    """Validate a manifest (already loaded from YAML/JSON) into a model.

    A manifest is planned offline (the CLI, the re-optimization job): the ceilings of a
    topology in a cluster (:mod:`backstop.domain.limits`) apply only with ``cluster``.

    Raises
    ------
    InvalidTopology
        With one line per problem, naming each field.
    """
    if not isinstance(doc, dict):
        raise InvalidTopology("the manifest is not a mapping (expected a StreamTopology)")
    try:
        topo = StreamTopology.model_validate(doc, context=None if cluster else OFFLINE)
    except ValidationError as err:
        raise InvalidTopology(format_validation_error(err)) from None
    expand(topo.spec)  # cross-field checks (unknown inputs, cycles, forward parallelism)
    return topo


def parse_spec(spec: Any, name: str | None = None) -> StreamTopologySpec:
    """Validate just a ``spec`` (what the operator receives) into a model, within the
    ceilings of a topology in a cluster (:mod:`backstop.domain.limits`).

    ``name``, when given, is the topology's ``metadata.name``, checked as well.
    """
    if name is not None:
        check_topology_name(name)
    try:
        model = StreamTopologySpec.model_validate(spec)
    except ValidationError as err:
        raise InvalidTopology(format_validation_error(err, "spec")) from None
    expand(model)
    return model


def task_image(op: OperatorSpec, spec: StreamTopologySpec) -> str:
    """The image of ``op``'s tasks: its own ``image``, else ``spec.image`` (the operator
    fills an unset ``spec.image`` with its default task image before it plans).

    >>> m = parse_spec({"recoveryLatencyBound": 2, "operators": [
    ...     {"name": "a", "reprocessingLatency": 1, "image": "a:1"},
    ...     {"name": "b", "reprocessingLatency": 1}]})
    >>> task_image(m.operators[0], m)
    'a:1'
    >>> task_image(m.operators[1], m)
    Traceback (most recent call last):
    ...
    planners.errors.InvalidTopology: spec.image: required: operator 'b' names no image
    """
    image = op.image or spec.image
    if image is None:
        raise InvalidTopology(f"spec.image: required: operator {op.name!r} names no image")
    return image


def load_topology(path: str | Path, *, cluster: bool = False) -> StreamTopology:
    """Read and validate a manifest file (the first StreamTopology document in it), offline
    unless ``cluster`` (:func:`parse_topology`)."""
    p = Path(path)
    try:
        docs = [d for d in load_all(p.read_text()) if d is not None]
    except OSError as err:
        raise InvalidTopology(f"cannot read {p}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise InvalidTopology(f"{p} is not valid YAML: {err}") from None
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "StreamTopology":
            return parse_topology(d, cluster=cluster)
    raise InvalidTopology(f"{p} holds no StreamTopology document")


def task_id(operator: str, index: int) -> str:
    """The id of task ``index`` of ``operator``: ``<operator>-<index>``."""
    return f"{operator}-{index}"


def _upstream(spec: StreamTopologySpec) -> dict[str, list[str]]:
    """``{operator: the operators it reads from}``, checked: every input names an operator,
    a forward grouping joins equal parallelism, and the operators form no cycle."""
    ops = {op.name: op for op in spec.operators}  # unique: the model refuses duplicates
    index = {op.name: i for i, op in enumerate(spec.operators)}
    upstream: dict[str, list[str]] = {name: [] for name in ops}
    for i, op in enumerate(spec.operators):
        for j, inp in enumerate(op.inputs):
            at = f"spec.operators[{i}].inputs[{j}]"
            if inp.operator not in ops:
                raise InvalidTopology(
                    f"{at}.operator: operator {op.name!r} reads from unknown operator "
                    f"{inp.operator!r}"
                )
            up = ops[inp.operator]
            if inp.grouping is Grouping.forward and up.parallelism != op.parallelism:
                raise InvalidTopology(
                    f"{at}.grouping: forward grouping {up.name!r} -> {op.name!r} needs equal "
                    f"parallelism ({up.parallelism} != {op.parallelism})"
                )
            upstream[op.name].append(inp.operator)
    try:
        graphlib.TopologicalSorter(upstream).prepare()
    except graphlib.CycleError as err:
        names = [str(n) for n in err.args[1]]  # in data-flow order, the first name last again
        first = min(index[n] for n in names)
        raise InvalidTopology(
            f"spec.operators[{first}].inputs: the topology has a cycle: " + " -> ".join(names)
        ) from None
    return upstream


def expand(spec: StreamTopologySpec) -> TaskGraph:
    """Expand operators into the task DAG the planners work on.

    ``forward`` joins task i to task i (equal parallelism); ``key`` (and its other names),
    ``rebalance`` and ``broadcast`` join every upstream task to every downstream task;
    ``global``
    joins every upstream task to task 0. Output operators are those marked
    ``output: true``, or, when none is marked, those without consumers.

    Raises
    ------
    InvalidTopology
        Naming the field: an unknown input, forward grouping of unequal parallelism, a cycle.

    Examples
    --------
    >>> s = StreamTopologySpec.model_validate({"image": "x", "recoveryLatencyBound": 2,
    ...     "operators": [{"name": "src", "parallelism": 2, "reprocessingLatency": 1},
    ...                   {"name": "sink", "reprocessingLatency": 1,
    ...                    "inputs": [{"operator": "src", "grouping": "global"}]}]})
    >>> g = expand(s)
    >>> g.tasks, [g.tasks[u] for u in g.preds[2]]
    (('src-0', 'src-1', 'sink-0'), ['src-0', 'src-1'])
    """
    ops = {op.name: op for op in spec.operators}  # unique: the model refuses duplicates
    upstream = _upstream(spec)
    marked = [op.name for op in spec.operators if op.output]
    consumed = {u for ups in upstream.values() for u in ups}
    out_ops = set(marked) if marked else {n for n in ops if n not in consumed}
    tasks: list[str] = []
    latency: dict[str, float] = {}
    weight: dict[str, float] = {}
    operator: dict[str, str] = {}
    priority: dict[str, float] = {}
    outputs: list[str] = []
    edges: list[tuple[str, str]] = []
    for op, pod_cpu in ((o, pod_weight(spec, o)) for o in spec.operators):  # sidecars' too
        for i in range(op.parallelism):
            t = task_id(op.name, i)
            tasks.append(t)
            latency[t] = op.reprocessing_latency
            weight[t] = pod_cpu
            operator[t] = op.name
            priority[t] = float(op.priority)
            if op.name in out_ops:
                outputs.append(t)
    ids = {op.name: [task_id(op.name, i) for i in range(op.parallelism)] for op in spec.operators}
    for op in spec.operators:  # each id formatted once: a key grouping has p x q edges
        dst = ids[op.name]
        for inp in op.inputs:
            src = ids[inp.operator]
            if inp.grouping is Grouping.forward:
                edges.extend(zip(src, dst, strict=True))
            elif inp.grouping is Grouping.global_:
                edges.extend((u, dst[0]) for u in src)
            else:
                edges.extend((u, v) for u in src for v in dst)
    return TaskGraph.build(
        tasks,
        edges,
        latency=latency,
        weight=weight,
        operator=operator,
        outputs=outputs,
        priority=priority,
    )


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A hash of what planning depends on (not ``reoptimization``, ``suspend``, ``lifecycle``).

    A plan recorded with it stays valid across such changes (a resume follows its plan).

    Examples
    --------
    >>> a = {"image": "x", "reoptimization": {"nonce": "1"}}
    >>> spec_hash(a) == spec_hash({**a, "reoptimization": {"nonce": "2"}})
    True
    """
    rest = {k: v for k, v in spec.items() if k not in ("reoptimization", "suspend", "lifecycle")}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:16]
