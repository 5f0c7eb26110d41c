"""Guards on the project's layout that keep the stdlib and the layering intact."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operator_folder_is_not_a_package() -> None:
    assert (ROOT / "operator" / "backstop" / "__init__.py").exists()
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_import_operator_is_the_stdlib() -> None:
    # In a fresh interpreter started from the repository root, as users and CI do.
    out = subprocess.run(
        [sys.executable, "-c", "import operator, backstop; print(operator.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert "site-packages" not in out or "operator" not in Path(out).parent.name
    assert Path(out).name == "operator.py"
    assert importlib.import_module("operator").itemgetter is not None


def test_cli_help_on_every_command() -> None:
    from typer.main import get_command

    from backstop.cli import app

    root = get_command(app)
    names = list(getattr(root, "commands", {}))
    assert "nodes" in names
    for name in names:
        res = subprocess.run(
            [sys.executable, "-m", "backstop", name, "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert "Usage" in res.stdout


PACKAGE = ROOT / "operator" / "backstop"
LAYERS = ("domain", "k8s", "controller", "jobs", "sim", "cli")


def test_operator_package_is_layered() -> None:
    """Each layer is a package, and no module sits beside them but the entry points."""
    for layer in LAYERS:
        assert (PACKAGE / layer / "__init__.py").exists(), layer
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"]


def test_every_layer_is_named_in_the_layers_contract() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    named = {m.strip() for row in layers["layers"] for m in row.split("|")}
    assert named == {f"backstop.{layer}" for layer in LAYERS}


def test_no_operator_module_is_over_550_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 550
    }
    assert long == {}


def test_controller_functions_stay_short() -> None:
    """The controller reads, decides (in the pure domain) and writes: a function of the
    Kopf layer over 60 lines is doing the domain's work or several jobs at once."""
    long = {}
    for p in (PACKAGE / "controller").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if (n := node.end_lineno - node.lineno + 1) > 60:
                    long[f"{p.relative_to(PACKAGE)}:{node.name}"] = n
    assert long == {}


def test_no_import_cycles_in_the_operator() -> None:
    import grimp
    import networkx as nx

    graph = grimp.build_graph("backstop")
    edges = [
        (m, i)
        for m in graph.modules
        for i in graph.find_modules_directly_imported_by(m)
        if i.startswith("backstop")
    ]
    assert list(nx.simple_cycles(nx.DiGraph(edges))) == []
