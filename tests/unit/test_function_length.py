"""No function longer than 60 lines (its docstring not counted) outside the tests.

A function that does not fit on a screen does several things; naming them as helpers
says what each step is for. Length is counted from the ``def`` line to the last line
of the body, without the docstring (which documents, and may be as long as it needs);
a nested function counts towards its parent and on its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["planners", "operator/backstop", "runtime/backstop_runtime", "bench", "testkit", "hack"]
LIMIT = 60

Function = ast.FunctionDef | ast.AsyncFunctionDef


def length(fn: Function) -> int:
    """Lines from ``def`` to the end of the body, less the docstring's lines."""
    assert fn.end_lineno is not None
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """``(qualified name, node)`` for every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def lengths(root: Path, folders: list[str]) -> dict[str, int]:
    """``{"path::qualified.name": length}`` for every function outside ``tests`` folders."""
    out: dict[str, int] = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if "tests" in rel.parts:
                continue
            for name, fn in functions(ast.parse(path.read_text(), str(path))):
                out[f"{rel.as_posix()}::{name}"] = length(fn)
    return out


def test_no_function_is_over_the_limit() -> None:
    found = lengths(ROOT, FOLDERS)
    assert "planners/restore.py::plan_restore" in found
    over = {name: n for name, n in found.items() if n > LIMIT}
    assert not over, f"functions over {LIMIT} lines (without docstring): {over}"


def test_length_counts_the_body_without_the_docstring(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    (src / "tests").mkdir(parents=True)
    (src / "m.py").write_text(
        "class C:\n"
        "    @staticmethod\n"
        "    def f(\n"
        "        x: int,\n"
        "    ) -> int:\n"
        '        """One line.\n\n        And more.\n        """\n'
        "        def g() -> int:\n"
        "            return x\n"
        "\n"
        "        return g()\n"
    )
    (src / "tests" / "test_m.py").write_text("def test_x():\n    pass\n")
    assert lengths(tmp_path, ["pkg"]) == {"pkg/m.py::C.f": 7, "pkg/m.py::C.f.g": 2}
