"""Names that cannot collide, and names and algorithms checked at admission.

The CRD generated from the spec model carries what the API server can check (v1.20 checks
``metadata.name`` against the schema too); the model refuses the same things, with the
field's path in the message; what no schema can say (a spec that names a field the schema
does not know, pruned by the API server) is named in a Warning Event from the last-applied
annotation.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backstop.domain.constants import DNS_LABEL
from backstop.domain.spec import parse_spec
from backstop.k8s.crd import build_streamtopology_crd
from backstop.k8s.manifests import pod_name, replica_name
from planners import InvalidTopology

BASE: dict[str, Any] = {
    "image": "img",
    "recoveryLatencyBound": 2,
    "operators": [{"name": "src", "reprocessingLatency": 1}],
}


def schema() -> dict[str, Any]:
    crd = build_streamtopology_crd()
    out: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


# ---------------------------------------------------------------- names
def test_fault08_the_issues_two_topologies_get_different_pod_names() -> None:
    # topology `a` + operator `b-c` vs topology `a-b` + operator `c`: one name before the fix
    assert pod_name("a", "b-c-0") != pod_name("a-b", "c-0")
    assert replica_name("a", "b-c-0", 0) != replica_name("a-b", "c-0", 0)
    # an operator named like a replica suffix cannot alias a replica either
    assert pod_name("a", "b-0-replica-1") != replica_name("a", "b-0", 1)


labels = st.from_regex(re.compile(DNS_LABEL.replace("*", "{0,8}")), fullmatch=True)
# what the spec admits as an operator name: a DNS label without "--"
operators = labels.filter(lambda name: "--" not in name)
pods = st.tuples(
    labels,
    operators,
    st.integers(0, 999),
    st.none() | st.integers(0, 3),
)


def _name(p: tuple[str, str, int, int | None]) -> str:
    topology, operator, index, replica = p
    task = f"{operator}-{index}"
    return pod_name(topology, task) if replica is None else replica_name(topology, task, replica)


def _splits(topology: str, operator: str) -> list[tuple[str, str]]:
    """Every other (topology, operator) whose names read the same joined by one ``-``."""
    joined = f"{topology}-{operator}"
    out = []
    for i, ch in enumerate(joined):
        t, o = joined[:i], joined[i + 1 :]
        admitted = re.fullmatch(DNS_LABEL, t) and re.fullmatch(DNS_LABEL, o) and "--" not in o
        if ch == "-" and (t, o) != (topology, operator) and admitted:
            out.append((t, o))
    return out


@given(pods, pods)
def test_fault08_pod_names_are_one_to_one(a: Any, b: Any) -> None:
    """Any two (topology, operator, index, replica) the schema admits: same name, same pod."""
    if _name(a) == _name(b):
        assert a == b
    topology, operator, index, replica = a
    for t, o in _splits(topology, operator):  # the neighbours most likely to collide
        assert _name((t, o, index, replica)) != _name(a)


def test_fault08_operator_names_cannot_hold_the_separator() -> None:
    spec = {**BASE, "operators": [{"name": "b--c", "reprocessingLatency": 1}]}
    with pytest.raises(InvalidTopology, match=r"spec\.operators\[0\]\.name"):
        parse_spec(spec)
    op_name = schema()["properties"]["spec"]["properties"]["operators"]["items"]["properties"][
        "name"
    ]
    assert not re.match(op_name["pattern"], "b--c") and re.match(op_name["pattern"], "b-c")


def test_fault08_topology_name_is_limited_where_the_api_server_checks_it() -> None:
    meta = schema()["properties"]["metadata"]
    assert meta["properties"]["name"]["maxLength"] == 63  # a label value of every pod
    assert not re.match(meta["properties"]["name"]["pattern"], "Not_A_Label")
    # an object admitted before the CRD said so: the operator's parse names the field
    with pytest.raises(InvalidTopology, match=r"metadata\.name: at most 63 .* got 64"):
        parse_spec(BASE, name="t" * 64)
    parse_spec(BASE, name="t" * 63)


# ---------------------------------------------------------------- algorithms
@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ((), "placementAlgorithm", "rtap-bff"),
        (("recovery",), "algorithm", "best_density"),
        (("replication",), "strategy", "qodlu"),
    ],
)
def test_fault08_algorithm_typos_are_refused_naming_the_field(
    path: tuple[str, ...], field: str, value: str
) -> None:
    spec: dict[str, Any] = json.loads(json.dumps(BASE))
    node = spec
    for part in path:
        node = node.setdefault(part, {"spareCpu": "1"} if part == "replication" else {})
    node[field] = value
    dotted = ".".join(("spec", *path, field))
    with pytest.raises(InvalidTopology, match=re.escape(dotted) + ".*" + re.escape(repr(value))):
        parse_spec(spec)


def test_fault08_crd_enums_are_the_planners_registries() -> None:
    from planners.placement import PLACEMENT_ALGORITHMS
    from planners.recovery import RECOVERY_ALGORITHMS
    from planners.replication import STRATEGIES

    spec = schema()["properties"]["spec"]["properties"]
    assert set(spec["placementAlgorithm"]["enum"]) == set(PLACEMENT_ALGORITHMS)
    assert set(spec["recovery"]["properties"]["algorithm"]["enum"]) == set(RECOVERY_ALGORITHMS)
    assert set(spec["replication"]["properties"]["strategy"]["enum"]) == set(STRATEGIES)
    for name in (
        spec["placementAlgorithm"]["default"],
        spec["recovery"]["properties"]["algorithm"]["default"],
    ):
        assert name == "auto"


def test_fault08_crd_operators_are_a_map_keyed_by_name() -> None:
    ops = schema()["properties"]["spec"]["properties"]["operators"]
    assert ops["x-kubernetes-list-type"] == "map"
    assert ops["x-kubernetes-list-map-keys"] == ["name"]
    assert "name" in ops["items"]["required"]  # a map key must be required


# ---------------------------------------------------------------- unknown fields
def test_fault08_pruned_unknown_fields_are_named_from_the_last_applied_manifest() -> None:
    from backstop.domain.admission import unknown_fields
    from backstop.domain.constants import ANN_LAST_APPLIED

    applied = {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": "t"},
        "spec": {
            **BASE,
            "recovery": {"gracePeriod": 5},
            "operators": [{"name": "src", "reprocessingLatency": 1, "paralellism": 3}],
        },
    }
    found = unknown_fields({ANN_LAST_APPLIED: json.dumps(applied)})
    assert found == ["spec.operators[0].paralellism", "spec.recovery.gracePeriod"]
    # known fields only, no annotation, or an annotation that is not JSON: nothing to say
    assert unknown_fields({ANN_LAST_APPLIED: json.dumps({"spec": BASE})}) == []
    assert unknown_fields({}) == []
    assert unknown_fields({ANN_LAST_APPLIED: "{not json"}) == []


# ------------------------------------------------------------------------ the admission webhook
def _ops(*ops: dict[str, Any]) -> dict[str, Any]:
    return {**BASE, "operators": list(ops)}


def _op(name: str, *inputs: str) -> dict[str, Any]:
    return {"name": name, "reprocessingLatency": 1, "inputs": [{"operator": i} for i in inputs]}


FORWARD_FROM_A = {"operator": "a", "grouping": "forward"}
# (id, spec, the field the one line must start with, a word of the reason)
WEBHOOK_TABLE: list[tuple[str, dict[str, Any], str, str]] = [
    ("cycle", _ops(_op("a", "c"), _op("b", "a"), _op("c", "b")),
     "spec.operators[0].inputs: ", "cycle"),
    ("unknown-input", _ops(_op("a"), _op("b"), _op("c", "foo")),
     "spec.operators[2].inputs[0].operator: ", "unknown operator 'foo'"),
    ("duplicate-names", _ops(_op("a"), _op("a")),
     "spec.operators: ", "duplicate operator name 'a'"),
    ("negative-cpu", _ops({**_op("a"), "resources": {"cpu": "-250m"}}),
     "spec.operators[0].resources.cpu: ", "must be positive"),
    ("unknown-algorithm", {**BASE, "placementAlgorithm": "rtap-bff"},
     "spec.placementAlgorithm: ", "unknown placement algorithm 'rtap-bff'"),
    ("bound-not-above-restart", {**BASE, "recovery": {"restartSeconds": 2}},
     "spec: recovery.restartSeconds (2) must be below recoveryLatencyBound (2)", ""),
    ("bad-operator-name", _ops(_op("Src")), "spec.operators[0].name: ", "pattern"),
    ("too-many-operators", _ops(*[_op(f"o{i}") for i in range(401)]),
     "spec.operators: ", "401 operators, more than the limit of 400"),
    ("too-many-inputs", _ops(*[_op(f"o{i}") for i in range(101)],
                             _op("sink", *[f"o{i}" for i in range(101)])),
     "spec.operators[101].inputs: ", "101 inputs, more than the limit of 100"),
    ("too-many-tasks-of-one", _ops({**_op("a"), "parallelism": 1001}),
     "spec.operators[0].parallelism: ", "1001 tasks, more than the limit of 1000"),
    ("forward-parallelism",
     _ops({**_op("a"), "parallelism": 2}, {**_op("b"), "inputs": [FORWARD_FROM_A]}),
     "spec.operators[1].inputs[0].grouping: ", "2 != 1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "field", "word"),
    [(s, f, w) for _, s, f, w in WEBHOOK_TABLE],
    ids=[i for i, *_ in WEBHOOK_TABLE],
)
def test_admission_refuses_in_one_line_naming_the_field(
    spec: dict[str, Any], field: str, word: str
) -> None:
    from backstop.domain.admission import admission_problem

    line = admission_problem(spec, name="t", annotations={})
    assert line is not None and "\n" not in line
    assert line.startswith(field) and word in line, line


def test_admission_joins_several_problems_on_one_line() -> None:
    from backstop.domain.admission import admission_problem

    spec = _ops({**_op("a"), "reprocessingLatency": 0, "resources": {"cpu": "-1"}})
    line = admission_problem(spec, name="t", annotations={})
    assert line is not None and "\n" not in line
    assert line.split("; ")[0].startswith("spec.operators[0].")
    assert len(line.split("; ")) == 2, line


def test_admission_refuses_unknown_fields_of_the_last_applied_manifest() -> None:
    from backstop.domain.admission import admission_problem
    from backstop.domain.constants import ANN_LAST_APPLIED

    applied = {"spec": {**BASE, "placementAlgoritm": "auto"}}
    ann = {ANN_LAST_APPLIED: json.dumps(applied)}
    assert admission_problem(BASE, name="t", annotations=ann) == (
        "spec.placementAlgoritm: unknown field"
    )


def test_admission_admits_a_good_spec_and_metadata_only_updates_of_a_bad_one() -> None:
    """The operator's own patches (annotations, finalizer) of an object stored before the
    webhook existed must pass, or it could never be finalized and deleted."""
    from backstop.domain.admission import admission_problem

    assert admission_problem(BASE, name="t", annotations={}) is None
    bad = _ops(_op("a", "a"))
    assert admission_problem(bad, name="t", annotations={"x": "1"}, old_spec=bad,
                             old_annotations={}) is None  # fmt: skip
    # ... but a spec change is checked on update
    assert admission_problem(bad, name="t", annotations={}, old_spec=BASE, old_annotations={})
    # and so is the name
    assert (admission_problem(BASE, name="Bad", annotations={}) or "").startswith("metadata.name")


def test_webhook_scope_is_create_and_update_of_topologies_with_failure_ignored() -> None:
    """What makes recovery safe from the webhook: never status, never other kinds, and an
    unreachable webhook admits (the operator flags a bad spec when it is back)."""
    import kopf

    from backstop.controller.admission import Webhook, register

    registry = kopf.OperatorRegistry()
    register(registry, Webhook(port=1))
    (handler,) = registry._webhooks.get_all_handlers()
    assert sorted(handler.operations or ["*"]) == ["CREATE", "UPDATE"]
    assert handler.subresource is None and handler.ignore_failures is True
    assert handler.selector is not None and handler.selector.plural == "streamtopologies"


def test_webhook_certificate_names_what_the_api_server_calls() -> None:
    from backstop.controller.admission import Webhook

    assert Webhook(port=1, addr="127.0.0.1").hostnames() == ["127.0.0.1"]
    svc = Webhook(port=1, addr="0.0.0.0", service="ops/backstop-webhook").hostnames()
    assert svc[0] == "backstop-webhook.ops.svc"


def test_operator_refuses_a_webhook_service_that_is_not_namespace_slash_name() -> None:
    from typer.testing import CliRunner

    from backstop.cli import app

    result = CliRunner().invoke(
        app, ["operator", "-n", "x", "--webhook-port", "9443", "--webhook-service", "svc"]
    )
    assert result.exit_code == 2
    assert "--webhook-service must be NAMESPACE/NAME, got 'svc'" in result.output


def test_the_standby_webhook_logs_in_as_the_leader_does(monkeypatch: Any, tmp_path: Any) -> None:
    """ops-polish item 1: with --leader-elect, the standby's Kopf (admission only) ran on a
    bare ``OperatorRegistry``: no login handler, so "Initial authentication has failed" and
    no webhook served while standing by. Its registry must log in and validate."""
    import threading

    import kopf

    from backstop.controller import admission

    seen: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr(kopf, "operator", operator)
    hook = admission.Webhook(port=1, cert_dir=str(tmp_path), persistent=True)
    serve = admission.serve_while_standby(
        hook, namespaces=["ns"], clusterwide=False, scanning=False
    )
    serve(threading.Event())
    registry = seen["registry"]
    logins = [
        h.fn for h in registry._activities.get_all_handlers() if h.activity == "authentication"
    ]
    assert logins == [kopf.login_via_client]
    (handler,) = registry._webhooks.get_all_handlers()
    assert handler.fn is admission.validate and handler.persistent is True
    # the standby writes the webhook configuration as the leader does: through its server
    assert seen["settings"].admission.managed is None
    assert seen["settings"].admission.server.publish is not None
