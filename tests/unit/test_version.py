"""One version for the package, the chart and the images.

pyproject.toml's ``version`` is the source: ``backstop.__version__`` reads it from the installed
package's metadata, and the chart's ``version`` and ``appVersion``, the task runtime's
``__version__`` (its image has no package metadata) and every tag of this project's images
named anywhere in the repository (examples, docs, Dockerfiles, scripts, benches, tests) must
equal it. hack/images.sh tags the images with the chart's appVersion.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

import yaml
from typer.testing import CliRunner

import backstop
import backstop_runtime
from backstop.cli import app
from backstop_testkit.support.kubetools import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART = yaml.safe_load((ROOT / "charts" / "backstop" / "Chart.yaml").read_text())
IMAGE_TAG = re.compile(r"backstop/(?:operator|runtime|spark):(\d+\.\d+\.\d+\S*?)\b")
PREVIOUS_RELEASE = {"tests/chart/test_chart_upgrade.py"}
"""Files that name an earlier release on purpose (the upgrade test starts from chart 0.1.0)."""


def test_the_package_chart_and_runtime_have_one_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", PYPROJECT), PYPROJECT
    versions = {
        "chart version": CHART["version"],
        "chart appVersion": CHART["appVersion"],
        "backstop.__version__ (installed metadata: reinstall after a change)": (
            backstop.__version__
        ),
        "backstop_runtime.__version__": backstop_runtime.__version__,
    }
    differ = {name: v for name, v in versions.items() if v != PYPROJECT}
    assert differ == {}, f"pyproject.toml says {PYPROJECT}; these differ: {differ}"


def _repository_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split("\n")  # fmt: skip
    return [f for f in listed if f and (ROOT / f).is_file() and not f.endswith(".lock")]


def test_every_image_tag_named_in_the_repository_is_the_version() -> None:
    named: dict[str, set[str]] = {}
    for rel in _repository_files():
        if rel in PREVIOUS_RELEASE:
            continue
        try:
            text = (ROOT / rel).read_text()
        except UnicodeDecodeError:
            continue
        for tag in IMAGE_TAG.findall(text):
            named.setdefault(tag, set()).add(rel)
    assert PYPROJECT in named, "no image tag found: the pattern no longer matches"
    stale = {tag: sorted(files) for tag, files in named.items() if tag != PYPROJECT}
    assert stale == {}, f"image tags other than {PYPROJECT}: {stale}"
    for example in ("examples/wordcount.yaml", "examples/twitter-sentiment.yaml"):
        assert example in named[PYPROJECT], f"{example} names no image of this version"


def test_backstop_version_prints_the_version_and_exits() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"backstop {PYPROJECT}\n"
    # eager: it answers before a command's own arguments are checked
    result = CliRunner().invoke(app, ["--version", "place", "--no-such-option"])
    assert result.exit_code == 0 and result.output == f"backstop {PYPROJECT}\n"
