"""No import cycles anywhere in the tree.

A cycle makes the import order matter (a module half initialised when its partner
reads a name from it) and ties two modules into one unit that cannot be understood,
tested or moved apart. The graph is built with :mod:`ast` from every ``.py`` file of
the first-party packages, the benchmarks, the tests and the test kit, so it also sees
imports made inside functions and under ``TYPE_CHECKING``: a cycle hidden that way is
still a cycle of the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
TREES = {
    "planners": "planners",
    "operator/backstop": "backstop",
    "runtime/backstop_runtime": "backstop_runtime",
    "bench": "bench",
    "tests": "tests",
    "testkit": "testkit",
}
"""Folder (relative to the repository) -> the package name its modules are imported by."""


def modules(root: Path, trees: Mapping[str, str]) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` under the folders that exist."""
    out: dict[str, Path] = {}
    for folder, package in trees.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _known(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a known module (``None``: third party)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) if parts else None


def imported_modules(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The known modules that module ``name`` imports, wherever the import statement is.

    ``from package import x`` is an import of the submodule ``package.x`` when there
    is one, else of ``package``; relative imports are resolved against ``name``.
    """
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.append(sub if sub in known else module)
    found = {_known(t, known) for t in targets}
    return {m for m in found if m is not None and m != name}


def import_graph(known: Mapping[str, Path]) -> nx.DiGraph:
    """The directed graph ``importer -> imported`` over ``known``."""
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in imported_modules(name, path, known))
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """One line per strongly connected component with more than one module, sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def _show(found: Iterable[list[str]], graph: nx.DiGraph) -> str:
    lines = []
    for component in found:
        sub = graph.subgraph(component)
        lines.append(" <-> ".join(component))
        lines.extend("    " + " -> ".join([*c, c[0]]) for c in nx.simple_cycles(sub))
    return "\n".join(lines)


def test_the_tree_has_no_import_cycle() -> None:
    known = modules(ROOT, TREES)
    assert "planners.placement.state" in known and "backstop_runtime.task" in known
    graph = import_graph(known)
    found = cycles(graph)
    assert not found, "import cycles:\n" + _show(found, graph)


def test_the_checker_finds_hidden_and_relative_cycles(tmp_path: Path) -> None:
    """A cycle closed by a relative import inside a function, and one through a package."""
    pkg = tmp_path / "src" / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("import json\nfrom pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n    return g\n")
    (pkg / "c.py").write_text("from . import d\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    (pkg / "e.py").write_text("from pkg import sub\n")
    known = modules(tmp_path, {"src/pkg": "pkg", "missing": "other"})
    assert set(known) == {"pkg", "pkg.a", "pkg.sub", "pkg.sub.b", "pkg.c", "pkg.d", "pkg.e"}
    graph = import_graph(known)
    assert set(graph.successors("pkg.e")) == {"pkg.sub"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"], ["pkg.c", "pkg.d"]]
