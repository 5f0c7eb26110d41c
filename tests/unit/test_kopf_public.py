"""The operator uses only Kopf's and the standard library's public API, and no handler
asks Kopf for a finalizer.

Why: the operator once edited Kopf's registry (so that its daemons put no finalizer) and a
``ThreadPoolExecutor``'s internals (so that its sync daemons got threads); a Kopf or
Python upgrade could break either without a test noticing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import backstop
from backstop.controller import handlers

PACKAGE = Path(backstop.__file__).parent

PRIVATE_NAMES = {
    # Kopf's registries and handlers
    "_spawning",
    "_changing",
    "_watching",
    "_indexing",
    "_activities",
    "_webhooks",
    "_handlers",
    "_replace_with",
    # concurrent.futures.ThreadPoolExecutor
    "_idle_semaphore",
    "_adjust_thread_count",
    "_shutdown_lock",
    "_shutdown",
    "_max_workers",
    "_threads",
    "_work_queue",
}

PRIVATE_MODULES: dict[str, str] = {}
"""Modules allowed to import a private module of Kopf, and which: none."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_getattr(node: ast.AST) -> bool:
    """``getattr(x, "_name")`` and its kin: a private attribute by its name."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and _private(str(node.args[1].value))
    )


def _own_attributes(tree: ast.AST) -> set[int]:
    """The ``self.…`` attributes (by node id) in classes that subclass nothing of Kopf or
    ``concurrent.futures``: the class's own (e.g. a pod feed's ``self._threads``)."""
    own = set()
    for cls in ast.walk(tree):
        bases = " ".join(ast.unparse(b) for b in getattr(cls, "bases", []))
        if not isinstance(cls, ast.ClassDef) or any(
            word in bases for word in ("kopf", "concurrent", "Executor")
        ):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self":
                own.add(id(node))
    return own


def _uses(path: Path) -> list[str]:
    """The private attributes of Kopf or ``concurrent.futures`` the module touches."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    own = _own_attributes(tree)
    for node in ast.walk(tree):
        private_attribute = (
            isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES and id(node) not in own
        )
        if private_attribute or _private_getattr(node):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top, *rest = name.split(".")
                if top in {"kopf", "concurrent"} and any(_private(p) for p in rest):
                    found.append(f"import {name}")
    return found


def test_no_module_touches_a_private_attribute_of_kopf_or_concurrent_futures() -> None:
    touched = {
        str(p.relative_to(PACKAGE)): uses
        for p in sorted(PACKAGE.rglob("*.py"))
        if (uses := _uses(p))
    }
    known = {f"controller/{m}": [f"import {name}"] for m, name in PRIVATE_MODULES.items()}
    assert touched == known


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "registry._spawning._handlers = []\n"
        "getattr(pool, '_idle_semaphore')\n"
        "import kopf._core.engines.daemons\n"
        "from concurrent.futures._base import Future\n"
        "ok = getattr(x, '__name__'), self._lock, graph._index\n"
        "class Feed:\n    def stop(self): self._threads = []\n"
        "class Pool(ThreadPoolExecutor):\n    def grow(self): self._threads.add(1)\n"
    )
    assert sorted(_uses(bad)) == [
        "getattr(pool, '_idle_semaphore')",
        "import concurrent.futures._base",
        "import kopf._core.engines.daemons",
        "registry._spawning",
        "registry._spawning._handlers",
        "self._threads",
    ]


def _kopf_calls(path: Path) -> set[str]:
    """The ``kopf.…`` callables the module calls or decorates with (``kopf.on.event``)."""
    return {
        name
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and (name := ast.unparse(node.func)).startswith("kopf.")
    }


def test_no_handler_asks_kopf_for_a_finalizer() -> None:
    """Kopf puts its finalizer on an object when a daemon, a timer or a non-optional
    deletion handler is registered for it; the operator registers none of them (its
    per-topology loops are workers, started by a watching handler), so deleting a
    topology never waits for the operator."""
    assert "kopf.on.event" in _kopf_calls(Path(handlers.__file__))  # the workers' handler
    asking = {"kopf.daemon", "kopf.timer", "kopf.on.delete"}
    found = {str(p): calls for p in PACKAGE.rglob("*.py") if (calls := _kopf_calls(p) & asking)}
    assert found == {}
