"""The CLI starts fast because it imports the heavy libraries only in the commands that
use them: ``backstop --help`` and ``backstop backups`` on the example must not
import the solver (ortools, which pulls in pandas), the Spark job, the Kubernetes client,
kopf or networkx. Checked on ``sys.modules`` in a fresh interpreter, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backstop_testkit.support.kubetools import ROOT

HEAVY = ("ortools", "pandas", "numpy", "pyspark", "kubernetes", "kopf", "networkx")

PROBE = """
import contextlib, io, json, sys
from backstop.cli import app
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    app(sys.argv[1:])
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _imported(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(json.loads(proc.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("backups", "--help"),
        ("place", "--help"),
        ("backups", str(ROOT / "examples" / "twitter-sentiment.yaml"), "--json"),
    ],
    ids=["help", "backups-help", "place-help", "backups-example"],
)
def test_cli_imports_no_heavy_library(args: tuple[str, ...]) -> None:
    assert _imported(*args) & set(HEAVY) == set()


def test_help_does_not_import_the_models() -> None:
    assert "pydantic" not in _imported("--help")


OPERATOR_PROBE = """
import json, sys
import backstop.controller.handlers, backstop.controller.admission, backstop.k8s.leader
import backstop.controller.metrics, backstop.controller.settings, backstop.cli.operator
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_operator_start_imports_no_solver_or_dataframes() -> None:
    """What ``backstop operator`` imports at start (the controller's handlers, which Kopf
    registers, and the admission, leader, metrics and settings modules) leaves out
    OR-Tools, pandas/numpy/pyarrow and Spark: they cost ~126 MiB of the idle operator's
    RSS, and only the CP-SAT planners and the re-optimization paths use them."""
    proc = subprocess.run(
        [sys.executable, "-c", OPERATOR_PROBE], capture_output=True, text=True, cwd=ROOT, check=True
    )
    imported = set(json.loads(proc.stdout.splitlines()[-1]))
    assert {"kopf", "kubernetes"} <= imported  # the probe did load the operator
    assert imported & {"ortools", "pandas", "numpy", "pyarrow", "pyspark"} == set()
