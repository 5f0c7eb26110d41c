"""The StreamTopology ``status`` as typed pydantic models, parsed once per tick.

The status is the operator's write-ahead log: a restarted operator resumes from it.
So it is read in one place (:func:`parse_status`) and written through one place
(:func:`status_patch`, old and new typed status to the JSON merge patch), and every
reader works on attributes, not on ``.get`` chains over raw dicts.

The models are lenient: a status written by an older (or newer) operator must
never wedge this one. Unknown keys are kept as they are (``extra="allow"``), so a
round trip loses nothing; a known key whose value no longer validates is dropped
from the parsed model (and reported in :attr:`ParsedStatus.dropped`) instead of
failing the tick. The keys on the wire are camelCase.

Large per-task lists and maps are compact on the wire (:mod:`backstop.domain.status.wire`,
``docs/scale.md``); the models hold them plain: :func:`parse_status` decodes,
:meth:`TopologyStatus.wire` and :func:`status_patch` encode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from backstop.domain.status.conditions import merge_patch
from backstop.domain.status.wire import compact_status, patch_base, plain_status


class _Status(BaseModel):
    """Base: camelCase on the wire, unknown keys kept, values never mutated in place."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True
    )

    def dump(self) -> dict[str, Any]:
        """The JSON form written to the API (``None`` means absent)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Problem(_Status):
    """``status.problem``: why a generation has no plan (invalid spec, infeasible)."""

    reason: str
    message: str = ""
    generation: int | None = None


class PlanStatus(_Status):
    """``status.plan``: the summary users read and the write-ahead record of the plan.

    ``assignment`` is ``None`` until a plan is recorded; while a recovery session
    runs, failed tasks are absent from it.
    """

    generation: int | None = None
    algorithm: str | None = None
    tasks: int | None = None
    backup_count: int | None = None
    backups: list[str] = Field(default_factory=list)
    nodes_used: int | None = None
    worst_recovery_latency: float | None = None
    bound: float | None = None
    """The bound ``H`` is kept within: ``recoveryLatencyBound − d − c``."""
    detection_seconds: float | None = None
    """``d`` of that bound (``spec.recovery.detectionSeconds``)."""
    restart_seconds: float | None = None
    """``c`` of that bound (``spec.recovery.restartSeconds``)."""
    bound_satisfied: bool | None = None
    optimal: bool | None = None
    assignment: dict[str, str] | None = None
    worst_by_node: dict[str, float] = Field(default_factory=dict)
    moved: int | None = None
    replicas: dict[str, list[str]] | None = None
    replicated: list[str] | None = None
    availability: float | None = None
    spec_hash: str | None = None
    """:func:`backstop.domain.spec.spec_hash` of the spec this plan was computed from: a
    resume of an equal spec keeps the plan, and the spec ConfigMap
    (:mod:`backstop.k8s.specstore`) holds that spec's content under it, which the
    supervisor follows while a later edit is invalid or infeasible."""
    promoted: dict[str, int] = Field(default_factory=dict)
    """Tasks whose primary runs in a promoted replica's pod: ``{task: k}`` for the pod
    ``<pod>--r<k>`` (:mod:`backstop.domain.promotion`)."""
    epochs: dict[str, int] = Field(default_factory=dict)
    """Fencing epoch per task recreated while an old copy may run (absent: 0); see
    :mod:`backstop.domain.fencing`."""
    grace_period_seconds: float | None = None
    """The ``spec.recovery.gracePeriodSeconds`` in force: the topology's, else the
    operator-wide default (Helm value ``recovery.gracePeriodSeconds``)."""
    utilization_cap: float | None = None
    """The ``spec.recovery.utilizationCap`` in force, resolved the same way."""
    spec: dict[str, Any] | None = None
    """Deprecated, read and no longer written: the copy of the plan's spec that older
    operators kept here. The supervisor still follows it; the next resume moves it to the
    spec ConfigMap and drops it, so the status does not grow with the spec."""

    def recorded_for(self, generation: int) -> bool:
        """Whether this is the recorded plan of ``generation`` (one the pods may follow)."""
        return self.generation == generation and self.assignment is not None


class StepRecord(_Status):
    """One recovery step as recorded in ``status.recovery.lastStep`` (and its RecoveryPlan)."""

    step: int
    trigger: str
    at: str | None = None
    algorithm: str = ""
    recover: dict[str, str] = Field(default_factory=dict)
    pending: list[str] = Field(default_factory=list)
    recovered_queries: list[str] = Field(default_factory=list)
    recovered_priority: float = 0.0
    failed_priority: float = 0.0
    lost_nodes: list[str] | None = None
    """The nodes lost when the step was issued (the RecoveryPlan's ``lostNodes``)."""


class RecoveryStatus(_Status):
    """``status.recovery``: one node-loss recovery session (the state machine's state)."""

    session: str | None = None
    started_at: str | None = None
    step: int = 0
    failed: list[str] = Field(default_factory=list)
    """Tasks lost and not yet given a node (absent from ``plan.assignment``)."""
    session_failed: list[str] = Field(default_factory=list)
    recovered: list[str] = Field(default_factory=list)
    lost_history: dict[str, float] = Field(default_factory=dict)
    lost: dict[str, float] = Field(default_factory=dict)
    """Nodes lost and not back, with the epoch second their loss was detected."""
    mode: str | None = None
    seen_ready: list[str] = Field(default_factory=list)
    last_attempt: float = 0.0
    active: bool = False
    last_step: StepRecord | None = None
    message: str | None = None
    completed_at: str | None = None
    applied_step: int | None = None


class RestoreStepRecord(_Status):
    """One batch of moves of a restore or consolidation."""

    moves: dict[str, str] = Field(default_factory=dict)
    worst: float = 0.0


class RestoreStatus(_Status):
    """``status.restore``: bringing a broken bound back (or consolidating), step by step."""

    id: str | None = None
    purpose: str = "Restore"
    active: bool = False
    phase: str | None = None
    generation: int | None = None
    attempts: int = 0
    capacity_key: str | None = None
    started_at: str | None = None
    started_epoch: float | None = None
    moved: int | None = None
    moved_tasks: list[str] | None = None
    minimal: bool | None = None
    worst_before: float | None = None
    worst_target: float | None = None
    steps: list[RestoreStepRecord] = Field(default_factory=list)
    issued: int = 0
    nodes_target: int | None = None
    message: str | None = None
    plan_seconds: float | None = None
    completed_at: str | None = None
    duration_seconds: float | None = None


class DrainStatus(_Status):
    """``status.drain``: tasks moved off cordoned nodes."""

    nodes: list[str] = Field(default_factory=list)
    moved: int = 0
    remaining: int = 0
    moving: list[str] = Field(default_factory=list)
    """The tasks of the last drain step, recreated only after ``holdUntil``."""
    hold_until: float | None = None
    """Unix time before which the moved tasks' new pods are not created
    (:data:`backstop.domain.podfaults.DRAIN_HOLD_SECONDS`)."""


class SuspendStatus(_Status):
    """``status.suspend``: a suspend (``spec.suspend: true``) and the resume after it.

    Written before the first pod is removed, so every removal is known as the
    operator's own: no recovery runs while it is present (its pods are not lost).
    """

    phase: str = "Suspending"
    """``Suspending`` (pods asked to checkpoint and stop), ``Suspended``, ``Resuming``."""
    generation: int | None = None
    requested_at: str | None = None
    deadline: float | None = None
    """Unix time after which pods still stopping are removed without their checkpoint."""
    timeout: float | None = None
    placement: dict[str, str] = Field(default_factory=dict)
    """``{task: node}`` when the suspend began (the recorded plan's)."""
    stopped: list[str] = Field(default_factory=list)
    """Tasks that had a pod when the suspend began: each is asked for a final checkpoint."""
    checkpoints: dict[str, str] = Field(default_factory=dict)
    """``{task: what its runtime reported}``: the final checkpoint of each task."""
    missing: list[str] = Field(default_factory=list)
    """Tasks whose pod ended without reporting a final checkpoint."""
    message: str | None = None
    suspended_at: str | None = None


class RolloutStepRecord(_Status):
    """One step of a rollout: the tasks replaced together and the worst recovery meanwhile."""

    tasks: list[str] = Field(default_factory=list)
    worst: float = 0.0


class RolloutStatus(_Status):
    """``status.rollout``: a spec change replacing pods in steps that keep the bound."""

    generation: int | None = None
    active: bool = False
    pending: list[str] = Field(default_factory=list)
    """Tasks still running their old pod, not yet in a step."""
    batch: list[str] = Field(default_factory=list)
    """The step in flight: its pods are replaced now."""
    step: int = 0
    old_assignment: dict[str, str] = Field(default_factory=dict)
    old_backups: list[str] = Field(default_factory=list)
    history: list[RolloutStepRecord] = Field(default_factory=list)
    checkpoints: int = 0
    """Replaced pods whose runtime reported a final checkpoint."""
    started_at: str | None = None
    completed_at: str | None = None
    message: str | None = None


class ReoptimizationStatus(_Status):
    """``status.reoptimization``: the periodic Spark re-optimization (its own daemon)."""

    last_run: str | None = None
    nonce: str | None = None
    running: bool | None = None
    result: str | None = None
    message: str | None = None
    improvement: float | None = None
    recommendation: dict[str, Any] | None = None


class PodsRefusedStatus(_Status):
    """``status.podsRefused``: the API server refuses to create the task pods for a reason
    of the namespace (403: Pod Security admission, a ResourceQuota, a missing
    ServiceAccount). Removed once pods are created again."""

    code: int
    reason: str = ""
    message: str = ""
    since: str | None = None
    attempts: int = 1
    retry_at: float | None = None
    """Unix time of the next attempt: the supervise daemon creates no pod before it either."""

    def retry_delay(self) -> float:
        """Seconds before the next creation: doubling from 5 s up to 5 min, since only
        a change of the namespace helps.

        >>> [PodsRefusedStatus(code=403, attempts=n).retry_delay() for n in (1, 2, 7, 20)]
        [5.0, 10.0, 300.0, 300.0]
        """
        return float(min(300, 5 * 2 ** min(max(self.attempts - 1, 0), 10)))

    def holds(self, now: float) -> bool:
        """Whether pod creations wait for the next attempt at ``now``."""
        return self.retry_at is not None and now < self.retry_at


class Condition(_Status):
    """A ``metav1.Condition``."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class TopologyStatus(_Status):
    """The whole ``status`` of a StreamTopology.

    Examples
    --------
    >>> s = parse_status({"plan": {"generation": 2, "assignment": {"a": "n1"}},
    ...                   "recovery": {"failed": ["b"], "lastStep": {"step": 1,
    ...                   "trigger": "NodeLost"}}, "futureField": 1}).status
    >>> s.plan.recorded_for(2), s.recovery.failed, s.recovery.last_step.trigger
    (True, ['b'], 'NodeLost')
    >>> s.dump()["futureField"]
    1
    """

    plan: PlanStatus | None = None
    problem: Problem | None = None
    recovery: RecoveryStatus | None = None
    restore: RestoreStatus | None = None
    drain: DrainStatus | None = None
    suspend: SuspendStatus | None = None
    rollout: RolloutStatus | None = None
    reoptimization: ReoptimizationStatus | None = None
    pods_refused: PodsRefusedStatus | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None

    @property
    def plan_or_empty(self) -> PlanStatus:
        return self.plan or PlanStatus()

    @property
    def recovery_or_empty(self) -> RecoveryStatus:
        return self.recovery or RecoveryStatus()

    @property
    def restore_or_empty(self) -> RestoreStatus:
        return self.restore or RestoreStatus()

    def wire(self) -> dict[str, Any]:
        """The JSON form the API stores: :meth:`dump` with large task lists and maps
        compact (:func:`backstop.domain.status.wire.compact_status`)."""
        return compact_status(self.dump())

    def suspended(self) -> bool:
        """Whether a suspend holds the pods (``Suspending`` or ``Suspended``)."""
        return self.suspend is not None and self.suspend.phase in ("Suspending", "Suspended")

    def recovering(self) -> bool:
        """Whether a recovery session is active."""
        return self.recovery is not None and self.recovery.active


@dataclass(frozen=True)
class ParsedStatus:
    """What :func:`parse_status` read: the model, and the keys it had to drop."""

    status: TopologyStatus
    dropped: tuple[str, ...] = ()


def parse_status(raw: Mapping[str, Any] | None) -> ParsedStatus:
    """The typed status of a raw ``status`` dict, never failing on what it cannot read.

    A known key whose value does not validate (written by another version, or by
    hand) is dropped and named in ``dropped``; everything else is kept.

    Examples
    --------
    >>> p = parse_status({"plan": {"generation": "x", "tasks": 3}, "recovery": {"step": 1}})
    >>> p.status.plan.generation, p.status.plan.tasks, p.status.recovery.step, p.dropped
    (None, 3, 1, ('plan.generation',))
    """
    doc: Any = plain_status(_plain(dict(raw or {})))
    dropped: list[str] = []
    for _ in range(50):
        try:
            return ParsedStatus(TopologyStatus.model_validate(doc), tuple(dropped))
        except ValidationError as err:
            removed = False
            for e in err.errors():
                loc = tuple(e["loc"])
                if _drop(doc, loc):
                    dropped.append(".".join(str(p) for p in loc))
                    removed = True
            if not removed:
                break
    return ParsedStatus(TopologyStatus(), tuple(dropped) or ("status",))


def _plain(obj: Any) -> Any:
    """Deep copy of a (Kopf) mapping as plain dicts and lists."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _has(parent: Any, part: Any) -> bool:
    if isinstance(parent, dict):
        return part in parent
    return isinstance(parent, list) and isinstance(part, int) and 0 <= part < len(parent)


def _drop(doc: Any, loc: tuple[Any, ...]) -> bool:
    """Remove the value at ``loc`` (or the nearest enclosing one that exists)."""
    path = list(loc)
    while path:
        parent = doc
        for part in path[:-1]:
            parent = parent[part] if _has(parent, part) else None
        if _has(parent, path[-1]):
            del parent[path[-1]]
            return True
        path.pop()
    return False


def status_patch(
    old: TopologyStatus, new: TopologyStatus, old_wire: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The one merge path: the JSON merge patch that turns ``old`` into ``new`` (as the
    API stores them: :meth:`TopologyStatus.wire`; ``old_wire``: ``old.wire()`` if the
    caller kept it, at 10k tasks compacting it was a quarter of a recovery step's write).

    ``observedGeneration`` is set here, and only here, to the generation whose
    plan ``new`` records: a generation counts as observed once its plan is
    written, not when a handler merely saw it.

    Examples
    --------
    >>> old = TopologyStatus.model_validate({"plan": {"generation": 1,
    ...     "assignment": {"a": "n1", "b": "n1"}}})
    >>> new = old.model_copy(update={"plan": old.plan.model_copy(
    ...     update={"assignment": {"a": "n2"}})})
    >>> status_patch(old, new)
    {'plan': {'assignment': {'b': None, 'a': 'n2'}}, 'observedGeneration': 1}
    """
    after = new.wire()
    before = patch_base(old.dump(), after, old_wire)  # either stored form patches right
    if new.plan is not None and new.plan.assignment is not None and new.plan.generation:
        after["observedGeneration"] = new.plan.generation
    elif "observedGeneration" in before:
        after["observedGeneration"] = before["observedGeneration"]
    return merge_patch(before, after)


def with_changes(status: TopologyStatus, **fields: Any) -> TopologyStatus:
    """``status`` with whole sub-objects replaced (``None`` removes one).

    Examples
    --------
    >>> s = with_changes(TopologyStatus(), drain=DrainStatus(nodes=["n1"], moved=1))
    >>> s.drain.nodes
    ['n1']
    """
    return status.model_copy(update=fields)
