"""Each image ``hack/images.sh`` builds comes with a CycloneDX SBOM of what it installed.

Why: whoever runs the images needs the list of what is in them, and it has to be the list of
what the build really installed. hack/images.sh reads it from each image's own venv (copied out
of the image, ``cyclonedx-py environment``), not from the lock; the images install exactly
their lock (``pip install --require-hashes --no-deps``, then pip and setuptools leave the
venv), so the SBOM must list the lock's packages at the lock's versions, plus the project in the
operator image, and nothing else. Expected values come from the lock files and Chart.yaml.
The images are built here as the real-node tests build them (cached: seconds; cold: minutes).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from backstop_testkit.support.realnodes import CACHE, build_image, require_root

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {  # image -> (its lock, what it installs besides the lock)
    "runtime": ("runtime/requirements.lock", {}),
    "operator": (
        "operator/requirements.lock",
        {"backstop": tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]},
    ),
}


def lock_pins(path: str) -> dict[str, str]:
    text = (ROOT / path).read_text()
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)", text, re.M)
    return {canonicalize_name(name): version for name, version in found}


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_the_sbom_lists_the_image_packages_at_the_lock_versions(image: str) -> None:
    require_root()
    build_image(image)
    sbom = CACHE / "images" / "sbom"
    built = (CACHE / "images" / "load" / f"{image}.id").read_text()
    assert (sbom / f"{image}.id").read_text() == built, "the SBOM is of the image just built"
    bom = json.loads((sbom / f"{image}.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX"
    chart = (ROOT / "charts" / "backstop" / "Chart.yaml").read_text()
    app_version = re.search(r'^appVersion: *"?([^"\n]+)"?$', chart, re.M)
    assert app_version
    subject = bom["metadata"]["component"]
    assert (subject["type"], subject["version"]) == ("container", app_version.group(1))
    assert subject["name"].endswith(f"/{image}")

    lock, extra = IMAGES[image]
    listed = {canonicalize_name(c["name"]): c["version"] for c in bom["components"]}
    assert listed == {**lock_pins(lock), **extra}
    for c in bom["components"]:  # PyPI's name for what came from PyPI (the project did not)
        purl = f"pkg:pypi/{canonicalize_name(c['name'])}@{c['version']}"
        assert c.get("purl", "").lower() == (purl if c["name"] not in extra else ""), c
