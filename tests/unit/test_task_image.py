"""A topology may leave ``spec.image`` out: the operator's default task image fills it.

The chart gives the operator ``<image.registry>/runtime:<appVersion>`` as
``BACKSTOP_TASK_IMAGE``; a topology without ``spec.image`` runs it (an operator's own
``image`` still wins), and without such a default the webhook and the reconcile refuse the
topology naming the field, instead of creating pods with no image.
"""

from __future__ import annotations

from typing import Any

import pytest

from backstop.controller import settings as config
from backstop.domain.admission import admission_problem
from backstop.domain.spec import parse_spec, task_image
from planners import InvalidTopology

DEFAULT = "registry.example.com/team/runtime:0.2.0"
BARE: dict[str, Any] = {
    "recoveryLatencyBound": 2,
    "operators": [
        {"name": "a", "reprocessingLatency": 1},
        {"name": "b", "reprocessingLatency": 1, "image": "own/b:1", "inputs": [{"operator": "a"}]},
    ],
}


def refusal(spec: Any, default_image: str | None = None) -> str | None:
    """The webhook's answer; the store aside (an emptyDir: BARE names none)."""
    return admission_problem(
        spec, name="t", annotations={}, allow_node_local_store=True, default_image=default_image
    )


def test_the_webhook_refuses_a_topology_without_an_image_unless_the_operator_has_one() -> None:
    problem = refusal(BARE)
    assert problem is not None
    assert problem.startswith("spec.image: required: operator 'a' names no image")
    assert "BACKSTOP_TASK_IMAGE" in problem
    assert refusal(BARE, DEFAULT) is None
    every_op_has_one = {**BARE, "operators": [{**op, "image": "x:1"} for op in BARE["operators"]]}
    assert refusal(every_op_has_one) is None


def test_the_operator_fills_the_image_from_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    chart = config.Settings.from_env(
        {"BACKSTOP_TASK_IMAGE": DEFAULT, "BACKSTOP_ALLOW_NODE_LOCAL_STORE": "true"}
    )
    monkeypatch.setattr(config, "settings", lambda: chart)
    model = config.parse_spec(BARE, name="t")
    assert model.image == DEFAULT
    by_name = {op.name: op for op in model.operators}
    assert task_image(by_name["a"], model) == DEFAULT
    assert task_image(by_name["b"], model) == "own/b:1"  # the operator's own wins
    own = config.parse_spec({**BARE, "image": "mine/runtime:9"}, name="t")
    assert own.image == "mine/runtime:9"  # the topology's own wins


def test_without_a_default_the_reconcile_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    local = config.Settings(allow_node_local_store=True)
    monkeypatch.setattr(config, "settings", lambda: local)
    with pytest.raises(InvalidTopology, match=r"spec\.image: required"):
        config.parse_spec(BARE, name="t")
    with pytest.raises(InvalidTopology, match="operator 'a' names no image"):
        model = parse_spec(BARE)
        task_image(model.operators[0], model)
