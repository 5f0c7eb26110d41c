"""A topology's ceilings in a cluster follow the object's real limits; offline there are none.

The limits are Kubernetes' (``docs/scale.md``): etcd takes at most 1.5 MiB per write
(``--max-request-bytes`` default 1572864), and the API server caps an object's annotations
at 256 KiB together (``TotalAnnotationSizeLimitB`` in apimachinery's object-meta
validation). The seeds' largest instances are 220 single-task operators (L-Tree) and 200
(S-Rnd, L-Rnd): "Task Allocation for Stream Processing with Recovery Latency Guarantee",
Table 4.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from typer.testing import CliRunner

from backstop.cli import EXIT_INVALID, app
from backstop.controller.kopf_config import apply_kopf_settings
from backstop.domain.admission import admission_problem, cluster_problem
from backstop.domain.constants import (
    ANN_LAST_APPLIED,
    MAX_OPERATORS,
    MAX_PARALLELISM,
    MAX_SPEC_BYTES,
)
from backstop.domain.limits import OFFLINE, stored_bytes
from backstop.domain.spec import (
    StreamTopologySpec,
    expand,
    parse_spec,
    parse_topology,
    spec_hash,
)
from backstop.k8s.crd import spec_schema
from backstop.k8s.sessionmap import build_session_configmap
from backstop_testkit.cases.object_sizes import (
    CONFIGMAP_DATA_MAX,
    ETCD_REQUEST_MAX,
    OWNER,
    mid_recovery_status,
    session,
    stored_size,
)
from planners import InvalidTopology

ANNOTATIONS_MAX = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB
runner = CliRunner()


def spec(operators: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"image": "example/task:1", "recoveryLatencyBound": 100, "operators": operators,
            **extra}  # fmt: skip


def op(name: str, *inputs: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "reprocessingLatency": 1, "inputs": [{"operator": i} for i in inputs],
            **extra}  # fmt: skip


def tree(n: int) -> list[dict[str, Any]]:
    """``n`` single-task operators as a binary in-tree: operator k reads 2k+1 and 2k+2."""
    return [op(f"v-{k}", *(f"v-{c}" for c in (2 * k + 1, 2 * k + 2) if c < n)) for k in range(n)]


def random_dag(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` single-task operators, each reading up to three earlier ones at random."""
    rnd = random.Random(seed)
    return [op(f"r-{k}", *sorted({f"r-{rnd.randrange(k)}" for _ in range(min(k, 3))}))
            for k in range(n)]  # fmt: skip


def chain(n: int) -> list[dict[str, Any]]:
    return [op(f"c{k}", *([f"c{k - 1}"] if k else [])) for k in range(n)]


def admit(doc: dict[str, Any]) -> str | None:
    return admission_problem(doc, name="t", annotations={}, allow_node_local_store=True)


# ------------------------------------------------------------- what a cluster admits


@pytest.mark.parametrize(
    ("operators", "tasks"),
    [(tree(220), 220), (random_dag(200, 1), 200), (random_dag(200, 2), 200), (chain(300), 300),
     (tree(MAX_OPERATORS), MAX_OPERATORS)],
    ids=["l-tree-220", "s-rnd-200", "l-rnd-200", "chain-300", "tree-at-the-cap"],
)  # fmt: skip
def test_the_seeds_largest_instances_and_a_few_hundred_operators_are_admitted(
    operators: list[dict[str, Any]], tasks: int
) -> None:
    assert admit(spec(operators)) is None
    assert len(expand(parse_spec(spec(operators)))) == tasks


def test_one_operator_over_the_cap_is_refused_naming_the_field_and_the_limit() -> None:
    line = admit(spec(tree(MAX_OPERATORS + 1)))
    assert line == (
        f"spec.operators: {MAX_OPERATORS + 1} operators, more than the limit of "
        f"{MAX_OPERATORS} per topology in a cluster (docs/scale.md)"
    )


def test_the_crd_states_the_models_caps() -> None:
    """The API server refuses what the model refuses, before any webhook."""
    operators = spec_schema()["properties"]["operators"]
    assert operators["maxItems"] == MAX_OPERATORS
    item = operators["items"]["properties"]
    assert item["parallelism"]["maximum"] == MAX_PARALLELISM
    assert item["inputs"]["maxItems"] == 100


def test_a_spec_over_the_byte_ceiling_is_refused_naming_its_largest_part() -> None:
    """300 operators (under the count cap), one of them with a large free-form config."""
    operators = chain(300)
    operators[123]["config"] = {"function": "m:C", "table": "x" * MAX_SPEC_BYTES}
    line = admit(spec(operators))
    assert line is not None and "\n" not in line
    assert line.startswith("spec: the spec takes "), line
    assert f"more than the limit of {MAX_SPEC_BYTES} (80 KiB) per topology" in line
    assert "the largest part is spec.operators[123] (" in line


