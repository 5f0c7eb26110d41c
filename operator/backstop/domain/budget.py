"""The planners' budget: what is left of ``recoveryLatencyBound`` for ``H(K_p)``.

A node's failure costs ``d + c + H(K_p)``: the loss is detected (``d``,
``spec.recovery.detectionSeconds``), every lost pod restarts at once (``c``,
``spec.recovery.restartSeconds``), then the lost tasks reprocess (``H``, the
failure-effect model). ``recoveryLatencyBound`` (``R``) counts from the failure, so every
planner and the evaluator that checks them keep ``H(K_p) <= R − d − c``
(:func:`budget`; ``StreamTopologySpec.planning_bound`` is the manifest's), and a spec
whose ``d + c`` alone reaches ``R`` is refused (:func:`check_fixed_terms`).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

DETECTION_DESCRIPTION = (
    "Seconds from a node's failure to the operator detecting the loss (the model's d, "
    "measured like restartSeconds): the planners keep detectionSeconds + restartSeconds + "
    "H <= recoveryLatencyBound, so the bound counts from the failure. The operator detects a "
    "loss once the node-monitor grace period of the control plane (kube-controller-manager "
    "--node-monitor-grace-period, 40 s by default) and then recovery.gracePeriodSeconds have "
    "passed. The first is a control-plane flag and the second may be the operator's default, "
    "so neither is known from the spec: the default 0 counts the bound from the loss detected "
    "(the RecoveryPlan). Set the sum measured on your nodes (about 25 s on local real nodes "
    "with a 20 s node-monitor grace period and a 5 s gracePeriodSeconds) to count from the "
    "failure."
)
"""``spec.recovery.detectionSeconds``: what ``d`` is and why its default is 0."""


class _Recovery(Protocol):
    @property
    def detection_seconds(self) -> float: ...

    @property
    def restart_seconds(self) -> float: ...


class _Spec(Protocol):
    @property
    def recovery_latency_bound(self) -> float: ...

    @property
    def recovery(self) -> _Recovery: ...


S = TypeVar("S", bound=_Spec)


def fixed_seconds(spec: _Spec) -> float:
    """``d + c``: the loss is detected, then every lost pod restarts at once."""
    return spec.recovery.detection_seconds + spec.recovery.restart_seconds


def fixed_terms_text(spec: _Spec) -> str:
    """The fixed terms by field name, for messages: ``recovery.restartSeconds (5)``,
    preceded by ``recovery.detectionSeconds (25) +`` when detection is counted."""
    rec = spec.recovery
    text = f"recovery.restartSeconds ({rec.restart_seconds:g})"
    if rec.detection_seconds:
        text = f"recovery.detectionSeconds ({rec.detection_seconds:g}) + {text}"
    return text


def budget(spec: _Spec, bound: float | None = None) -> float:
    """What the planners and the evaluator keep ``H(K_p)`` within: ``R − d − c``, with
    ``R`` the manifest's ``recoveryLatencyBound`` unless ``bound`` overrides it."""
    r = spec.recovery_latency_bound if bound is None else bound
    return r - fixed_seconds(spec)


def check_fixed_terms(spec: S) -> S:
    """Refuse a spec whose detection and restart alone break the bound (nothing keeps it)."""
    if budget(spec) <= 0:
        raise ValueError(
            f"{fixed_terms_text(spec)} must be below recoveryLatencyBound "
            f"({spec.recovery_latency_bound:g})"
        )
    return spec
