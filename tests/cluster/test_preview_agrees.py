"""The dry run shows what the operator will do, on the real control plane.

``backstop plan --from-cluster`` runs before ``kubectl apply``; then the operator
plans the same topology on the same nodes and the real kube-scheduler binds the
pods. The preview and the bound pods must agree task by task, and the plan must
keep the bound by the failure-effect evaluator. Like ``make demo``: four 2-CPU
nodes in two zones, where the example has many equally good placements (the
case where a nondeterministic planner would differ run to run).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from backstop.domain.constants import GROUP
from backstop.domain.spec import expand, parse_spec
from backstop_testkit.support.kubetools import (
    EXAMPLE,
    POOL_LABEL,
    Env,
    env_fixture,
    topology_manifest,
    wait_for,
)
from planners.evaluate import check_plan

pytestmark = pytest.mark.cluster


env = env_fixture("preview", node_cpu="2", nodes=4)


def _preview(env: Env, doc: dict[str, Any], name: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from backstop.cli import app

    path = env.log.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(
        app,
        ["plan", str(path), "--from-cluster", "-n", env.namespace, "--json"],
        env={"KUBECONFIG": env.kubeconfig},
    )
    assert result.exit_code == 0, result.output
    preview: dict[str, Any] = json.loads(result.stdout)
    return preview


def _bound(env: Env, name: str, n_tasks: int) -> dict[str, str]:
    def all_bound() -> dict[str, str]:
        pods = [
            p
            for p in env.pods(name)
            if p.metadata.deletion_timestamp is None
            and p.metadata.labels.get(f"{GROUP}/role") == "primary"
            and p.spec.node_name
        ]
        out = {p.metadata.labels[f"{GROUP}/task"]: p.spec.node_name for p in pods}
        return out if len(out) == n_tasks else {}

    return wait_for(all_bound, 90, "every task pod bound by the scheduler")


def test_plan_from_cluster_equals_what_the_operator_binds_task_by_task(env: Env) -> None:
    name = "agree"
    doc = topology_manifest(EXAMPLE, name)
    doc["spec"]["nodeSelector"] = {POOL_LABEL: env.pool}
    spec = parse_spec(doc["spec"])
    graph = expand(spec)

    preview = _preview(env, doc, name)
    assert _preview(env, doc, name) == preview, "the dry run answers the same twice"
    capacity = {n: 2.0 for n in env.nodes}
    assert (
        check_plan(
            graph,
            bound=spec.recovery_latency_bound,
            backups=preview["backups"],
            assignment=preview["assignment"],
            capacity=capacity,
        )
        == []
    )

    env.create(doc)
    obj = env.wait_condition(name, "Ready", "True", timeout=120)
    bound = _bound(env, name, len(graph))
    differ = {t: (preview["assignment"][t], bound[t]) for t in graph.tasks
              if preview["assignment"][t] != bound[t]}  # fmt: skip
    assert differ == {}, f"preview and bound pods differ: {differ}"
    assert sorted(obj["status"]["plan"]["backups"]) == sorted(preview["backups"])

    # a preview now (the topology and its pods exist) shows the plan in force: nothing moves
    again = _preview(env, doc, name)
    assert again["assignment"] == bound
