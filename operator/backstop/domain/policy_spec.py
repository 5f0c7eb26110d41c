"""``spec.recovery``, ``spec.replication`` and ``spec.reoptimization``: the policies.

How the operator recovers from node loss, which tasks it replicates actively on spare
capacity, and how often it re-estimates and re-plans on Spark. Apart from
:mod:`backstop.domain.spec` to keep that module small; it is part of the same model (the
CRD schema is generated from both), and :mod:`backstop.domain.spec` re-exports its
classes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from backstop.domain.budget import DETECTION_DESCRIPTION
from backstop.domain.constants import SECONDS_MAX
from backstop.domain.metricspath import DESCRIPTION as METRICS_PATH_DESCRIPTION
from backstop.domain.metricspath import check_path
from backstop.domain.names import one_of, registered
from backstop.domain.quantity import positive_quantity
from planners.recovery import RECOVERY_ALGORITHMS
from planners.replication import STRATEGIES

Seconds = Annotated[float, Field(ge=0, le=SECONDS_MAX)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class RecoveryMode(StrEnum):
    incremental = "incremental"
    blocking = "blocking"
    auto = "auto"


def _operator_default(schema: dict[str, Any]) -> None:
    """No default in the CRD: the API server would store it, and an unset field must stay
    unset so the operator-wide default applies (``Settings.resolve``)."""
    schema.pop("default", None)


class RecoveryPolicy(_Model):
    """How the operator recovers from node loss."""

    mode: RecoveryMode = RecoveryMode.auto
    grace_period_seconds: Seconds = Field(
        30.0,
        description="NotReady time before loss; unset: the operator's default (Helm value "
        "recovery.gracePeriodSeconds), else 30.",
        json_schema_extra=_operator_default,
    )
    detection_seconds: Seconds = Field(0.0, description=DETECTION_DESCRIPTION)
    restart_seconds: Seconds = Field(
        0.0, description="Pod (re)start of a lost task (the model's c, measured)."
    )
    utilization_cap: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Usable share of a node's CPU; unset: the operator's default (Helm value "
        "recovery.utilizationCap), else 0.8.",
        json_schema_extra=_operator_default,
    )
    correlated_threshold: int = Field(
        2, ge=1, le=10000, description="Lost nodes that make it correlated."
    )
    window_seconds: Seconds = Field(60.0, description="Losses within it join one session.")
    algorithm: str = registered("auto", RECOVERY_ALGORITHMS, "Recovery scheduling algorithm.")
    drain_timeout_seconds: Seconds | None = Field(
        None,
        description="How long a drain may stay blocked (no task on the cordoned nodes can move "
        "without breaking the bound) before the PodDisruptionBudget lets those tasks' pods be "
        "evicted: they stop until they run again. Unset: the drain waits for capacity.",
    )
    replan_on_violation: bool = Field(
        True,
        description="Whenever the bound is broken (after a recovery, say), restore it as soon "
        "as capacity allows: re-plan with the fewest moved pods and move a few at a time.",
    )

    _algorithm = field_validator("algorithm")(one_of("recovery algorithm", RECOVERY_ALGORITHMS))


class ReplicationPolicy(_Model):
    """Selective active replication on spare capacity."""

    spare_cpu: str = Field(
        description="CPU budget for active replicas (Kubernetes quantity).",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )

    @field_validator("spare_cpu", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> str:
        text = positive_quantity(value)
        assert text is not None  # a required field: pydantic refuses None first
        return text

    strategy: str = registered("qod-lu", STRATEGIES, "Importance: qod, lu, qod-lu, or random.")
    host_failure_prob: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Probability that a node crashes within a day (the replication seed's p). "
        "When set, every selection (exact knapsack, the seed's sort-and-fill) with every "
        "heuristic is tried and the replicas that keep the most queries running under "
        "independent node crashes are chosen.",
    )

    _strategy = field_validator("strategy")(one_of("replication strategy", STRATEGIES))


class ApplyMode(StrEnum):
    auto = "auto"
    suggest = "suggest"


class ReoptimizationPolicy(_Model):
    """Periodic re-estimation and re-planning on Spark (docs/reoptimization.md)."""

    interval_seconds: float = Field(
        3600.0, ge=60, le=30 * SECONDS_MAX, description="Seconds between runs (60 s to 30 days)."
    )
    apply: ApplyMode = Field(
        ApplyMode.suggest,
        description="auto: apply a better plan; suggest: only record it in status.",
    )
    min_improvement: float = Field(
        0.1, ge=0, le=1, description="Smallest relative gain that is applied (hysteresis)."
    )
    nonce: str | None = Field(None, max_length=253, description="Change it to run once on demand.")
    metrics_path: str | None = Field(
        None,
        max_length=4096,
        description=METRICS_PATH_DESCRIPTION,
    )

    _metrics_path = field_validator("metrics_path")(check_path)