def test_a_stored_object_over_the_byte_ceiling_is_still_run() -> None:
    """The reconcile and the supervisor parse what etcd holds: never refused for its bytes,
    so a recovery of a topology stored before the webhook answered goes on."""
    operators = chain(300)
    operators[7]["config"] = {"table": "x" * MAX_SPEC_BYTES}
    model = parse_spec(spec(operators))
    assert stored_bytes(model) > MAX_SPEC_BYTES
    assert len(expand(model)) == 300
    assert (cluster_problem(model) or "").startswith("spec: the spec takes ")


def test_the_byte_ceiling_is_what_the_api_server_would_store() -> None:
    """Every default written counts: a spec of short operators grows once stored."""
    doc = spec(chain(300))
    written = len(json.dumps(doc, separators=(",", ":")))
    stored = stored_bytes(parse_spec(doc))
    assert stored > written
    model = parse_spec(doc).model_dump(by_alias=True, exclude_none=True)
    assert stored == len(json.dumps(model, separators=(",", ":")))
    assert model["operators"][1]["inputs"] == [{"operator": "c0", "grouping": "key"}]


# ------------------------------------------------- the ceiling fits the object's limits


def at_the_ceiling() -> dict[str, Any]:
    """A spec of 10,000 tasks whose stored form is just under :data:`MAX_SPEC_BYTES`."""
    operators = [{**o, "parallelism": 25} for o in chain(MAX_OPERATORS)]
    for o in operators[1:]:
        o["inputs"][0]["grouping"] = "forward"
    size = stored_bytes(StreamTopologySpec.model_validate(spec(operators), context=OFFLINE))
    operators[0]["config"] = {"pad": "x" * (MAX_SPEC_BYTES - size - len(',"config":{"pad":""}'))}
    model = parse_spec(spec(operators))
    assert MAX_SPEC_BYTES - 16 < stored_bytes(model) <= MAX_SPEC_BYTES
    stored: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True)
    return stored


def fields_v1(obj: Any) -> Any:
    """The ``managedFields`` entry the API server records of what one manager set: every map
    key as ``f:<key>``, every element of a list keyed by name as ``k:{"name":...}``."""
    if isinstance(obj, dict):
        return {f"f:{k}": fields_v1(v) for k, v in obj.items()}
    if isinstance(obj, list) and obj and all(isinstance(x, dict) and "name" in x for x in obj):
        return {"k:" + json.dumps({"name": x["name"]}): {".": {}, **fields_v1(x)} for x in obj}
    return {}


def annotations_at_the_ceiling(stored: dict[str, Any]) -> dict[str, str]:
    """kubectl's last-applied manifest (written with every default) and Kopf's last-handled
    configuration, as the operator's own settings build it."""
    metadata: dict[str, Any] = {"name": "t", "namespace": "ns"}
    manifest = {"apiVersion": "streams.backstop.dev/v1alpha1", "kind": "StreamTopology",
                "metadata": metadata, "spec": stored}  # fmt: skip
    last_applied = json.dumps(manifest, separators=(",", ":")) + "\n"
    body: Any = {
        **manifest,
        "metadata": {**metadata, "annotations": {ANN_LAST_APPLIED: last_applied}},
    }
    settings = kopf.OperatorSettings()
    apply_kopf_settings(settings)
    storage = settings.persistence.diffbase_storage
    patch = kopf.Patch()
    storage.store(body=kopf.Body(body), patch=patch, essence=storage.build(body=kopf.Body(body)))
    return {ANN_LAST_APPLIED: last_applied, **patch["metadata"]["annotations"]}


def test_the_annotations_of_a_spec_at_the_ceiling_fit_with_room_for_the_users() -> None:
    """One copy of the spec among them (kubectl's): Kopf's diff base keeps a digest."""
    stored = at_the_ceiling()
    annotations = annotations_at_the_ceiling(stored)
    assert len(annotations) == 3  # last-applied, last-handled, Kopf's marker
    total = sum(len(k) + len(v) for k, v in annotations.items())
    assert total < len(json.dumps(stored, separators=(",", ":"))) + 1024
    assert ANNOTATIONS_MAX - total > 160 * 1024


def test_an_object_at_the_ceiling_leaves_room_for_a_kept_recommendation() -> None:
    """The spec, its managedFields and the annotations, beside the status of 10,000 tasks
    mid-recovery (which names the plan's spec by hash): under etcd's limit with 800 KiB to
    spare, what a kept recommendation of 10,000 tasks takes (``docs/scale.md``)."""
    stored = at_the_ceiling()
    status = mid_recovery_status().wire()
    status["plan"].pop("spec", None)  # the operator writes the spec's hash only
    status["plan"]["specHash"] = spec_hash(stored)
    annotations = annotations_at_the_ceiling(stored)
    compact = len(json.dumps(stored, separators=(",", ":")))
    total = (
        compact
        + len(json.dumps(fields_v1({"spec": stored}), separators=(",", ":")))
        + sum(len(k) + len(v) for k, v in annotations.items())
        + stored_size(status)
    )
    # 800 KiB for the recommendation, and the 160 KiB of the two copies no longer kept
    assert ETCD_REQUEST_MAX - total > 960 * 1024, total


