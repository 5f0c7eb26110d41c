"""The restart term: a lost task's new pod starts before it can reprocess anything.

``recovery.restartSeconds`` (c) is measured on real nodes (``bench/bench_runtime_recovery.py``,
the pod-start column); the operator keeps ``c + H(K_p) ≤ R`` for every node ``p`` by giving
the planners ``R − c``. Checked here with the failure-effect evaluator directly, not with the
planners' own numbers.
"""

from __future__ import annotations

from typing import Any

import pytest

from backstop.domain.planning import plan_topology
from backstop.domain.spec import StreamTopologySpec, expand, parse_spec
from planners import Infeasible, InvalidTopology
from planners.evaluate import node_failure_latency, tasks_by_node
from planners.placement import Node


def spec(restart: float, bound: float = 4.0) -> dict[str, Any]:
    cpu = {"cpu": "500m"}
    return {
        "image": "x",
        "recoveryLatencyBound": bound,
        "recovery": {"restartSeconds": restart},
        "operators": [
            {"name": "src", "reprocessingLatency": 1, "resources": cpu},
            {
                "name": "a",
                "reprocessingLatency": 1,
                "resources": cpu,
                "inputs": [{"operator": "src"}],
            },
            {
                "name": "b",
                "reprocessingLatency": 1,
                "resources": cpu,
                "inputs": [{"operator": "a"}],
            },
        ],
    }


@pytest.mark.parametrize("restart", [0.0, 1.5, 2.5])
def test_every_node_failure_recovers_within_the_bound_with_the_restart(restart: float) -> None:
    s = StreamTopologySpec.model_validate(spec(restart))
    graph = expand(s)
    plan = plan_topology(s, graph, [Node(f"n{i}", 2.0) for i in range(3)])
    backups = sorted(plan.backups)
    for node, tasks in tasks_by_node(plan.placement.assignment).items():
        assert restart + node_failure_latency(graph, backups, tasks) <= 4.0 + 1e-9, node


def test_the_restart_term_changes_the_plan() -> None:
    """All three tasks fit one node; losing it costs H = 3 s (the chain reprocesses), so
    with c = 0 one node keeps the 4 s bound, with c = 1.5 s it does not."""
    nodes = [Node(f"n{i}", 2.0) for i in range(3)]
    used = {}
    for c in (0.0, 1.5):
        s = StreamTopologySpec.model_validate(spec(c))
        used[c] = plan_topology(s, expand(s), nodes).placement.nodes_used
    assert used[0.0] == 1 and used[1.5] > 1


def test_a_restart_that_alone_breaks_the_bound_is_refused_with_both_fields() -> None:
    """The spec refuses it (CLI, operator and admission webhook alike); the planner still
    refuses a model whose bound was overridden after validation (``backstop backups --bound``)."""
    with pytest.raises(InvalidTopology, match=r"^spec: recovery.restartSeconds \(4\) must be"):
        parse_spec(spec(4.0))
    s = StreamTopologySpec.model_validate(spec(1.0)).model_copy(
        update={"recovery_latency_bound": 1.0}
    )
    with pytest.raises(Infeasible, match=r"restartSeconds \(1\) must be below recoveryLatency"):
        plan_topology(s, expand(s), [Node("n0", 2.0)])
