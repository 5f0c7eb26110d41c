"""``backstop recover``: JSON shape, the table, and clean errors (no tracebacks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from backstop.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "twitter-sentiment.yaml"
# The CPU requests these tests' numbers are computed from (the example's own requests are
# small enough for 2-CPU real nodes and may change).
CPU = {
    "source": "250m",
    "hot-topics": "500m",
    "merge": "250m",
    "filter": "500m",
    "sentiment": "1",
    "sink": "250m",
    "trending": "250m",
}
NODES = """\
apiVersion: v1
kind: List
items:
- {kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "4"}}}
- {kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "4"}}}
- {kind: Node, metadata: {name: n3}, status: {allocatable: {cpu: "4"}}}
"""
ASSIGNMENT = {
    "source-0": "n2",
    "source-1": "n1",
    "hot-topics-0": "n1",
    "hot-topics-1": "n1",
    "hot-topics-2": "n1",
    "merge-0": "n1",
    "filter-0": "n1",
    "filter-1": "n1",
    "filter-2": "n2",
    "sentiment-0": "n2",
    "sentiment-1": "n2",
    "sentiment-2": "n2",
    "sink-0": "n2",
    "trending-0": "n1",
}


def topology(tmp_path: Path) -> Path:
    """The example with the CPU requests of :data:`CPU`."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    for op in doc["spec"]["operators"]:
        op["resources"]["cpu"] = CPU[op["name"]]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    topology(tmp_path)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    assignment = tmp_path / "place.json"
    assignment.write_text(json.dumps({"algorithm": "x", "assignment": ASSIGNMENT}))
    return assignment, nodes


def run(*args: str) -> tuple[int, str, str]:
    nodes = Path(args[args.index("--nodes") + 1]) if "--nodes" in args else None
    path = nodes.parent / "topology.yaml" if nodes else EXAMPLE
    result = CliRunner().invoke(app, ["recover", str(path), *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_output(files: tuple[Path, Path]) -> None:
    assignment, nodes = files
    code, out, _ = run(
        "--assignment", str(assignment), "--nodes", str(nodes), "--lost", "n1", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == [
        "algorithm",
        "recover",
        "pending",
        "recoveredQueries",
        "recoveredPriority",
        "failedPriority",
        "optimal",
    ]
    assert set(doc["recover"].values()) == {"n3"}
    # n1 held 3.25 CPU; n3 offers 4 x 0.8 = 3.2: both queries need 3.0 of it, and only the
    # priority-5 query (sink) fits completely, so trending (priority 2) waits
    assert doc["recoveredQueries"] == ["sink-0"] and doc["pending"] == ["trending-0"]
    assert doc["recoveredPriority"] == 5.0 and doc["failedPriority"] == 7.0


def test_an_exact_algorithm_out_of_budget_says_its_plan_is_unproven(
    files: tuple[Path, Path],
) -> None:
    """The seed's DP with a budget too small to finish its enumeration (both queries fail
    with n1 and n2): the plan is printed, valid, with ``optimal: false``, a note on stderr
    and exit status 4; with its default budget the same DP proves its plan (exit 0)."""
    assignment, nodes = files
    base = ["--assignment", str(assignment), "--nodes", str(nodes), "--lost", "n1,n2"]
    code, out, err = run(*base, "--algorithm", "dp", "--time-limit", "0.000001", "--json")
    assert code == 4, (out, err)
    assert json.loads(out)["optimal"] is False
    assert "dp ran out of its budget (--time-limit 1e-06) before proving" in err
    code, out, _ = run(*base, "--algorithm", "dp")
    assert code == 0 and "the plan is proven optimal" in out
    code, out, _ = run(*base, "--algorithm", "operator-centric")  # no promise to keep
    assert code == 0 and "the plan is not proven optimal" in out


def test_table_and_plain_assignment(files: tuple[Path, Path], tmp_path: Path) -> None:
    _, nodes = files
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(ASSIGNMENT))
    code, out, _ = run(
        "--assignment",
        str(plain),
        "--nodes",
        str(nodes),
        "--lost",
        "n1,n2",
        "--algorithm",
        "operator-centric",
    )
    assert code == 0
    assert "pending" in out and "operator-centric" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lost", "n9"], "n9"),
        (["--lost", "n1", "--algorithm", "greedy"], "unknown recovery algorithm"),
        (["--lost", "n1", "--utilization", "0"], "--utilization"),
    ],
)
def test_bad_input_is_a_clear_error(
    files: tuple[Path, Path], extra: list[str], message: str
) -> None:
    assignment, nodes = files
    code, out, err = run("--assignment", str(assignment), "--nodes", str(nodes), *extra)
    assert code != 0 and message in err and "Traceback" not in out + err


def test_unknown_task_and_missing_files(files: tuple[Path, Path], tmp_path: Path) -> None:
    _, nodes = files
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**ASSIGNMENT, "ghost-0": "n1"}))
    code, _, err = run("--assignment", str(bad), "--nodes", str(nodes), "--lost", "n1")
    assert code != 0 and "ghost-0" in err
    code, _, err = run(
        "--assignment", str(tmp_path / "no.json"), "--nodes", str(nodes), "--lost", "n1"
    )
    assert code != 0 and "cannot read" in err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(ASSIGNMENT))
    code, _, err = run(
        "--assignment", str(good), "--nodes", str(tmp_path / "no.yaml"), "--lost", "n1"
    )
    assert code != 0 and "cannot read" in err
