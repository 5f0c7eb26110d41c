"""Operator-wide recovery defaults apply field by field, not object by object.

The chart's ``recovery.gracePeriodSeconds`` and ``recovery.utilizationCap`` reach the
operator as :class:`backstop.controller.settings.Settings`; a topology that sets another
``spec.recovery`` field (``mode``, say) must still get them. The API server fills a CRD's
defaults into every object it stores, so the CRD must not default these fields: the test
applies the CRD's defaults the way the API server does (structural defaulting: a missing
property of a present object gets its ``default``) before the operator parses the spec.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from backstop.controller.settings import RECOVERY_DEFAULTS, Settings, parse_spec
from backstop.domain import spec as spec_model
from backstop.k8s.crd import build_streamtopology_crd

ALIAS = {"grace_period_seconds": "gracePeriodSeconds", "utilization_cap": "utilizationCap"}
SPEC = {
    "image": "x",
    "recoveryLatencyBound": 4,
    "operators": [{"name": "a", "reprocessingLatency": 1}],
}


def api_server_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """``obj`` with the CRD schema's defaults filled in (apiextensions' structural defaulting)."""
    if not isinstance(obj, dict) or "properties" not in schema:
        return obj
    out = dict(obj)
    for key, sub in schema["properties"].items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = api_server_defaults(sub, out[key])
    return out


def stored(spec: dict[str, Any]) -> dict[str, Any]:
    crd = build_streamtopology_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    result: dict[str, Any] = api_server_defaults(schema, spec)
    return result


def test_the_crd_does_not_default_operator_wide_fields() -> None:
    crd = build_streamtopology_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    recovery = schema["properties"]["recovery"]["properties"]
    for name in RECOVERY_DEFAULTS:
        assert name in spec_model.RecoveryPolicy.model_fields
        assert "default" not in recovery[ALIAS[name]], f"the CRD defaults {ALIAS[name]}"
    assert "default" in recovery["mode"]  # the others keep theirs


@pytest.mark.parametrize(
    ("recovery", "grace", "cap"),
    [
        (None, 7.0, 0.6),  # no spec.recovery at all
        ({"mode": "blocking"}, 7.0, 0.6),  # the bug: another field set, the defaults lost
        ({"mode": "blocking", "gracePeriodSeconds": 3}, 3.0, 0.6),  # a set field wins
        ({"utilizationCap": 0.9}, 7.0, 0.9),
        ({"gracePeriodSeconds": 0, "utilizationCap": 1}, 0.0, 1.0),  # falsy values win too
    ],
)
def test_an_unset_field_takes_the_operator_default_and_a_set_one_wins(
    monkeypatch: pytest.MonkeyPatch, recovery: dict[str, Any] | None, grace: float, cap: float
) -> None:
    raw = {**SPEC, **({"recovery": recovery} if recovery is not None else {})}
    operator = Settings(grace_period_seconds=7, utilization_cap=0.6)
    monkeypatch.setattr("backstop.controller.settings.settings", lambda: operator)
    got = parse_spec(stored(raw)).recovery
    assert (got.grace_period_seconds, got.utilization_cap) == (grace, cap)
    if recovery and "mode" in recovery:
        assert got.mode == spec_model.RecoveryMode.blocking


def test_without_operator_defaults_the_model_keeps_its_own() -> None:
    got = Settings().resolve(spec_model.parse_spec(stored({**SPEC, "recovery": {}}))).recovery
    assert (got.grace_period_seconds, got.utilization_cap) == (30.0, 0.8)


def test_operator_defaults_from_the_environment_are_range_checked() -> None:
    with pytest.raises(ValueError, match="BACKSTOP_UTILIZATION_CAP"):
        Settings.from_env({"BACKSTOP_UTILIZATION_CAP": "1.5"})
    with pytest.raises(ValueError, match="BACKSTOP_GRACE_PERIOD_SECONDS"):
        Settings.from_env({"BACKSTOP_GRACE_PERIOD_SECONDS": "-1"})
