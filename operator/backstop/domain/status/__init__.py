"""The StreamTopology ``status``: its typed models, its wire form and its conditions.

* :mod:`.types`: the typed status (pydantic models), read once (:func:`parse_status`)
  and written through one merge path (:func:`status_patch`);
* :mod:`.wire`: the form the API stores, large per-task lists and maps compact;
* :mod:`.conditions`: condition objects, their merge and the JSON merge patch;
* :mod:`.derive`: every condition derived from the recorded facts and the pods;
* :mod:`.pods`, :mod:`.plan`: what the conditions read of a pod and of the plan;
* :mod:`.boundtext`: a worst recovery said against the bound the user set.

The modules of this package import one another by their own names, never through this
one, so any of them can be imported first.
"""

from backstop.domain.status.boundtext import said, worst_vs_bound
from backstop.domain.status.conditions import (
    build_condition,
    conditions_changed,
    merge_conditions,
    merge_patch,
    now_rfc3339,
)
from backstop.domain.status.derive import (
    approval_condition,
    conditions_patch,
    derive_conditions,
    lifecycle_conditions,
    rollout_condition,
    suspend_conditions,
)
from backstop.domain.status.plan import build_plan_status, expected_pods
from backstop.domain.status.pods import FAILING, PodState, pod_failure, pod_key, pod_state
from backstop.domain.status.types import (
    Condition,
    DrainStatus,
    ParsedStatus,
    PlanStatus,
    PodsRefusedStatus,
    Problem,
    RecoveryStatus,
    ReoptimizationStatus,
    RestoreStatus,
    RestoreStepRecord,
    RolloutStatus,
    RolloutStepRecord,
    StepRecord,
    SuspendStatus,
    TopologyStatus,
    parse_status,
    status_patch,
    with_changes,
)
from backstop.domain.status.wire import (
    COMPACT_ABOVE,
    TASK_LISTS,
    TASK_MAPS,
    compact_status,
    compact_value,
    patch_base,
    plain_status,
)

__all__ = [
    "COMPACT_ABOVE",
    "FAILING",
    "TASK_LISTS",
    "TASK_MAPS",
    "Condition",
    "DrainStatus",
    "ParsedStatus",
    "PlanStatus",
    "PodState",
    "PodsRefusedStatus",
    "Problem",
    "RecoveryStatus",
    "ReoptimizationStatus",
    "RestoreStatus",
    "RestoreStepRecord",
    "RolloutStatus",
    "RolloutStepRecord",
    "StepRecord",
    "SuspendStatus",
    "TopologyStatus",
    "approval_condition",
    "build_condition",
    "build_plan_status",
    "compact_status",
    "compact_value",
    "conditions_changed",
    "conditions_patch",
    "derive_conditions",
    "expected_pods",
    "lifecycle_conditions",
    "merge_conditions",
    "merge_patch",
    "now_rfc3339",
    "parse_status",
    "patch_base",
    "plain_status",
    "pod_failure",
    "pod_key",
    "pod_state",
    "rollout_condition",
    "said",
    "status_patch",
    "suspend_conditions",
    "with_changes",
    "worst_vs_bound",
]
