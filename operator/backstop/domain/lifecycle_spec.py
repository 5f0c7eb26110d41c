"""``spec.lifecycle``: how a suspend and a rollout take their checkpoints and steps.

Apart from :mod:`backstop.domain.spec` only to keep that module small; it is part of the
same model (the CRD schema is generated from both).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class LifecyclePolicy(BaseModel):
    """Suspend and rollout settings (``spec.suspend`` itself is a top-level field)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    checkpoint_timeout_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="A task pod the operator removes on purpose (suspend, rollout step) gets "
        "SIGTERM and this long to take its final checkpoint and exit; then it is removed "
        "anyway and the status names the tasks without one.",
    )
    max_unavailable: int = Field(
        0,
        ge=0,
        description="At most this many tasks replaced at once in a rollout step; 0: as many "
        "as keep the recovery bound for every single-node failure.",
    )


class LifecycleFields(BaseModel):
    """The lifecycle fields of :class:`backstop.domain.spec.StreamTopologySpec` (a base of it)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    suspend: bool = Field(
        False,
        description="true: every task takes a final checkpoint and its pod is removed; the "
        "plan, placement and backups stay in the status. false again: every task restarts "
        "on the node it had (re-planned only where that node is no longer usable) from it.",
    )
    lifecycle: LifecyclePolicy = Field(default_factory=LifecyclePolicy)
