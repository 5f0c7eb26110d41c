"""``backstop place`` / ``backstop plan``: JSON shape, node manifests, clean error exits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from backstop.cli import EXIT_INFEASIBLE, app
from backstop.domain.spec import expand, load_topology
from backstop.k8s.nodes import nodes_from_manifests
from planners.evaluate import check_plan, worst_correlated_failure
from planners.placement import Node

runner = CliRunner()

TOPOLOGY = {
    "apiVersion": "streams.backstop.dev/v1alpha1",
    "kind": "StreamTopology",
    "metadata": {"name": "wordcount"},
    "spec": {
        "image": "example/task:1",
        "recoveryLatencyBound": 2,
        "operators": [
            {"name": "src", "parallelism": 3, "reprocessingLatency": 0.5,
             "resources": {"cpu": "250m"}},
            {"name": "split", "parallelism": 3, "reprocessingLatency": 0.5,
             "resources": {"cpu": "500m"},
             "inputs": [{"operator": "src", "grouping": "forward"}]},
            {"name": "count", "parallelism": 2, "reprocessingLatency": 1,
             "resources": {"cpu": "500m"},
             "inputs": [{"operator": "split", "grouping": "shuffle"}]},
            {"name": "sink", "reprocessingLatency": 0.5, "resources": {"cpu": "250m"},
             "inputs": [{"operator": "count", "grouping": "global"}]},
        ],
    },
}  # fmt: skip

ZONE = "topology.kubernetes.io/zone"


def _node(name: str, cpu: str, zone: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {ZONE: zone}},
        "status": {"allocatable": {"cpu": cpu}},
    }


@pytest.fixture
def topology(tmp_path: Path) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(TOPOLOGY))
    return path


@pytest.fixture
def nodes_file(tmp_path: Path) -> Path:
    path = tmp_path / "nodes.yaml"
    items = [_node("a1", "2", "a"), _node("a2", "1500m", "a"), _node("b1", "1", "b"),
             _node("c1", "4", "c")]  # fmt: skip
    request = {"resources": {"requests": {"cpu": "3"}}}
    busy = {"kind": "Pod", "metadata": {"name": "busy"},
            "spec": {"nodeName": "c1", "containers": [request]}}  # fmt: skip
    path.write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "List", "items": items}, busy])
    )
    return path


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("backups", ["all", "planned"])
@pytest.mark.parametrize(
    "algorithm", ["auto", "rtap-bf", "bfdh", "exact", "bfdh-2sp", "rtap-bf-literal"]
)
def test_place_json_shape_and_validity(topology: Path, backups: str, algorithm: str) -> None:
    code, out, _ = _invoke(
        "place", str(topology), "--node-cpu", "1", "--json",
        "--backups", backups, "--algorithm", algorithm, "--time-limit", "2",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    keys = {"algorithm", "bound", "assignment", "backups", "nodesUsed", "worstRecoveryLatency",
            "violations"}  # fmt: skip
    assert set(doc) == keys
    assert doc["algorithm"] == algorithm and doc["bound"] == 2.0
    graph = expand(load_topology(topology).spec)
    assert set(doc["assignment"]) == set(graph.tasks)
    assert doc["nodesUsed"] == len(set(doc["assignment"].values()))
    assert all(node.startswith("node-") for node in doc["assignment"].values())
    if backups == "all":
        assert doc["backups"] == list(graph.tasks)
    capacity = dict.fromkeys(doc["assignment"].values(), 1.0)
    assert not check_plan(
        graph, bound=2.0, backups=doc["backups"], assignment=doc["assignment"], capacity=capacity
    )
    assert doc["worstRecoveryLatency"] <= 2.0


def test_place_on_node_manifests_with_zones(topology: Path, nodes_file: Path) -> None:
    code, out, _ = _invoke(
        "place", str(topology), "--nodes", str(nodes_file), "--topology-key", ZONE, "--json"
    )
    assert code == 0
    doc = json.loads(out)
    docs = list(yaml.safe_load_all(nodes_file.read_text()))
    nodes = {n.name: n for n in nodes_from_manifests(docs, ZONE)}
    assert nodes["c1"].cpu == 1.0  # 4 allocatable - 3 requested
    graph = expand(load_topology(topology).spec)
    capacity = {name: n.cpu for name, n in nodes.items()}
    assert not check_plan(
        graph, bound=2.0, backups=doc["backups"], assignment=doc["assignment"], capacity=capacity
    )
    domains = {name: str(n.domain) for name, n in nodes.items()}
    h, _ = worst_correlated_failure(graph, doc["backups"], doc["assignment"], domains=domains)
    assert h <= 2.0


def test_plan_dry_run(topology: Path, nodes_file: Path) -> None:
    code, out, _ = _invoke("plan", str(topology), "--nodes", str(nodes_file))
    assert code == 0
    assert "Backups (" in out and "If a node fails" in out
    assert "holds" in out
    code, out, _ = _invoke("plan", str(topology), "--node-cpu", "2", "--backups", "all")
    assert code == 0 and "Backups (9/9)" in out


def test_task_wider_than_every_node(topology: Path) -> None:
    code, _, err = _invoke("place", str(topology), "--node-cpu", "0.4")
    assert code == EXIT_INFEASIBLE
    assert "task split-0 needs 0.5 CPU" in err


def test_bound_too_small_names_the_smallest_bound(topology: Path) -> None:
    code, _, err = _invoke("place", str(topology), "--node-cpu", "1", "--bound", "0.7")
    assert code == EXIT_INFEASIBLE
    assert "smallest feasible bound is 1s" in err


def test_bad_options(topology: Path, tmp_path: Path) -> None:
    code, _, err = _invoke("place", str(topology))
    assert code != 0 and "--node-cpu" in err
    code, _, err = _invoke("place", str(topology), "--node-cpu", "1", "--algorithm", "nope")
    assert code != 0 and "unknown placement algorithm" in err
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: List\nitems: []\n")
    code, _, err = _invoke("place", str(topology), "--nodes", str(empty))
    assert code != 0 and "no schedulable Node" in err


def test_nodes_from_manifests_skips_unusable_nodes() -> None:
    ready = {"type": "Ready", "status": "True"}
    docs = [
        {"kind": "Node", "metadata": {"name": "ok"},
         "status": {"allocatable": {"cpu": "1"}, "conditions": [ready]}},
        {"kind": "Node", "metadata": {"name": "down"},
         "status": {"allocatable": {"cpu": "1"},
                    "conditions": [{"type": "Ready", "status": "Unknown"}]}},
        {"kind": "Node", "metadata": {"name": "cordoned"}, "spec": {"unschedulable": True},
         "status": {"allocatable": {"cpu": "1"}}},
        {"kind": "Pod", "metadata": {"name": "done"}, "spec": {"nodeName": "ok", "containers": [
            {"resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}},
    ]  # fmt: skip
    assert nodes_from_manifests(docs) == [Node("ok", 1.0)]


def test_a_2sp_plan_that_breaks_the_bound_is_reported(tmp_path: Path, topology: Path) -> None:
    """The seed's level-height fit is blind to zones: shown as broken, exit 1, never hidden."""
    nodes = tmp_path / "nodes.yaml"
    items = [_node("a1", "2", "a"), _node("a2", "1500m", "a"), _node("b1", "1", "b"),
             _node("c1", "4", "c")]  # fmt: skip
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    args = ["place", str(topology), "--nodes", str(nodes), "--topology-key", ZONE,
            "--algorithm", "bfdh-2sp", "--bound", "1.5"]  # fmt: skip
    code, out, _ = _invoke(*args, "--backups", "all", "--json")
    assert code == 1
    doc = json.loads(out)
    graph = expand(load_topology(topology).spec)
    zones = {"a1": "a", "a2": "a", "b1": "b", "c1": "c"}
    h, label = worst_correlated_failure(graph, None, doc["assignment"], domains=zones)
    assert h > 1.5  # the evaluator's own verdict on the printed plan
    assert any(f"losing {label} takes {h:g}s" in v for v in doc["violations"])
    code, out, _ = _invoke(*args, "--backups", "all")
    assert code == 1 and "bound BROKEN: losing" in out
    code, _, err = _invoke(*args, "--backups", "planned")  # the joint plan refuses it
    assert code == EXIT_INFEASIBLE and "'bfdh-2sp' breaks the bound" in err