def test_the_session_configmap_of_distinct_replay_sources_at_the_ceiling_fits() -> None:
    """The replay groups grow with the operators squared when every recovered operator
    replays from its own set of source logs: 175 sources, and a chain of 175 operators
    each reading the chain before it and one source more, all lost, no backups. Names of
    32 characters bring the spec to the byte ceiling."""
    k = 175
    src = [f"t{i}".ljust(32, "x") for i in range(k)]
    mid = [f"c{i}".ljust(32, "x") for i in range(k)]
    operators = [op(s) for s in src]
    operators += [op(mid[i], src[i], *mid[i - 1 : i]) for i in range(k)]
    doc = spec(operators)
    assert admit(doc) is None
    model = parse_spec(doc)
    assert MAX_SPEC_BYTES - 1024 < stored_bytes(model) <= MAX_SPEC_BYTES
    graph = expand(model)
    failed = list(graph.tasks)
    recovered = [t for t in failed if t.startswith("c")]
    cm = build_session_configmap(OWNER, graph, [], session(graph, failed, recovered, []), {})
    doc_ = json.loads(cm["data"]["session.json"])
    assert len(doc_["replayGroups"]) == k  # no two operators replay alike
    assert len(cm["data"]["session.json"]) < CONFIGMAP_DATA_MAX


# --------------------------------------------------------------- offline: any size


def test_offline_a_manifest_of_any_size_parses_and_a_cluster_names_the_field() -> None:
    doc = {"apiVersion": "streams.backstop.dev/v1alpha1", "kind": "StreamTopology",
           "metadata": {"name": "big"}, "spec": spec(chain(3000))}  # fmt: skip
    topo = parse_topology(doc)
    assert len(topo.spec.operators) == 3000
    assert (cluster_problem(topo.spec) or "").startswith("spec.operators: 3000 operators")
    with pytest.raises(InvalidTopology, match=r"^spec\.operators: 3000 operators, more than"):
        parse_topology(doc, cluster=True)
    with pytest.raises(InvalidTopology, match=r"^spec\.operators: 3000 operators"):
        parse_spec(doc["spec"])


def test_offline_one_operator_of_more_tasks_than_a_cluster_takes_parses() -> None:
    doc = spec([op("a", parallelism=MAX_PARALLELISM + 1)])
    assert StreamTopologySpec.model_validate(doc, context=OFFLINE).operators[0].parallelism == (
        MAX_PARALLELISM + 1
    )
    assert cluster_problem(StreamTopologySpec.model_validate(doc, context=OFFLINE)) == (
        f"spec.operators[0].parallelism: {MAX_PARALLELISM + 1} tasks, more than the limit of "
        f"{MAX_PARALLELISM} per operator in a cluster (docs/scale.md)"
    )


def test_a_spec_a_cluster_admits_has_no_cluster_problem() -> None:
    assert cluster_problem(parse_spec(spec(tree(220)))) is None


def write(tmp_path: Path, operators: list[dict[str, Any]], bound: float = 100) -> Path:
    doc = {"apiVersion": "streams.backstop.dev/v1alpha1", "kind": "StreamTopology",
           "metadata": {"name": "big"},
           "spec": {**spec(operators), "recoveryLatencyBound": bound}}  # fmt: skip
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "command", [["backups", "--json"], ["place", "--node-cpu", "4", "--json"]], ids=lambda c: c[0]
)
def test_the_cli_plans_1200_operators_offline_and_notes_the_clusters_limit(
    tmp_path: Path, command: list[str]
) -> None:
    path = write(tmp_path, chain(1200), bound=5)
    started = time.perf_counter()
    result = runner.invoke(app, [command[0], str(path), *command[1:]])
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 30
    out = json.loads(result.stdout)
    planned = out["tasks"] if command[0] == "backups" else len(out["assignment"])
    assert planned == 1200
    assert result.stderr == (
        "note: planned offline; a cluster refuses this topology: spec.operators: 1200 "
        "operators, more than the limit of 400 per topology in a cluster (docs/scale.md)\n"
    )


def test_the_cli_says_nothing_of_a_topology_a_cluster_admits(tmp_path: Path) -> None:
    result = runner.invoke(app, ["backups", str(write(tmp_path, tree(220))), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert json.loads(result.stdout)["tasks"] == 220


def test_the_cli_still_refuses_a_bad_manifest_of_any_size(tmp_path: Path) -> None:
    operators = chain(1200)
    operators[700]["inputs"] = [{"operator": "nowhere"}]
    result = runner.invoke(app, ["backups", str(write(tmp_path, operators)), "--json"])
    assert result.exit_code == EXIT_INVALID
    assert result.stdout == ""
    assert (
        "error: invalid topology: spec.operators[700].inputs[0].operator: operator 'c700' "
        "reads from unknown operator 'nowhere'"
    ) in result.stderr
