"""The generated docs, the README's promises and the links between the pages.

``hack/gen-docs.py`` writes the references from the pydantic models and the typer app, and
the layer table of docs/architecture.md from the operator's modules; these tests fail when
the committed files drift from what it would write now. The README stays a front door (at
most 250 lines, the two commands first), and no relative link of the README or of a page in
docs/ points at a file that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
import typer.main

from backstop.cli import app
from backstop.domain.spec import StreamTopologySpec
from backstop_testkit.support.kubetools import ROOT, hack_script

README = ROOT / "README.md"


def _gen_docs() -> ModuleType:
    return hack_script("gen-docs")


@pytest.mark.parametrize("key", ["streamtopology", "cli", "testkit-cli", "layers", "readme-demo"])
def test_generated_reference_is_up_to_date(key: str) -> None:
    gen = _gen_docs()
    path = gen.OUTPUTS[key]
    expected = gen.GENERATORS[key]()
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make docs`"
    assert path.read_text() == expected, f"{path.relative_to(ROOT)} is stale: run `make docs`"


def test_streamtopology_reference_covers_every_field() -> None:
    text = (ROOT / "docs" / "streamtopology.md").read_text()
    schema = StreamTopologySpec.model_json_schema()
    models = [schema, *(d for d in schema["$defs"].values() if "properties" in d)]
    missing = [
        f"{m.get('title')}.{field}"
        for m in models
        for field in m["properties"]
        if f"| `{field}` |" not in text
    ]
    assert missing == []
    for name, d in schema["$defs"].items():
        if "properties" in d:
            assert f"## {name}" in text
        else:  # enums are listed inline
            assert all(f"`{v}`" in text for v in d["enum"]), name


def test_cli_reference_covers_every_command_and_option() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    group = typer.main.get_command(app)

    def walk(cmd: object, path: list[str]) -> None:
        assert f"`{' '.join(path)}`" in text, path
        for param in getattr(cmd, "params", []):
            for opt in param.opts:
                if opt.startswith("-"):
                    assert opt in text, f"{' '.join(path)} {opt}"
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])

    walk(group, ["backstop"])


def test_layer_table_lists_every_module_of_the_operator() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- generated: layers -->", 1)[1].split("<!-- end generated -->", 1)[0]
    package = ROOT / "operator" / "backstop"
    missing = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if f"[`{module}`](../{path.relative_to(ROOT).as_posix()})" not in table:
            missing.append(module)
    assert missing == [], f"docs/architecture.md's layer table lacks {missing}: run `make docs`"
    rows = [line for line in table.splitlines() if line.startswith("| `backstop")]
    assert all(line.count(" | ") == 2 and not line.endswith("|  |") for line in rows)


def _relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that are paths in the repository: not URLs, not
    anchors of the same page, not inside code blocks or code spans."""
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_relative_links_of_the_readme_and_the_docs_point_at_files() -> None:
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in _relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert broken == []
    assert len(_relative_links(README)) > 10, "no links found in the README: is the scan broken?"


def test_relative_link_scan_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "[a](missing.md#x) [b](https://example.org) [c](#here)\n`[d](code.md)`\n"
        "```\n[e](fenced.md)\n```\n"
    )
    assert _relative_links(page) == ["missing.md#x"]


def test_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "the README is the front door: move details to docs/"
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections and sections[0].lower().startswith("quick start"), sections
    quick = text.split("\n## ", 2)[1]
    assert quick.index("make demo") < quick.index("make test")
    pages = ["architecture", "recovery", "runtime", "install", "operations", "development"]
    for link in [f"docs/{p}.md" for p in pages] + [
        "docs/streamtopology.md",
        "docs/cli.md",
        "docs/benchmarks/index.md",
    ]:
        assert f"]({link})" in text, link
    assert text.count("```mermaid") >= 2, "the recovery-latency picture and the architecture"
    assert "ℓ(v) = t_v + max over upstream u of a(u)" in text
    assert "H(F) = max over v in F of ℓ(v)" in text
