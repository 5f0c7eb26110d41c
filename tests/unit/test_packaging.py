"""pyproject.toml declares what the code imports, and the core only what the operator needs.

Why: the core dependencies are all a plain ``pip install backstop`` (and the operator image)
has. A module of the operator's run time that imports a distribution only an extra installs
breaks ``backstop operator`` or a CLI command there; a core dependency nothing imports at run
time is weight in every install. This test follows the import graph (``ast``; imports inside
functions included, ``if TYPE_CHECKING:`` blocks left out) from each part's modules through
the first-party modules they reach, and maps what they import to distributions: the
operator's run time (every ``backstop`` module but the Spark job, and the planners) to the
core, the Spark job to the core and the ``spark`` extra, the test kit to the core and the
``testkit`` and ``dev`` extras, the task runtime to runtime/requirements.txt. Floors are
checked by ``make test-oldest`` (the unit tests on every floor, pinned).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = {  # top-level package -> the folder it is in (pyproject's `where`)
    "planners": ROOT,
    "backstop": ROOT / "operator",
    "backstop_runtime": ROOT / "runtime",
    "backstop_testkit": ROOT / "testkit",
}
JOB_ONLY: dict[tuple[str, str], str] = {
    ("backstop.domain.estimates", "numpy"): "the single-process estimates (tests, benchmarks)",
    ("backstop.domain.estimates", "pandas"): "the single-process estimates (tests, benchmarks)",
    ("backstop.domain.recommend", "numpy"): "monte_carlo, which the Spark job's transforms call",
}
"""Imports inside functions of modules the operator imports, in functions only the Spark job,
the tests and the benchmarks call: the operator's run time never executes them."""


@dataclass(frozen=True)
class Import:
    """One import statement's module, and whether it runs only when a function is called."""

    module: str
    in_function: bool


