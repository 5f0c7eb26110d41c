"""What the recorded status implies about RecoveryPlans and the plan the pods follow.

Re-derived from ``status`` on every tick (:mod:`backstop.controller.supervisor`): the
RecoveryPlan of the session's last step and its phase, the step marked applied once its
tasks run where it put them, and the generation whose plan the pods follow while a later
edit is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backstop.domain.status.types import StepRecord, TopologyStatus, with_changes


@dataclass(frozen=True)
class WantedPlan:
    """A RecoveryPlan the status says must exist, with its phase."""

    session: str
    step: StepRecord
    phase: str


def wanted_recovery_plans(status: TopologyStatus) -> list[WantedPlan]:
    """The RecoveryPlans the recorded status implies (re-derived every tick).

    The recovery session's last step (``Applied`` once ``appliedStep`` says so). The
    restore's issued steps are derived by :mod:`backstop.controller.restore`.

    Examples
    --------
    >>> from backstop.domain.status import parse_status
    >>> s = parse_status({"recovery": {"session": "s1", "step": 2, "appliedStep": 2,
    ...     "lastStep": {"step": 2, "trigger": "NodeReady"}}}).status
    >>> [(w.session, w.step.step, w.phase) for w in wanted_recovery_plans(s)]
    [('s1', 2, 'Applied')]
    """
    rec = status.recovery
    if rec is None or rec.session is None or rec.last_step is None:
        return []
    phase = "Applied" if rec.applied_step == rec.last_step.step else "Issued"
    return [WantedPlan(rec.session, rec.last_step, phase)]


def mark_applied(status: TopologyStatus, running: Mapping[str, str]) -> TopologyStatus | None:
    """The status once the last step's tasks run where it put them, else ``None``.

    ``running`` maps each task whose primary pod is Running to its node.
    """
    rec = status.recovery
    last = rec.last_step if rec is not None else None
    if rec is None or last is None or rec.applied_step == last.step:
        return None
    if any(running.get(task) != node for task, node in last.recover.items()):
        return None
    return with_changes(status, recovery=rec.model_copy(update={"applied_step": last.step}))


def last_good_generation(status: TopologyStatus, generation: int) -> int | None:
    """The generation whose recorded plan the pods follow while ``generation`` is rejected.

    That is the recorded plan's, when it is older than ``generation`` and names the spec
    it was computed from (``status.plan.specHash``, whose content the spec ConfigMap
    holds, or the copy ``status.plan.spec`` of older operators); ``None`` otherwise.

    Examples
    --------
    >>> from backstop.domain.status import parse_status
    >>> s = parse_status({"plan": {"generation": 3, "assignment": {}, "specHash": "h"}}).status
    >>> last_good_generation(s, 4), last_good_generation(s, 3)
    (3, None)
    >>> old = parse_status({"plan": {"generation": 3, "assignment": {}, "spec": {}}}).status
    >>> last_good_generation(old, 4)
    3
    """
    plan = status.plan
    if plan is None or plan.assignment is None or plan.generation is None:
        return None
    if plan.spec is None and plan.spec_hash is None:
        return None
    return None if plan.generation == generation else plan.generation
