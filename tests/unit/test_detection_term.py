"""The detection term: a lost task waits for its loss to be detected, then restarts.

``recovery.detectionSeconds`` (d) joins the restart term (c): the operator keeps
``d + c + H(K_p) ≤ R`` for every node ``p``, so ``recoveryLatencyBound`` counts from the
failure. Checked with the failure-effect evaluator directly, not with the planners' numbers.

The topology is a chain of four 1-second tasks on nodes that hold one task each, so a node
failure loses one task ``v`` and ``H = ℓ(v)``: without backups the sink's ``ℓ`` is 4 s (the
chain recomputes), a backup upstream cuts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from backstop.cli import app
from backstop.domain.planning import plan_topology
from backstop.domain.spec import StreamTopologySpec, expand, parse_spec
from backstop.domain.status import build_plan_status, derive_conditions, worst_vs_bound
from planners import Infeasible, InvalidTopology
from planners.evaluate import node_failure_latency, tasks_by_node
from planners.placement import Node

runner = CliRunner()
NODES = [Node(f"n{i}", 0.6) for i in range(4)]  # one 500m task per node


def spec(detection: float | None, restart: float = 1.0, bound: float = 6.0) -> dict[str, Any]:
    cpu = {"cpu": "500m"}
    recovery: dict[str, Any] = {"restartSeconds": restart}
    if detection is not None:
        recovery["detectionSeconds"] = detection
    ops: list[dict[str, Any]] = [{"name": "src", "reprocessingLatency": 1, "resources": cpu}]
    for prev, name in (("src", "a"), ("a", "b"), ("b", "sink")):
        inputs = [{"operator": prev}]
        ops.append({"name": name, "reprocessingLatency": 1, "resources": cpu, "inputs": inputs})
    return {"image": "x", "recoveryLatencyBound": bound, "recovery": recovery, "operators": ops}


def worst_h(graph: Any, backups: Any, assignment: dict[str, str]) -> float:
    """``max_p H(K_p)`` by the evaluator."""
    return max(
        node_failure_latency(graph, sorted(backups), tasks)
        for tasks in tasks_by_node(assignment).values()
    )


def test_the_default_counts_no_detection() -> None:
    assert parse_spec(spec(None)).recovery.detection_seconds == 0.0


def test_a_plan_that_keeps_c_plus_h_but_not_d_plus_c_plus_h_is_not_chosen() -> None:
    """R = 6, c = 1: without detection H ≤ 5 holds with no backup (H = 4); with d = 1.5,
    4 + 1 + 1.5 > 6, so the planner must keep a backup and bring H to 3.5 or below."""
    without = StreamTopologySpec.model_validate(spec(0.0))
    graph = expand(without)
    old = plan_topology(without, graph, NODES)
    h_old = worst_h(graph, old.backups, old.placement.assignment)
    assert 1.0 + h_old <= 6.0 + 1e-9
    assert 1.5 + 1.0 + h_old > 6.0, "the case must break once detection is counted"

    with_d = StreamTopologySpec.model_validate(spec(1.5))
    new = plan_topology(with_d, graph, NODES)
    h_new = worst_h(graph, new.backups, new.placement.assignment)
    assert 1.5 + 1.0 + h_new <= 6.0 + 1e-9
    assert len(new.backups) > len(old.backups)
    assert new.placement.worst == pytest.approx(h_new)


def test_a_detection_that_leaves_no_plan_is_reported_unattainable() -> None:
    """d + c < R, but every task alone takes 1 s to reprocess: 4.5 + 1 + 1 > 6."""
    s = parse_spec(spec(4.5))
    with pytest.raises(Infeasible):
        plan_topology(s, expand(s), NODES)


def test_a_negative_detection_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidTopology, match=r"spec\.recovery\.detectionSeconds"):
        parse_spec(spec(-1.0))


def test_detection_and_restart_that_alone_break_the_bound_are_refused_naming_both() -> None:
    with pytest.raises(InvalidTopology) as err:
        parse_spec(spec(5.0))  # 5 + 1 >= 6
    text = str(err.value)
    assert "recovery.detectionSeconds (5)" in text and "recovery.restartSeconds (1)" in text
    s = StreamTopologySpec.model_validate(spec(1.0)).model_copy(
        update={"recovery_latency_bound": 2.0}
    )
    with pytest.raises(Infeasible, match=r"detectionSeconds \(1\) \+ recovery.restartSeconds"):
        plan_topology(s, expand(s), NODES)


def test_the_status_says_each_term() -> None:
    """``BoundSatisfied`` and the Events say d, c and H against the user's R."""
    s = parse_spec(spec(1.5))
    graph = expand(s)
    plan = plan_topology(s, graph, NODES)
    h = worst_h(graph, plan.backups, plan.placement.assignment)
    said = f"{1.5 + 1.0 + h:g}s (1.5s detection + 1s restart + {h:g}s after it; bound 6s)"
    assert worst_vs_bound(h, s) == said
    status = {"plan": build_plan_status(1, graph, plan)}
    assert status["plan"]["detectionSeconds"] == 1.5 and status["plan"]["restartSeconds"] == 1.0
    bound = {c["type"]: c for c in derive_conditions(1, status, [])}["BoundSatisfied"]
    assert bound["status"] == "True"
    assert bound["message"] == "worst single-node failure recovers in " + said


