"""The groupings' names: ``key``/``fields`` hash, ``rebalance`` spreads, ``shuffle`` hashes
with a Warning, answered by the admission webhook and on the wire to the tasks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import kopf
import pytest
import yaml
from kopf._cogs.structs import references
from kopf._core.engines.admission import serve_admission_request
from kopf._core.reactor.inventory import ResourceMemories

from backstop.controller import reconcile
from backstop.controller.admission import Webhook, register
from backstop.domain.admission import admission_warnings
from backstop.domain.constants import GROUP, PLURAL, VERSION
from backstop.domain.spec import Grouping, expand, parse_spec
from backstop.k8s.manifests import runtime_env
from planners import InvalidTopology

STORE = {"persistentVolumeClaim": {"claimName": "state"}}


def spec(*groupings: str | None) -> dict[str, Any]:
    """``a`` (2 tasks) read by one operator per grouping (``None``: the grouping unset)."""
    ops: list[dict[str, Any]] = [{"name": "a", "parallelism": 2, "reprocessingLatency": 1}]
    for i, g in enumerate(groupings):
        inp = {"operator": "a"} if g is None else {"operator": "a", "grouping": g}
        ops.append({"name": f"b{i}", "parallelism": 3, "reprocessingLatency": 1, "inputs": [inp]})
    return {"image": "x", "recoveryLatencyBound": 5, "store": STORE, "operators": ops}


def downstream(doc: dict[str, Any]) -> list[str]:
    model = parse_spec(doc)
    env = {e["name"]: e.get("value") for e in runtime_env(model, model.operators[0])}
    return [d["grouping"] for d in json.loads(str(env["BACKSTOP_DOWNSTREAM"]))]


def test_the_new_names_parse_and_an_unset_grouping_is_the_key_hash() -> None:
    doc = spec(None, "key", "fields", "rebalance", "shuffle", "broadcast")
    model = parse_spec(doc)
    assert [op.inputs[0].grouping for op in model.operators[1:]] == [
        Grouping.key, Grouping.key, Grouping.fields, Grouping.rebalance, Grouping.shuffle,
        Grouping.broadcast,
    ]  # fmt: skip
    # every upstream task may send to every task of each of these consumers
    assert len(expand(model).edges) == 6 * 2 * 3
    with pytest.raises(InvalidTopology, match="grouping"):
        parse_spec(spec("round-robin"))


def test_every_name_of_the_hash_reaches_the_tasks_as_the_name_every_runtime_hashes_by() -> None:
    """Old task images know ``shuffle`` as the hash: a rename from shuffle to key changes
    no pod (no restart), and ``rebalance`` reaches the tasks as itself."""
    assert downstream(spec("key", "fields", "shuffle", "rebalance", None)) == [
        "shuffle", "shuffle", "shuffle", "rebalance", "shuffle",
    ]  # fmt: skip


def test_only_shuffle_is_warned_about_naming_its_field() -> None:
    assert admission_warnings(spec(None, "key", "fields", "rebalance", "global")) == []
    (warning,) = admission_warnings(spec("key", "shuffle"))
    assert warning.startswith("spec.operators[2].inputs[0].grouping: shuffle hashes by the")
    assert "write key" in warning and "rebalance" in warning
    # an update that leaves the spec alone (the operator's own patches) is not warned about
    assert admission_warnings(spec("shuffle"), old_spec=spec("shuffle")) == []
    assert len(admission_warnings(spec("shuffle"), old_spec=spec("key"))) == 1


def review(doc: dict[str, Any]) -> dict[str, Any]:
    """The webhook's answer to a CREATE of a topology, through Kopf's admission engine."""
    registry = kopf.OperatorRegistry()
    register(registry, Webhook(port=1))
    insights = references.Insights()
    insights.webhook_resources.add(references.Resource(group=GROUP, version=VERSION, plural=PLURAL))
    request: Any = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u1", "operation": "CREATE", "userInfo": {"username": "me"},
            "resource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
            "object": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamTopology",
                       "metadata": {"name": "t", "namespace": "ns"}, "spec": doc},
        },
    }  # fmt: skip
    answer = serve_admission_request(
        request, settings=kopf.OperatorSettings(), memories=ResourceMemories(),
        memobase=cast(Any, kopf.Memo()), registry=registry, insights=insights, indices={},
    )  # fmt: skip
    return dict(asyncio.run(answer)["response"])


def test_the_webhook_admits_shuffle_with_a_warning_kubectl_prints() -> None:
    answer = review(spec("shuffle"))
    assert answer["allowed"] is True
    assert [w.split(":")[0] for w in answer["warnings"]] == ["spec.operators[1].inputs[0].grouping"]
    answer = review(spec("key"))
    assert answer["allowed"] is True and "warnings" not in answer


@pytest.mark.parametrize(
    ("groupings", "events"),
    [
        (("key", "rebalance"), []),
        (("shuffle",), ["spec.operators[1].inputs[0].grouping: shuffle hashes"]),
        (("key", "shuffle", "shuffle"), ["spec.operators[2].inputs[0].grouping: shuffle hashes"]),
    ],
)
def test_a_reconciled_topology_naming_shuffle_gets_one_warning_event(
    groupings: tuple[str, ...], events: list[str]
) -> None:
    """Topologies stored before any webhook warned (or while none answered) get the Warning
    as an Event, one per reconcile however many inputs name ``shuffle``."""
    posted: list[tuple[str, str, bool]] = []
    ctx: Any = SimpleNamespace(model=parse_spec(spec(*groupings)), emit=lambda *e: posted.append(e))
    reconcile._warn_spec(ctx, kopf.Meta(kopf.Body({"metadata": {"annotations": {}}})))
    assert [(r, m[: len(e)], w) for (r, m, w), e in zip(posted, events, strict=True)] == [
        ("DeprecatedGrouping", e, True) for e in events
    ]
    if groupings.count("shuffle") > 1:
        assert posted[0][1].endswith("(1 more inputs name shuffle)")


def test_the_examples_use_the_new_names_and_the_word_count_counts_by_key() -> None:
    """The word count's ``count`` keeps a count per word: its input must hash by key."""
    root = Path(__file__).resolve().parents[2] / "examples"
    docs = {p.name: yaml.safe_load(p.read_text()) for p in root.glob("*.yaml")}
    named = {
        (name, op["name"]): inp["grouping"]
        for name, doc in docs.items()
        for op in doc["spec"]["operators"]
        for inp in op.get("inputs", [])
    }
    assert "shuffle" not in named.values()
    assert named[("wordcount.yaml", "count")] == "key"
    assert all(admission_warnings(doc["spec"]) == [] for doc in docs.values())
