"""MkDocs hook: links from the docs to the repository's source files point at the repository.

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

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


def repo_link(target: str, page_dir: Path, docs: Path, repo_url: str) -> str | None:
    """The repository URL of a relative link from ``page_dir``, or None when it stays as is."""
    path = (page_dir / target).resolve()
    if not path.exists() or path.is_relative_to(docs) or not path.is_relative_to(ROOT):
        return None
    kind = "tree" if path.is_dir() else "blob"
    return f"{repo_url.rstrip('/')}/{kind}/main/{path.relative_to(ROOT).as_posix()}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite the page's links to source files outside ``docs/`` before MkDocs checks them."""
    repo_url = config.get("repo_url")
    if not repo_url:
        return markdown
    docs = Path(config["docs_dir"]).resolve()
    page_dir = (docs / page.file.src_uri).parent

    def rewrite(match: re.Match[str]) -> str:
        url = repo_link(match.group(1), page_dir, docs, repo_url)
        return match.group(0) if url is None else f"]({url}{match.group(2) or ''})"

    return LINK.sub(rewrite, markdown)