def _manifest(tmp_path: Path, detection: float) -> Path:
    path = tmp_path / "chain.yaml"
    doc = {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": "chain"},
        "spec": spec(detection),
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_backstop_plan_shows_each_term_and_keeps_them_within_the_bound(tmp_path: Path) -> None:
    path = _manifest(tmp_path, 1.5)
    args = ["plan", str(path), "--node-cpu", "0.6"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["detectionSeconds"], out["restartSeconds"]) == (1.5, 1.0)
    assert out["recoveryLatencyBound"] == 6.0 and out["bound"] == pytest.approx(3.5)
    graph = expand(parse_spec(spec(1.5)))
    h = worst_h(graph, out["backups"], out["assignment"])
    assert 1.5 + 1.0 + h <= 6.0 + 1e-9

    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "detection d 1.5s + restart c 1s" in text.stdout
    assert f"d 1.5 + c 1 + H {h:g} = {2.5 + h:g}s <= R 6s" in text.stdout


def test_backstop_plan_with_a_bound_that_leaves_no_room_names_detection(tmp_path: Path) -> None:
    path = _manifest(tmp_path, 1.5)
    result = runner.invoke(app, ["plan", str(path), "--node-cpu", "0.6", "--bound", "2.5"])
    assert result.exit_code == 3, result.output
    assert "detectionSeconds (1.5)" in result.output and "--bound" in result.output


def test_backstop_backups_keeps_detection_too(tmp_path: Path) -> None:
    """``backstop backups`` plans single-task failures within ``R − d − c`` as well."""
    path = _manifest(tmp_path, 1.5)
    out = json.loads(runner.invoke(app, ["backups", str(path), "--json"]).stdout)
    assert out["bound"] == pytest.approx(3.5) and out["worstRecoveryLatency"] <= 3.5 + 1e-9


def test_the_tradeoff_curve_at_factor_one_is_the_plan_of_the_spec() -> None:
    """The re-optimization's trade-off point scales ``H``'s budget ``R − d − c``; at factor
    1 it plans exactly what the operator plans, detection and restart counted once."""
    from backstop.domain.recommend import PlanParams, tradeoff_point

    doc = {"metadata": {"name": "chain"}, "spec": spec(1.5)}
    point = tradeoff_point(doc, NODES, 1.0, PlanParams(time_limit=2.0))
    s = parse_spec(spec(1.5))
    plan = plan_topology(s, expand(s), NODES, time_limit=2.0)
    assert point["feasible"] is True, point
    assert point["bound"] == pytest.approx(3.5)
    assert point["backupCount"] == len(plan.backups)
    assert point["worstRecoveryLatency"] == pytest.approx(plan.worst)
