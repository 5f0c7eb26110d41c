"""The docs build checks every quoted figure against the page it cites.

``hack/mkdocs_hooks.py`` (the site's hook, ``mkdocs.yml``) reads a figure written as
``[16.09 s](page.md "figure")`` and stops the build when the linked page does not show it;
the benchmarks index quotes its figures this way.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from backstop_testkit.support.kubetools import ROOT, hack_script


def _hooks() -> ModuleType:
    return hack_script("mkdocs_hooks")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "recovery.md").write_text(
        "| run | worst |\n|---|---|\n| 1 | **16.09 s** |\n\nload average 3.2\n"
    )
    return tmp_path


def test_a_figure_on_its_page_passes(docs: Path) -> None:
    index = docs / "bench" / "index.md"
    text = (
        'caught up within [16.09 s](recovery.md "figure") '
        'at [load average 3.2](recovery.md#x "figure")'
    )
    assert _hooks().figure_problems(text, index, docs) == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('within [9.37 s](recovery.md "figure")', "not on that page"),
        ('within [16.1 s](recovery.md "figure")', "not on that page"),  # rounded: not quoted
        ('within [16.09 s](gone.md "figure")', "no such page"),
        ('within [16.09 s](../../README.md "figure")', "no such page"),  # outside docs/
        ('within [a few seconds](recovery.md "figure")', "not a figure"),
    ],
)
def test_a_figure_not_on_its_page_is_refused(docs: Path, text: str, why: str) -> None:
    (problem,) = _hooks().figure_problems(text, docs / "bench" / "index.md", docs)
    assert why in problem and "bench/index.md" in problem


def test_the_hook_stops_the_build_and_leaves_unmarked_text_alone(docs: Path) -> None:
    hooks = _hooks()
    page: Any = type("Page", (), {"file": type("File", (), {"src_uri": "bench/index.md"})()})()
    config = {"docs_dir": str(docs), "repo_url": None}
    ok = 'a plain 9 s and [16.09 s](recovery.md "figure")'
    assert hooks.on_page_markdown(ok, page, config, None) == ok
    with pytest.raises(hooks.FigureNotOnPage, match=r"9\.37 s"):
        hooks.on_page_markdown('[9.37 s](recovery.md "figure")', page, config, None)


def test_the_site_uses_the_hook() -> None:
    assert "hack/mkdocs_hooks.py" in (ROOT / "mkdocs.yml").read_text()
