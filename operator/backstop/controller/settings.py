"""The operator's configuration, read once from its environment into a typed object.

The Helm chart and ``backstop operator`` pass configuration as environment variables;
this module is the only place that reads them. :func:`settings` parses them on first
use (the operator's startup handler calls it, so a bad value stops the operator at
startup with the variable's name instead of failing every reconcile).

Examples
--------
>>> s = Settings.from_env({"BACKSTOP_GRACE_PERIOD_SECONDS": "5", "BACKSTOP_REOPT_TICK": ""})
>>> s.grace_period_seconds, s.utilization_cap, s.reopt_tick_seconds, s.metrics_port
(5.0, None, 5.0, None)
>>> Settings.from_env({"BACKSTOP_METRICS_PORT": "9090"}).metrics_port
9090
>>> Settings.from_env({"BACKSTOP_METRICS_PORT": "0"})
Traceback (most recent call last):
...
ValueError: BACKSTOP_METRICS_PORT: Input should be greater than or equal to 1, got 0.0
>>> Settings.from_env({"BACKSTOP_REOPT_TIMEOUT": "soon"})
Traceback (most recent call last):
...
ValueError: BACKSTOP_REOPT_TIMEOUT: expected a number, got 'soon'
>>> Settings.from_env({"BACKSTOP_FAULT_POINT": "after-lunch"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: BACKSTOP_FAULT_POINT: Input should be 'after-status', ..., got 'after-lunch'
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Json, ValidationError

from backstop.domain import spec as spec_model
from backstop.domain.admission import image_problem, node_local_problem
from planners import InvalidTopology

#: field name → environment variable
ENV_VARS: dict[str, str] = {
    "grace_period_seconds": "BACKSTOP_GRACE_PERIOD_SECONDS",
    "utilization_cap": "BACKSTOP_UTILIZATION_CAP",
    "spark_master": "BACKSTOP_SPARK_MASTER",
    "reopt_timeout_seconds": "BACKSTOP_REOPT_TIMEOUT",
    "reopt_time_limit": "BACKSTOP_REOPT_TIME_LIMIT",
    "reopt_tick_seconds": "BACKSTOP_REOPT_TICK",
    "fault_point": "BACKSTOP_FAULT_POINT",
    "fault_after": "BACKSTOP_FAULT_AFTER",
    "recoveryplan_history": "BACKSTOP_RECOVERYPLAN_HISTORY",
    "metrics_port": "BACKSTOP_METRICS_PORT",
    "reopt_enabled": "BACKSTOP_REOPTIMIZE",
    "reopt_mode": "BACKSTOP_REOPTIMIZE_MODE",
    "spark_image": "BACKSTOP_SPARK_IMAGE",
    "spark_resources": "BACKSTOP_SPARK_RESOURCES",
    "spark_conf": "BACKSTOP_SPARK_CONF",
    "spark_service_account": "BACKSTOP_SPARK_SERVICE_ACCOUNT",
    "metrics_claim": "BACKSTOP_METRICS_CLAIM",
    "metrics_host_path": "BACKSTOP_METRICS_HOST_PATH",
    "reopt_store_secret": "BACKSTOP_REOPT_STORE_SECRET",
    "reopt_pod": "BACKSTOP_REOPT_POD",
    "memory_limit": "BACKSTOP_MEMORY_LIMIT",
    "operator_namespace": "BACKSTOP_OPERATOR_NAMESPACE",
    "allow_node_local_store": "BACKSTOP_ALLOW_NODE_LOCAL_STORE",
    "task_image": "BACKSTOP_TASK_IMAGE",
}
TEXT = frozenset(
    {
        "spark_master",
        "fault_point",
        "reopt_enabled",
        "reopt_mode",
        "spark_image",
        "spark_resources",
        "spark_conf",
        "spark_service_account",
        "metrics_claim",
        "metrics_host_path",
        "reopt_store_secret",
        "reopt_pod",
        "operator_namespace",
        "allow_node_local_store",
        "task_image",
    }
)
"""Settings read as text (pydantic parses booleans and JSON); the others are numbers."""
RECOVERY_DEFAULTS = ("grace_period_seconds", "utilization_cap")
"""Settings that are operator-wide defaults of the ``spec.recovery`` fields of the same name."""

FaultPoint = Literal[
    "after-status", "after-recoveryplan", "after-configmap", "mid-pod-batch", "after-replan"
]
"""The write points where :func:`backstop.controller.faults.point` can stop the operator."""


class Settings(BaseModel):
    """Operator-wide settings (see ``docs/reoptimization.md`` and the chart's values)."""

    model_config = ConfigDict(frozen=True)

    grace_period_seconds: float | None = Field(None, ge=0)
    """Default ``spec.recovery.gracePeriodSeconds`` for topologies that omit it."""
    utilization_cap: float | None = Field(None, gt=0, le=1)
    """Default ``spec.recovery.utilizationCap`` for topologies that omit it."""
    spark_master: str = "local[2]"
    """Spark master of the per-topology re-optimization runs."""
    reopt_timeout_seconds: float = 900.0
    """Seconds before a re-optimization run is killed."""
    reopt_time_limit: float = 2.0
    """Planner seconds per plan in a re-optimization run."""
    reopt_tick_seconds: float = 5.0
    """Seconds between the re-optimization daemon's checks."""
    fault_point: FaultPoint | None = None
    """Test tool: the write point at which the operator kills itself (:mod:`.faults`)."""
    fault_after: int = Field(1, ge=1)
    """... at the N-th time it reaches that point."""
    recoveryplan_history: int = Field(20, ge=2)
    """RecoveryPlans kept per topology, the newest (older ones are deleted)."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Port of the Prometheus ``/metrics`` endpoint (:mod:`backstop.controller.metrics`);
    unset: not served."""
    reopt_enabled: bool = True
    """``reoptimization.enabled``: false leaves every topology's ``spec.reoptimization``
    unused (recorded as ``result: Disabled``)."""
    reopt_pod: Json[dict[str, Any]] | None = None
    """The Job pod's ``imagePullSecrets``, ``nodeSelector``, ``tolerations``, ``affinity``
    and ``priorityClassName``, as JSON (``reoptimization.*`` of the chart)."""
    reopt_mode: Literal["local", "job"] = "local"
    """``local``: a child process of the operator, one JVM at a time; ``job``: a Kubernetes
    Job per run in :attr:`operator_namespace`, from :attr:`spark_image`."""
    spark_image: str | None = None
    """Image of the re-optimization Job (pyspark and a JRE; the chart's
    ``<image.registry>/spark``)."""
    task_image: str | None = Field(None, min_length=1)
    """The task image of a topology without ``spec.image`` (the chart's
    ``<image.registry>/runtime``); unset: such a topology is refused."""
    spark_resources: Json[dict[str, dict[str, str]]] | None = None
    """The Job container's ``resources`` (``requests``/``limits``), as JSON."""
    spark_conf: Json[dict[str, str]] | None = None
    """More ``--conf`` settings of the Job's Spark, as a JSON object (``reoptimization.sparkConf``):
    with a ``k8s://`` master, the executors' number and size (``spark.executor.instances``,
    ``spark.kubernetes.executor.request.cores``, ``spark.executor.memory``)."""
    spark_service_account: str | None = None
    """The Job pod's ServiceAccount (creates the result ConfigMap; executors for k8s://)."""
    metrics_claim: str | None = None
    """A PersistentVolumeClaim holding the task metrics, mounted in the Job at /var/lib/backstop."""
    metrics_host_path: str | None = None
    """Or a host directory (the local cluster's store), mounted the same way."""
    reopt_store_secret: str | None = None
    """A Secret in :attr:`operator_namespace` (keys ``accessKeyId``, ``secretAccessKey``) with
    the object store credentials of Jobs that read ``s3://`` metrics of topologies in other
    namespaces, whose own Secret a Job there cannot refer to
    (``reoptimization.objectStoreSecret``)."""
    memory_limit: float | None = None
    """Bytes: the operator container's memory limit (Downward API), which bounds the Spark
    driver heap of ``local`` runs (:mod:`backstop.domain.sparkmemory`)."""
    operator_namespace: str | None = None
    """The operator's (release) namespace: where ``job`` runs create their Jobs."""
    allow_node_local_store: bool = False
    """Admit an ``emptyDir`` or ``hostPath`` store on topologies whose tasks may run on
    several nodes (:func:`backstop.domain.admission.node_local_problem`): only for a
    single-host development cluster, where every node shares the host's directories."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Parse the variables of :data:`ENV_VARS`; unset or empty ones keep the default."""
        values: dict[str, str | float] = {}
        for name, var in ENV_VARS.items():
            raw = env.get(var)
            if not raw:
                continue
            if name in TEXT:
                values[name] = raw
                continue
            try:
                values[name] = float(raw)
            except ValueError:
                raise ValueError(f"{var}: expected a number, got {raw!r}") from None
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            first = err.errors()[0]
            var = ENV_VARS.get(str(first["loc"][0]), str(first["loc"][0]))
            raise ValueError(f"{var}: {first['msg']}, got {first.get('input')!r}") from None

    def resolve(self, model: spec_model.StreamTopologySpec) -> spec_model.StreamTopologySpec:
        """``model`` with each recovery field it leaves unset taken from these settings, and
        its ``image``, when unset, from :attr:`task_image`.

        Field by field, not object by object: a topology that sets only ``recovery.mode``
        still gets the operator's grace period, and a field the topology sets wins. The
        CRD gives these fields no default, so "unset" survives the API server.

        Examples
        --------
        >>> m = spec_model.parse_spec({"image": "x", "recoveryLatencyBound": 2,
        ...     "recovery": {"mode": "blocking", "utilizationCap": 0.5},
        ...     "operators": [{"name": "a", "reprocessingLatency": 1}]})
        >>> r = Settings(grace_period_seconds=5, utilization_cap=0.9).resolve(m).recovery
        >>> r.mode.value, r.grace_period_seconds, r.utilization_cap
        ('blocking', 5.0, 0.5)
        >>> Settings().resolve(m) is m  # no operator-wide defaults: the model's own
        True
        >>> bare = spec_model.parse_spec({"recoveryLatencyBound": 2,
        ...     "operators": [{"name": "a", "reprocessingLatency": 1}]})
        >>> Settings(task_image="r/runtime:1").resolve(bare).image, Settings().resolve(m).image
        ('r/runtime:1', 'x')
        """
        given = model.recovery.model_fields_set
        update = {
            name: getattr(self, name)
            for name in RECOVERY_DEFAULTS
            if name not in given and getattr(self, name) is not None
        }
        top: dict[str, Any] = {}
        if update:
            top["recovery"] = model.recovery.model_copy(update=update)
        if model.image is None and self.task_image is not None:
            top["image"] = self.task_image
        return model.model_copy(update=top) if top else model


@functools.cache
def settings() -> Settings:
    """The process's settings, read from ``os.environ`` on first use."""
    return Settings.from_env(os.environ)


def parse_spec(spec: Any, name: str | None = None) -> spec_model.StreamTopologySpec:
    """A topology's spec as the operator runs it: validated, then resolved against the
    operator-wide defaults (every handler parses through here).

    A store the tasks cannot share (:func:`~backstop.domain.admission.node_local_problem`)
    is an invalid spec unless :attr:`Settings.allow_node_local_store`: the same line the
    admission webhook answers, for a topology applied while no webhook ran.
    """
    model = settings().resolve(spec_model.parse_spec(spec, name))
    problem = image_problem(model, settings().task_image)
    if problem is None and not settings().allow_node_local_store:
        problem = node_local_problem(model)
    if problem is not None:
        raise InvalidTopology(problem)
    return model