def test_place_uses_a_tainted_node_only_when_the_topology_tolerates_it(tmp_path: Path) -> None:
    """As the operator: NoSchedule-tainted nodes count only if tolerated."""
    taint = {"key": "dedicated", "value": "streams", "effect": "NoSchedule"}
    tainted = {**_node("gpu", "4", "z1"), "spec": {"taints": [taint]}}
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all([tainted, _node("small", "1", "z2")]))
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(TOPOLOGY))
    code, _, err = _invoke("place", str(path), "--nodes", str(nodes), "--json")
    assert code == EXIT_INFEASIBLE, err  # 3 CPU of tasks on the 1-CPU node alone
    doc = json.loads(json.dumps(TOPOLOGY))
    toleration = {"key": "dedicated", "operator": "Equal", "value": "streams"}
    doc["spec"]["podTemplate"] = {
        "spec": {"containers": [{"name": "task"}], "tolerations": [toleration]}
    }
    path.write_text(yaml.safe_dump(doc))
    code, out, err = _invoke("place", str(path), "--nodes", str(nodes), "--json")
    assert code == 0, err
    placed = json.loads(out)
    assert "gpu" in placed["assignment"].values()
    graph = expand(load_topology(path).spec)
    capacity = {"gpu": 4.0, "small": 1.0}
    assert not check_plan(
        graph,
        bound=2.0,
        backups=placed["backups"],
        assignment=placed["assignment"],
        capacity=capacity,
    )
