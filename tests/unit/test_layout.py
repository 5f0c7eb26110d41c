"""Guards on the project's layout that keep the stdlib and the layering intact."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

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


def _help_on_every_command(module: str) -> list[str]:
    """Run ``python -m MODULE NAME --help`` for every command of the app; their names."""
    from typer.main import get_command

    app = importlib.import_module(f"{module}.cli").app
    names = list(getattr(get_command(app), "commands", {}))
    for name in names:
        res = subprocess.run(
            [sys.executable, "-m", module, name, "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert "Usage" in res.stdout
    return names


def test_cli_help_on_every_command() -> None:
    names = _help_on_every_command("backstop")
    assert {"operator", "plan", "reoptimize"} <= set(names)
    # the development commands are the test kit's, not the product's
    assert not {"nodes", "metrics"} & set(names)


def test_testkit_cli_help_on_every_command() -> None:
    assert sorted(_help_on_every_command("backstop_testkit")) == ["metrics", "nodes"]


PACKAGE = ROOT / "operator" / "backstop"
LAYERS = ("domain", "k8s", "controller", "jobs", "cli")
TESTKIT = ROOT / "testkit" / "backstop_testkit"
TESTKIT_LAYERS = ("sim", "cases", "support", "cli")


@pytest.mark.parametrize(("package", "layers"), [(PACKAGE, LAYERS), (TESTKIT, TESTKIT_LAYERS)])
def test_package_is_layered(package: Path, layers: tuple[str, ...]) -> None:
    """Each layer is a package, and no module sits beside them but the entry points."""
    found = sorted(p.parent.name for p in package.glob("*/__init__.py"))
    assert found == sorted(layers)
    flat = sorted(p.name for p in package.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"]


@pytest.mark.parametrize(
    ("root", "layers"), [("backstop", LAYERS), ("backstop_testkit", TESTKIT_LAYERS)]
)
def test_every_layer_is_named_in_the_layers_contract(root: str, layers: tuple[str, ...]) -> None:
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (contract,) = [
        c for c in contracts if c["type"] == "layers" and c["layers"][0].startswith(f"{root}.")
    ]
    named = {m.strip() for row in contract["layers"] for m in row.split("|")}
    assert named == {f"{root}.{layer}" for layer in layers}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_product_tests_and_benches_are_kept_apart_by_contract() -> None:
    """lint-imports checks these on every ``make test``: the product never imports the test
    kit, and the tests and benchmarks share the test kit instead of importing each other."""
    config = _pyproject()["tool"]["importlinter"]
    assert {"backstop_testkit", "tests", "bench"} <= set(config["root_packages"])
    forbidden = {
        (src, bad)
        for c in config["contracts"]
        if c["type"] == "forbidden"
        for src in c["source_modules"]
        for bad in c["forbidden_modules"]
    }
    for product in ("planners", "backstop", "backstop_runtime"):
        assert (product, "backstop_testkit") in forbidden
    assert {("backstop_testkit", "tests"), ("backstop_testkit", "bench")} <= forbidden
    independent = [set(c["modules"]) for c in config["contracts"] if c["type"] == "independence"]
    assert {"tests", "bench"} in independent
    # both are packages, so lint-imports sees every import between them
    assert (ROOT / "tests" / "__init__.py").exists() and (ROOT / "bench" / "__init__.py").exists()


def _image_context(dockerfile: str) -> list[str]:
    """The paths ``hack/images.sh`` sends as the build context of ``operator/DOCKERFILE``."""
    images = (ROOT / "hack" / "images.sh").read_text()
    line = images.split(f"operator/{dockerfile} . ", 1)[1]
    return line.split(";", 1)[0].split("\n")[0].split()


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.spark"])
def test_the_operator_images_install_no_test_kit(dockerfile: str, tmp_path: Path) -> None:
    """``pip install .`` in the image installs what setuptools finds in the build context:
    found the way pyproject.toml tells it to (its ``where`` roots and ``include`` patterns)
    in a copy of exactly that context, the packages are the product's, never the test kit."""
    from setuptools import find_namespace_packages

    context = _image_context(dockerfile)
    assert "testkit" not in context
    for path in context:  # a symlinked copy of the context: setuptools follows the links
        (tmp_path / path).symlink_to(ROOT / path)
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    found = {
        package.split(".")[0]
        for where in find["where"]
        for package in find_namespace_packages(str(tmp_path / where), include=find["include"])
    }
    assert found == {"planners", "backstop", "backstop_runtime"}
    # and the Dockerfile copies nothing else in (BuildKit's context is the repository)
    text = (ROOT / "operator" / dockerfile).read_text()
    copied = {
        ln.split()[1] for ln in text.splitlines() if ln.startswith("COPY ") and "--from" not in ln
    }
    assert {c.split("/")[0] for c in copied} <= set(context), copied
    ignored = (ROOT / "operator" / "Dockerfile.dockerignore").read_text().split()
    assert "testkit" in ignored


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


@pytest.mark.parametrize("package", ["backstop", "backstop_testkit", "bench"])
def test_no_import_cycles(package: str) -> None:
    import grimp
    import networkx as nx

    graph = grimp.build_graph(package)
    edges = [
        (m, i)
        for m in graph.modules
        for i in graph.find_modules_directly_imported_by(m)
        if i == package or i.startswith(f"{package}.")
    ]
    assert list(nx.simple_cycles(nx.DiGraph(edges))) == []
