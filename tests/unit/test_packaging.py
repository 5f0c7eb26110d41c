"""pyproject.toml declares what the code imports.

Why: a module that imports a distribution only an extra installs (pyarrow, from ``spark``)
breaks a documented command after a plain ``pip install backstop``. This test reads every
module's imports (``ast``, including imports inside functions) and maps them to their
distributions: whatever the package imports outside the Spark job must be a core
dependency, and the Spark job may use the ``spark`` extra besides. Floors are checked by
``make test-oldest`` (the unit tests on every floor, pinned).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    ROOT / "planners",
    ROOT / "operator" / "backstop",
    ROOT / "runtime" / "backstop_runtime",
    ROOT / "testkit" / "backstop_testkit",
]
FIRST_PARTY = {"planners", "backstop", "backstop_runtime", "backstop_testkit"}
SPARK_ONLY = ROOT / "operator" / "backstop" / "jobs"
"""The PySpark job: run only with the ``spark`` extra installed."""
RUNTIME = ROOT / "runtime"
"""The task runtime ships in its own image, with runtime/requirements.txt (the examples')."""
TESTKIT = ROOT / "testkit"
"""The test kit (pytest harnesses, hypothesis strategies): run with the ``dev`` extra installed."""


def _name(req: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", req)
    assert match, req
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return {_name(r) for r in project["dependencies"]}, extras


def imported(path: Path) -> set[str]:
    """Top-level modules ``path`` imports (absolute imports only)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # scans site-packages: once


def third_party(modules: set[str]) -> list[set[str]]:
    """For each module of ``modules`` (stdlib and first party left out), the distributions
    that provide it (``typer`` comes from ``typer`` or ``typer-slim``)."""
    dists = _distributions()
    out = []
    for mod in sorted(modules - set(sys.stdlib_module_names) - FIRST_PARTY - {"__future__"}):
        assert mod in dists, f"{mod} is imported but no installed distribution provides it"
        out.append({_name(d) for d in dists[mod]})
    return out


def test_every_imported_distribution_is_declared_where_it_is_needed() -> None:
    core, extras = declared()
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            used = third_party(imported(path))
            allowed = core | (extras["spark"] if SPARK_ONLY in path.parents else set())
            if TESTKIT in path.parents:
                allowed = core | extras["dev"]
            if RUNTIME in path.parents:
                lines = (RUNTIME / "requirements.txt").read_text().splitlines()
                allowed = {_name(x) for x in lines if x.strip() and not x.startswith("#")}
            missing = sorted(min(d) for d in used if not d & allowed)
            where = path.relative_to(ROOT)
            assert missing == [], f"{where} imports {missing}, not in its dependencies"


def test_every_requirement_has_a_floor_and_a_ceiling() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["spark"])
    for req in reqs:
        assert ">=" in req and "<" in req.replace("<=", ""), f"{req}: floor and ceiling"
    assert len({_name(r) for r in reqs}) == len(reqs), "a dependency listed twice"
