"""The images' lock files (``make lock``, hack/lock.py) match the requirements they pin.

Why: the images install exactly what the lock files pin (``pip install --no-deps -r``), so a
requirement changed in pyproject.toml or runtime/requirements.txt without ``make lock`` would
be built into an image with the old pins, or fail there only at ``pip check``. Each lock file
records the SHA-256 of its inputs; this test recomputes it, and checks on its own that every
requirement is pinned within its range, and that each Dockerfile installs its lock.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _load_lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("backstop_hack_lock", ROOT / "hack" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


lock = _load_lock_script()
LOCKS = {entry.path: entry for entry in lock.LOCKS}
DOCKERFILES = {  # lock file -> (Dockerfile, the lock's path in that image's build context)
    "operator/requirements.lock": ("operator/Dockerfile", "operator/requirements.lock"),
    "operator/spark-requirements.lock": (
        "operator/Dockerfile.spark",
        "operator/spark-requirements.lock",
    ),
    "runtime/requirements.lock": ("runtime/Dockerfile", "requirements.lock"),
}


def pins(path: str) -> dict[str, str]:
    """``name -> version`` of a lock file; every line that is not a comment is a pin."""
    out: dict[str, str] = {}
    for line in (ROOT / path).read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", text)
            assert match, f"{path}: {line!r} is not an exact pin"
            out[canonicalize_name(match.group(1))] = match.group(2)
    return out


def test_every_image_has_a_lock() -> None:
    assert set(LOCKS) == set(DOCKERFILES)
    for path in LOCKS:
        assert (ROOT / path).is_file(), f"{path} is missing: run make lock"


@pytest.mark.parametrize("path", sorted(DOCKERFILES))
def test_the_lock_was_generated_from_the_current_requirements(path: str) -> None:
    assert lock.recorded_digest(LOCKS[path]) == lock.digest(LOCKS[path]), (
        f"{LOCKS[path].source} changed since {path} was generated: run make lock"
    )


@pytest.mark.parametrize("path", sorted(DOCKERFILES))
def test_every_requirement_is_pinned_within_its_range(path: str) -> None:
    pinned = pins(path)
    for text in lock.requirements(LOCKS[path]):
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pinned, f"{path} pins no {req.name}: run make lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{path}: {req.name}=={pinned[name]} is outside {req.specifier}: run make lock"
        )


def test_the_digest_covers_each_requirement_but_not_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = LOCKS["runtime/requirements.lock"]
    reqs = ["boto3>=1.35.2,<2", "vaderSentiment>=3.3.2,<4"]
    monkeypatch.setattr(lock, "requirements", lambda _: reqs)
    before = lock.digest(entry)
    monkeypatch.setattr(lock, "requirements", lambda _: reqs[::-1])
    assert lock.digest(entry) == before
    monkeypatch.setattr(lock, "requirements", lambda _: ["boto3>=1.36,<2", reqs[1]])
    assert lock.digest(entry) != before


@pytest.mark.parametrize("path", sorted(DOCKERFILES))
def test_each_dockerfile_installs_exactly_its_lock(path: str) -> None:
    dockerfile, in_context = DOCKERFILES[path]
    text = (ROOT / dockerfile).read_text()
    assert re.search(rf"^COPY {re.escape(in_context)} ", text, re.M), f"{dockerfile}: COPY {path}"
    name = Path(path).name
    assert re.search(rf"pip install [^\n]*--no-deps -r \S*{re.escape(name)}", text), dockerfile
    assert "pip check" in text, f"{dockerfile}: pip check after installing the lock"
    assert "tomllib" not in text, f"{dockerfile} reads requirements past the lock"


def test_make_lock_regenerates_them() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    assert "hack/lock.py" in recipe
