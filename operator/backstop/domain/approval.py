"""Approving a stored ``apply: suggest`` recommendation: which one, and whether it still holds.

Why a decision of its own: a recommendation is computed against one spec and one plan. A
person reads it (``status.reoptimization.recommendation``), perhaps hours later, and
approves it by its id (``kubectl annotate st NAME backstop.dev/approve-recommendation=<id>``
or ``backstop reoptimize NAME --approve``). Applying it is only right if it is still the
plan the person saw for the topology as it is now: the same id, the same spec generation
and the same current plan it was compared against (a node loss or a restore changes the
plan; an edit changes the generation). Otherwise the approval is refused with a reason,
and the person runs the job again. Strimzi's ``strimzi.io/rebalance=approve`` works the
same way on a Cruise Control proposal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApprovalDecision",
    "decide_approval",
    "plan_fingerprint",
    "recommendation_id",
]

APPROVABLE = frozenset({"Suggested", "BelowThreshold"})
"""Results whose recommendation a person may still apply (a run that was not applied)."""


def plan_fingerprint(plan: Mapping[str, Any] | None) -> str:
    """A short hash of what a plan decides: the placement and the backups.

    Examples
    --------
    >>> a = plan_fingerprint({"assignment": {"x-0": "n1"}, "backups": ["x-0"], "moved": 3})
    >>> a == plan_fingerprint({"backups": ["x-0"], "assignment": {"x-0": "n1"}}), len(a)
    (True, 12)
    >>> a == plan_fingerprint({"assignment": {"x-0": "n2"}, "backups": ["x-0"]})
    False
    """
    plan = plan or {}
    what = {"assignment": plan.get("assignment") or {}, "backups": plan.get("backups") or []}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def recommendation_id(plan: Mapping[str, Any], base: str, last_run: str) -> str:
    """The id a person approves: the recommended plan, the plan it replaces, and the run.

    Two runs that recommend the same plan get different ids, so an approval always names
    the run whose figures the person read.

    >>> recommendation_id({"assignment": {"a": "n"}}, "b", "2026-01-01T00:00:00Z")[:0]
    ''
    """
    key = f"{plan_fingerprint(plan)}/{base}/{last_run}"
    return hashlib.sha256(key.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class ApprovalDecision:
    """What to do with an approval annotation.

    ``action`` is ``apply`` (write the stored plan), ``refuse`` (record why, apply
    nothing), ``wait`` (a recovery is running: decide once it is over) or ``none``
    (already handled).
    """

    action: str
    reason: str
    message: str


def decide_approval(
    approved: str,
    state: Mapping[str, Any],
    generation: int,
    plan: Mapping[str, Any] | None,
    *,
    recovering: bool = False,
    ready_nodes: frozenset[str] | None = None,
) -> ApprovalDecision:
    """Decide an approval of recommendation ``approved`` against the topology as it is now.

    Parameters
    ----------
    approved:
        The annotation's value: the id of the recommendation to apply.
    state:
        ``status.reoptimization`` (the stored run, its recommendation and any earlier
        approval).
    generation:
        ``metadata.generation`` now.
    plan:
        ``status.plan`` now.
    recovering:
        Whether a recovery is running (``status.recovery.active``).
    ready_nodes:
        The Ready nodes now (``None``: not checked); a plan on a node that is gone is refused.

    Examples
    --------
    >>> rec = {"id": "r1", "base": plan_fingerprint({"assignment": {"a-0": "n1"}}),
    ...        "assignment": {"a-0": "n2"}, "backups": []}
    >>> state = {"result": "Suggested", "generation": 3, "recommendation": rec}
    >>> decide_approval("r1", state, 3, {"assignment": {"a-0": "n1"}}).action
    'apply'
    >>> d = decide_approval("r1", state, 4, {"assignment": {"a-0": "n1"}})
    >>> d.action, d.reason
    ('refuse', 'SpecChanged')
    >>> decide_approval("r0", state, 3, {"assignment": {"a-0": "n1"}}).reason
    'UnknownRecommendation'
    """
    rec = state.get("recommendation") or {}
    done = state.get("approval") or {}
    if done.get("id") == approved and done.get("result") in ("Applied", "Refused"):
        return ApprovalDecision("none", done.get("reason", ""), done.get("message", ""))
    if not rec.get("assignment") or not rec.get("id"):
        return ApprovalDecision(
            "refuse", "NoRecommendation", "there is no stored recommendation to approve"
        )
    if rec["id"] != approved:
        return ApprovalDecision(
            "refuse",
            "UnknownRecommendation",
            f"recommendation {approved!r} is not the stored one ({rec['id']!r}); "
            "approve the id in status.reoptimization.recommendation.id",
        )
    if state.get("result") not in APPROVABLE or state.get("applied"):
        return ApprovalDecision(
            "refuse",
            "NotApplicable",
            f"the run's result is {state.get('result')!r}: only a Suggested or "
            "BelowThreshold recommendation can be approved",
        )
    if state.get("generation") != generation:
        return ApprovalDecision(
            "refuse",
            "SpecChanged",
            f"the spec changed since the recommendation (generation {state.get('generation')}"
            f" -> {generation}); run the re-optimization again",
        )
    if recovering:
        return ApprovalDecision("wait", "Recovering", "a recovery is running; waiting for it")
    if rec.get("base") != plan_fingerprint(plan):
        return ApprovalDecision(
            "refuse",
            "PlanChanged",
            "the current plan changed since the recommendation (a recovery, restore or "
            "re-plan); run the re-optimization again",
        )
    gone = sorted(set(rec["assignment"].values()) - ready_nodes) if ready_nodes else []
    if gone:
        return ApprovalDecision(
            "refuse",
            "NodesGone",
            f"the recommended plan uses node(s) that are not Ready now: {', '.join(gone)}",
        )
    return ApprovalDecision("apply", "Approved", f"applied recommendation {approved} as approved")
