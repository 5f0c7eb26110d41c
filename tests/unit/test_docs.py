"""The generated references (docs/streamtopology.md, docs/cli.md, docs/testkit-cli.md) and the
README's promises.

``hack/gen-docs.py`` writes the references from the pydantic models and the typer app;
these tests fail when the committed files drift from what it would write now.
"""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest
import typer.main

from backstop.cli import app
from backstop.domain.spec import StreamTopologySpec
from backstop_testkit.support.kubetools import ROOT

README = ROOT / "README.md"


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "hack" / "gen-docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", ["streamtopology", "cli", "testkit-cli"])
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


def test_readme_starts_with_the_two_commands_and_links_the_references() -> None:
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections and sections[0].lower().startswith("quick start"), sections
    quick = text.split("\n## ", 2)[1]
    assert quick.index("make demo") < quick.index("make test")
    for link in ("docs/streamtopology.md", "docs/cli.md", "docs/benchmarks.md"):
        assert f"]({link})" in text, link
    assert text.count("```mermaid") >= 2, "concepts picture and architecture diagram"
    # the recovery section shows a real transcript of `make demo`
    recovery = text.split("## Recovery, as", 1)[1].split("\n## ", 1)[0]
    assert "kubectl get st,recoveryplans" in recovery and "RecoveryPlanIssued" in recovery
