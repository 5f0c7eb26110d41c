"""``backstop replicate``: replicas for a topology's spare CPU, rated by the seed's crash model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backstop.cli import EXIT_INVALID, app
from backstop.domain.spec import expand, load_topology
from planners.replication import crash_availability

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "twitter-sentiment.yaml"


def test_replicate_reports_the_crash_model_and_a_valid_plan() -> None:
    res = runner.invoke(
        app,
        [
            "replicate",
            str(EXAMPLE),
            "--node-cpu",
            "4",
            "--spare-cpu",
            "1",
            "--host-failure-prob",
            "0.02",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["selection"] in ("knapsack", "sort-fill") and out["hostFailureProb"] == 0.02
    assert 0 < out["cpu"] <= 1.0 + 1e-9
    # recompute the reported figure from the printed plan, independently of the command
    graph = expand(load_topology(EXAMPLE).spec)
    placed = json.loads(
        runner.invoke(app, ["place", str(EXAMPLE), "--node-cpu", "4", "--json"]).stdout
    )["assignment"]
    replicas = {t: tuple(ns) for t, ns in out["replicas"].items()}
    assert out["crashAvailability"] == pytest.approx(
        crash_availability(graph, placed, replicas, 0.02)
    )
    assert out["crashAvailability"] > out["baselineCrashAvailability"]
    for t, ns in replicas.items():
        assert placed[t] not in ns


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host-failure-prob", "1.5"], "host-failure-prob"),
        (["--spare-cpu", "lots"], "--spare-cpu"),
        (["--selection", "greedy"], "sort-fill"),
    ],
)
def test_replicate_rejects_bad_options_by_name(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["replicate", str(EXAMPLE), "--node-cpu", "4", *args])
    assert res.exit_code == EXIT_INVALID
    assert message in res.output
    assert "Traceback" not in res.output
