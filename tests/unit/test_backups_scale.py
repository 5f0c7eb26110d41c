"""Minimum backups at the CRD's scale: the disjoint-path lower bound, the greedy plan that
meets it, and budgets that stop where they say (work, and wall seconds for a user).

The 10,000-task topology is the CLI's: 100 operators of 100 tasks, each reading the
previous one by forward except four that read it by shuffle.
"""

from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given
from typer.testing import CliRunner

from backstop.cli import app
from planners import TaskGraph
from planners.backups import auto as auto_module
from planners.backups import backups_exhaustive, plan_backups
from planners.backups.bounds import path_lower_bound, path_partition
from planners.backups.common import _forced
from planners.backups.local import _improve
from planners.budget import SAFETY_FACTOR, WorkBudget, deterministic_cp_sat, wall_limit
from planners.evaluate import check_plan
from tests.unit.test_backups import FAST, chain, dags

SHUFFLES = (20, 45, 61, 87)


def layers(n_ops: int = 100, width: int = 100, t: float = 0.5) -> TaskGraph:
    """``n_ops`` operators of ``width`` tasks, forward between them except at ``SHUFFLES``."""
    ids = [f"op{i}-{j}" for i in range(n_ops) for j in range(width)]
    edges = []
    for i in range(1, n_ops):
        if i in SHUFFLES:
            edges += [(f"op{i - 1}-{a}", f"op{i}-{b}") for a in range(width) for b in range(width)]
        else:
            edges += [(f"op{i - 1}-{j}", f"op{i}-{j}") for j in range(width)]
    return TaskGraph.build(ids, edges, latency=dict.fromkeys(ids, t))


# ----------------------------------------------------------------------------- lower bound


@FAST
@given(dags(max_tasks=9))
def test_path_bound_never_exceeds_the_optimum(case: tuple[TaskGraph, float]) -> None:
    g, bound = case
    lower = path_lower_bound(g, bound)
    assert sum(_forced(g, bound)) <= lower <= len(backups_exhaustive(g, bound).backups)


@FAST
@given(dags(max_tasks=9))
def test_path_partition_covers_every_task_once_along_edges(case: tuple[TaskGraph, float]) -> None:
    g, _ = case
    paths = path_partition(g)
    assert sorted(v for p in paths for v in p) == list(range(len(g)))
    for p in paths:
        assert all(u in g.preds[v] for u, v in pairwise(p))


def test_path_bound_is_the_line_optimum_on_a_line() -> None:
    """Nine tasks of 1 s under a 3 s bound: a backup at every third task but the sink."""
    assert path_lower_bound(chain([1.0] * 9), 3.0) == 2  # tasks 3 and 6 (1-based)
    assert path_lower_bound(chain([1.0] * 9), 9.0) == 0


# ----------------------------------------------------------------------------- 10,000 tasks


def test_auto_proves_ten_thousand_tasks_without_the_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the 100 columns is a path of 100 tasks of 0.5 s, so under a 10 s bound each
    needs a backup among every 20 consecutive tasks: at least 4 per column (the columns are
    disjoint), and backing up operators 19, 39, 59 and 79 entirely keeps the bound with
    400. ``auto`` must find and prove that without CP-SAT or the DAG heuristic."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the solver or the heuristic ran")

    monkeypatch.setattr(auto_module, "_exact", refuse)
    monkeypatch.setattr(auto_module, "_ftc_dag", refuse)
    g = layers()
    assert len(g) == 10_000
    plan = plan_backups(g, 10.0)
    assert plan.optimal is True
    assert len(plan.backups) == 400
    assert check_plan(g, bound=10.0, backups=plan.backups) == []


def test_cli_answers_ten_thousand_tasks_well_within_its_default_budget(tmp_path: Path) -> None:
    """The same topology through ``backstop backups`` with the default budget (10 s): an
    answer in far less (the margin is for a loaded machine), proven minimum."""
    ops = []
    for i in range(100):
        grouping = "shuffle" if i in SHUFFLES else "forward"
        ops.append(
            {
                "name": f"op{i}",
                "parallelism": 100,
                "reprocessingLatency": 0.5,
                "inputs": [{"operator": f"op{i - 1}", "grouping": grouping}] if i else [],
            }
        )
    doc = {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": "layers"},
        "spec": {"image": "img:1", "recoveryLatencyBound": 10.0, "operators": ops},
    }
    path = tmp_path / "layers.yaml"
    path.write_text(yaml.safe_dump(doc))
    start = time.monotonic()
    result = CliRunner().invoke(app, ["backups", str(path), "--json"])
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["tasks"], len(out["backups"]), out["optimal"]) == (10_000, 400, True)
    assert elapsed < 8.0


# ----------------------------------------------------------------------------- budgets


def test_wall_limit_caps_cp_sat_and_work_budgets() -> None:
    params = SimpleNamespace()
    deterministic_cp_sat(params, 10.0)
    assert params.max_time_in_seconds == SAFETY_FACTOR * 10.0 + 1.0
    with wall_limit(2.0):
        deterministic_cp_sat(params, 10.0)
        assert 0 < params.max_time_in_seconds <= 2.0
        assert not WorkBudget(10.0).exhausted
    with wall_limit(0.0):
        assert WorkBudget(10.0).exhausted
    deterministic_cp_sat(params, 10.0)
    assert params.max_time_in_seconds == SAFETY_FACTOR * 10.0 + 1.0
    assert not WorkBudget(10.0).exhausted


def test_dropping_redundant_backups_spends_the_budget() -> None:
    """Every task of a 1,000-task line backed up under a bound it keeps without any: the
    drops stop once a budget of a few steps is spent, where a large one drops them all."""
    g = chain([1.0] * 1000)
    every = [True] * 1000
    assert sum(_improve(g, 2000.0, every, budget=WorkBudget(10.0))) == 0
    assert sum(_improve(g, 2000.0, every, budget=WorkBudget(1e-4))) > 900
