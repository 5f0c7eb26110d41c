"""MkDocs hooks: quoted figures are checked against their pages; links from the docs to the
repository's source files point at the repository.

**Quoted figures.** A page that quotes a figure of another page (the benchmarks index quotes
the generated benchmark pages) writes it as a link titled ``figure``:
``[16.09 s](runtime-recovery.md "figure")``. Before the page is rendered, :func:`figure_problems`
reads the linked page's Markdown and fails the build (``mkdocs build --strict`` or not) when
the link's text is not on it, whitespace and ``**`` aside: a page regenerated with other
figures makes the quote fail instead of drifting. A figure quoted without the link is not
checked, so the benchmarks index quotes every figure this way.

**Source links.**

The pages link to source files with relative paths (``../planners/restore.py``), which work
where the Markdown is read in the repository but leave the site's ``docs/`` directory, so
MkDocs cannot resolve them. Before MkDocs validates a page's links, this hook rewrites each
such link whose target exists in the repository into ``<repo_url>/blob/main/<path>`` (``tree``
for a directory). A link to a file that does not exist is left alone, so the strict build
still fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")
FIGURE = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\s+\"figure\"\)")
"""A quoted figure: ``[text](page.md "figure")``, an anchor allowed."""


def _plain(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def figure_problems(markdown: str, page: Path, docs: Path) -> list[str]:
    """Each figure ``markdown`` (the page at ``page``, under ``docs``) quotes that is not on
    the page it links to, or that links to no page, as one line; empty: every one is there."""
    problems = []
    for match in FIGURE.finditer(markdown):
        figure, target = match.group(1), match.group(2)
        where = f"{page.relative_to(docs).as_posix()}: figure {figure!r} of {target}"
        source = (page.parent / target).resolve()
        if not source.is_relative_to(docs.resolve()) or not source.is_file():
            problems.append(f"{where}: no such page")
        elif not any(ch.isdigit() for ch in figure):
            problems.append(f"{where}: not a figure (no digit)")
        elif _plain(figure) not in _plain(source.read_text()):
            problems.append(f"{where}: not on that page (regenerated? quote what it says now)")
    return problems


class FigureNotOnPage(PluginError):
    """A quoted figure that its page does not show: the build stops."""


def repo_link(target: str, page_dir: Path, docs: Path, repo_url: str) -> str | None:
    """The repository URL of a relative link from ``page_dir``, or None when it stays as is."""
    path = (page_dir / target).resolve()
    if not path.exists() or path.is_relative_to(docs) or not path.is_relative_to(ROOT):
        return None
    kind = "tree" if path.is_dir() else "blob"
    return f"{repo_url.rstrip('/')}/{kind}/main/{path.relative_to(ROOT).as_posix()}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Check the page's quoted figures; rewrite its links to source files outside ``docs/``
    before MkDocs checks them."""
    docs = Path(config["docs_dir"]).resolve()
    problems = figure_problems(markdown, docs / page.file.src_uri, docs)
    if problems:
        raise FigureNotOnPage("quoted figures not on their pages:\n" + "\n".join(problems))
    repo_url = config.get("repo_url")
    if not repo_url:
        return markdown
    page_dir = (docs / page.file.src_uri).parent

    def rewrite(match: re.Match[str]) -> str:
        url = repo_link(match.group(1), page_dir, docs, repo_url)
        return match.group(0) if url is None else f"]({url}{match.group(2) or ''})"

    return LINK.sub(rewrite, markdown)
