"""Issue 12, item 8: names that cannot collide, and names and algorithms checked at admission.

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
    for t, o in _splits(topology, operator):  # the issue's kind of neighbour
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
