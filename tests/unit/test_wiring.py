"""An edit that changes a running topology's data-plane wiring is refused, naming the field.

A new task has no checkpoint and asks its producers for rounds they trimmed long ago, and
the topology stops there (``backstop.domain.wiring``); so more tasks, a new operator or a
changed input are refused by the webhook when the stored spec is the one running, and by
the reconcile against its plan's spec.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import pytest

from backstop.controller.admission import _running
from backstop.controller.specchecks import check_wiring
from backstop.domain.admission import admission_problem
from backstop.domain.spec import StreamTopologySpec, spec_hash
from backstop.domain.status import PlanStatus
from backstop.domain.wiring import wiring_change
from backstop.k8s.manifests import Owner
from backstop.k8s.specstore import build_spec_configmap
from planners import InvalidTopology

OP = {"reprocessingLatency": 1, "resources": {"cpu": "100m"}}
OPS = "spec.operators"


def doc() -> dict[str, Any]:
    return {
        "image": "img:1",
        "recoveryLatencyBound": 10,
        "operators": [
            {"name": "src", "parallelism": 2, **OP},
            {"name": "count", "parallelism": 2, "inputs": [{"operator": "src"}], **OP},
            {"name": "sink", "inputs": [{"operator": "count", "grouping": "global"}], **OP},
        ],
    }


def model(d: dict[str, Any]) -> StreamTopologySpec:
    return StreamTopologySpec.model_validate(d)


def edited(change: Any) -> dict[str, Any]:
    d = copy.deepcopy(doc())
    change(d)
    return d


REFUSED = [
    ("more tasks", lambda d: d["operators"][1].update(parallelism=3), f"{OPS}[1].parallelism"),
    ("fewer tasks", lambda d: d["operators"][0].update(parallelism=1), f"{OPS}[0].parallelism"),
    (
        "another grouping",
        lambda d: d["operators"][1]["inputs"][0].update(grouping="rebalance"),
        "spec.operators[1].inputs",
    ),
    (
        "another input",
        lambda d: d["operators"][2]["inputs"].append({"operator": "src", "grouping": "global"}),
        "spec.operators[2].inputs",
    ),
    (
        "a new operator",
        lambda d: d["operators"].append({"name": "audit", "inputs": [{"operator": "count"}], **OP}),
        "spec.operators[3]",
    ),
    ("a renamed sink", lambda d: d["operators"][2].update(name="out"), "spec.operators[2]"),
]  # fmt: skip

ALLOWED = [
    ("a new image", lambda d: d.update(image="img:2")),
    ("more CPU", lambda d: d["operators"][1]["resources"].update(cpu="300m")),
    ("a new bound", lambda d: d.update(recoveryLatencyBound=20)),
    ("an operator's config", lambda d: d["operators"][1].update(config={"window": 5})),
    ("key named shuffle", lambda d: d["operators"][1]["inputs"][0].update(grouping="shuffle")),
    ("a sink removed", lambda d: d["operators"].pop()),
]


@pytest.mark.parametrize(("what", "change", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_rewiring_edit_is_refused_naming_the_field(what: str, change: Any, field: str) -> None:
    problem = wiring_change(model(doc()), model(edited(change)))
    assert problem is not None, what
    assert problem.split(": ", 1)[0] == field, problem
    assert "create the topology again" in problem


@pytest.mark.parametrize(("what", "change"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_an_edit_a_rollout_carries_out_is_admitted(what: str, change: Any) -> None:
    assert wiring_change(model(doc()), model(edited(change))) is None, what


def test_the_webhook_refuses_it_only_against_the_spec_that_runs() -> None:
    new = edited(REFUSED[0][1])
    old: dict[str, Any] = {"old_spec": doc(), "old_annotations": {}, "allow_node_local_store": True}
    refused = admission_problem(new, name="t", annotations={}, old_running=True, **old)
    assert refused is not None and refused.startswith("spec.operators[1].parallelism: count")
    # not running yet (no plan), or the stored spec is an edit the operator refused: the
    # webhook admits, and the operator compares with its plan's spec
    assert admission_problem(new, name="t", annotations={}, **old) is None


def test_the_stored_spec_runs_when_the_plan_was_made_from_it_and_placed() -> None:
    plan = {"specHash": spec_hash(doc()), "assignment": {"src-0": "n1"}}
    assert _running({"status": {"plan": plan}}, doc())
    assert not _running({"status": {"plan": {**plan, "assignment": {}}}}, doc())
    assert not _running({"status": {"plan": {**plan, "specHash": "other"}}}, doc())
    assert not _running({}, doc())


def _kube(stored: dict[str, Any], h: str) -> Any:
    kube = mock.Mock()
    kube.configmap_data.return_value = build_spec_configmap(Owner("t", "ns", "u"), stored, h)[
        "data"
    ]
    return kube


def test_the_reconcile_refuses_it_against_the_plan_spec() -> None:
    h = spec_hash(doc())
    plan = PlanStatus(spec_hash=h, assignment={"src-0": "n1"})
    owner = Owner("t", "ns", "u")
    with pytest.raises(InvalidTopology, match=r"^spec\.operators\[1\]\.parallelism: count"):
        check_wiring(_kube(doc(), h), owner, model(edited(REFUSED[0][1])), plan)
    check_wiring(_kube(doc(), h), owner, model(edited(ALLOWED[0][1])), plan)  # admitted
    # nothing placed yet, or the plan's spec gone: planned as any edit
    check_wiring(_kube(doc(), h), owner, model(edited(REFUSED[0][1])), PlanStatus(spec_hash=h))
    check_wiring(_kube(doc(), "other"), owner, model(edited(REFUSED[0][1])), plan)