class _Imports(ast.NodeVisitor):
    def __init__(self, package: str) -> None:
        self.package = package
        self.found: list[Import] = []
        self.depth = 0

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":  # for the type checker only: never runs
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [Import(alias.name, self.depth > 0) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:  # relative: from the package this module is in
            parts = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        self.found.append(Import(base, self.depth > 0))
        # `from package import module`: the names may be submodules
        self.found += [Import(f"{base}.{alias.name}", self.depth > 0) for alias in node.names]


@functools.cache
def modules() -> Mapping[str, Path]:
    """Every first-party module by its dotted name (a package by its ``__init__``)."""
    out = {}
    for top, base in PACKAGE_ROOTS.items():
        for path in (base / top).rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@functools.cache
def imports(module: str) -> tuple[Import, ...]:
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    visitor = _Imports(package)
    visitor.visit(ast.parse(path.read_text()))
    return tuple(visitor.found)


def _first_party(name: str) -> list[str]:
    """The first-party modules importing ``name`` runs: it and the packages around it."""
    parts = name.split(".")
    return [m for i in range(1, len(parts) + 1) if (m := ".".join(parts[:i])) in modules()]


def reached(roots: Iterable[str]) -> set[str]:
    """``roots`` and every first-party module they import, directly or not."""
    seen: set[str] = set()
    todo = [m for root in roots for m in _first_party(root)]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [m for imp in imports(module) for m in _first_party(imp.module)]
    return seen


def _name(req: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", req)
    assert match, req
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return {_name(r) for r in project["dependencies"]}, extras


def runtime_requirements() -> set[str]:
    lines = (ROOT / "runtime" / "requirements.txt").read_text().splitlines()
    return {_name(x) for x in lines if x.strip() and not x.startswith("#")}


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # scans site-packages: once


def third_party(module: str) -> list[tuple[str, set[str], bool]]:
    """What ``module`` imports outside the standard library and the project: each top-level
    name, the distributions that provide it (``typer`` or ``typer-slim``), and whether the
    import is inside a function."""
    out = []
    for imp in imports(module):
        top = imp.module.split(".")[0]
        if top in sys.stdlib_module_names or top in PACKAGE_ROOTS or top == "__future__":
            continue
        dists = _distributions()
        assert top in dists, f"{module} imports {top}, which no installed distribution provides"
        out.append((top, {_name(d) for d in dists[top]}, imp.in_function))
    return out


def undeclared(
    roots: Iterable[str], allowed: set[str], excused: Iterable[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """``(module, name)`` for each import, in the modules ``roots`` reach, of a distribution
    outside ``allowed``; an ``excused`` pair is let through when its import is in a function."""
    skip = set(excused)
    return sorted(
        (module, top)
        for module in reached(roots)
        for top, dists, in_function in third_party(module)
        if not dists & allowed and not (in_function and (module, top) in skip)
    )


def _in(package: str) -> list[str]:
    return [m for m in modules() if m == package or m.startswith(package + ".")]


def operator_runtime() -> list[str]:
    """``backstop operator`` and every CLI command: all of backstop but the Spark job, and the
    planners (the CLI lists their registries, the operator runs them)."""
    jobs = _in("backstop.jobs")
    return [m for m in _in("backstop") + _in("planners") if m not in jobs]


def test_the_operators_run_time_imports_only_core_dependencies() -> None:
    core, _ = declared()
    assert undeclared(operator_runtime(), core, JOB_ONLY) == []


def test_the_operators_run_time_never_reaches_the_spark_job_or_the_test_kit() -> None:
    found = reached(operator_runtime())
    assert not {m for m in found if m.startswith(("backstop.jobs", "backstop_testkit"))}


def test_every_core_dependency_is_imported_by_the_operators_run_time() -> None:
    """A core dependency only an extra's code imports belongs in that extra."""
    core, _ = declared()
    used = {d for m in reached(operator_runtime()) for _, dists, _ in third_party(m) for d in dists}
    assert core - used == set()


def test_the_job_only_imports_are_still_there_and_inside_functions() -> None:
    """Each excused import exists, runs only in a function, and is of a ``spark`` package."""
    _, extras = declared()
    for module, top in JOB_ONLY:
        found = [(t, d, f) for t, d, f in third_party(module) if t == top]
        assert found, f"{module} no longer imports {top}: drop it from JOB_ONLY"
        assert all(in_function for _, _, in_function in found), f"{module}: {top} at import"
        assert all(d & extras["spark"] for _, d, _ in found), f"{top} is not in the spark extra"


def test_the_spark_job_imports_the_core_and_the_spark_extra() -> None:
    core, extras = declared()
    assert undeclared(_in("backstop.jobs"), core | extras["spark"]) == []


def test_the_test_kit_imports_the_core_and_its_extras() -> None:
    """``pip install backstop[testkit,runtime]`` runs it: no development tool it needs."""
    core, extras = declared()
    allowed = core | extras["testkit"] | extras["runtime"]
    assert undeclared(_in("backstop_testkit"), allowed) == []


def test_the_task_runtime_imports_only_its_requirements() -> None:
    assert undeclared(_in("backstop_runtime"), runtime_requirements()) == []


def test_the_runtime_extra_runs_every_example() -> None:
    """``pip install backstop[runtime]`` runs each example of the task runtime locally
    (``backstop run``): what the examples import, in functions too, is in the extra, and the
    extra names everything the runtime image installs (runtime/requirements.txt)."""
    _, extras = declared()
    examples = _in("backstop_runtime.examples")
    assert len(examples) > 1, "no example found"
    assert undeclared(examples, extras["runtime"]) == []
    assert runtime_requirements() <= extras["runtime"]


def test_the_graph_follows_imports_in_functions_and_skips_type_checking(tmp_path: Path) -> None:
    """The walker on a module of known imports: what runs, and where."""
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import yaml\n"
        "if TYPE_CHECKING:\n    import pandas\n"
        "else:\n    import json\n"
        "def f():\n    import numpy as np\n    from backstop.domain import spec\n"
    )
    visitor = _Imports("pkg")
    visitor.visit(ast.parse((tmp_path / "m.py").read_text()))
    found = {(i.module, i.in_function) for i in visitor.found}
    assert ("yaml", False) in found and ("json", False) in found
    assert ("numpy", True) in found and ("backstop.domain.spec", True) in found
    assert not any(module == "pandas" for module, _ in found)
    assert "backstop.domain.spec" in reached(["backstop.domain.spec"])
    assert {"backstop", "backstop.domain"} <= reached(["backstop.domain.spec"])


@pytest.mark.parametrize("extra", [None, "runtime", "spark", "testkit"])
def test_every_requirement_has_a_floor_and_a_ceiling(extra: str | None) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["optional-dependencies"][extra] if extra else project["dependencies"]
    for req in reqs:
        assert ">=" in req and "<" in req.replace("<=", ""), f"{req}: floor and ceiling"
    assert len({_name(r) for r in reqs}) == len(reqs), "a dependency listed twice"


def test_the_build_floor_knows_the_spdx_license_string() -> None:
    """``license = "Apache-2.0"`` (an SPDX expression, PEP 639) needs setuptools 77."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if _name(r) == "setuptools"]
    floor = re.search(r">=\s*(\d+)", setuptools)
    assert floor and int(floor.group(1)) >= 77, setuptools
