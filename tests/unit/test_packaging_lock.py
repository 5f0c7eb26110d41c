"""The lock files (``make lock``, hack/lock.py) match the requirements, carry hashes, and agree.

Why: the development environment and every image install exactly what the lock files pin
(``pip install --require-hashes``), so a requirement changed in pyproject.toml or
runtime/requirements.txt without ``make lock`` would be built into an image with the old pins,
or fail there only at ``pip check``; and a package the tests run with at one version while an
image ships another (the kubernetes client 37.0.3 with python-dateutil 2.9 here, 37.0.2 with
python-dateutil 4.0 in the operator image) means the tests do not test what ships. Each lock
file records the SHA-256 of its inputs; this test recomputes it, and checks on its own that every
requirement is pinned within its range with hashes, that a package has one version across the
locks, that .venv has the dev lock's versions, and that each Dockerfile installs its lock.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import defaultdict
from importlib import metadata
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
DEV_LOCK = "requirements-dev.lock"
DOCKERFILES = {  # lock file -> (Dockerfile, the lock's path in that image's build context)
    "operator/requirements.lock": ("operator/Dockerfile", "operator/requirements.lock"),
    "operator/spark-requirements.lock": (
        "operator/Dockerfile.spark",
        "operator/spark-requirements.lock",
    ),
    "runtime/requirements.lock": ("runtime/Dockerfile", "requirements.lock"),
}
BUILD_LOCK = "operator/build-requirements.lock"  # the build stage of both operator Dockerfiles


def locked(path: str) -> dict[str, tuple[str, list[str]]]:
    """``name -> (version, hashes)`` of a lock file: a pin line, then its ``--hash`` lines."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in (ROOT / path).read_text().splitlines():
        text = line.split("#", 1)[0].strip().removesuffix("\\").strip()
        if not text:
            continue
        if text.startswith("--hash="):
            assert name, f"{path}: {line!r} follows no pin"
            out[name][1].append(text.removeprefix("--hash="))
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", text)
        assert match, f"{path}: {line!r} is not an exact pin"
        name = canonicalize_name(match.group(1))
        out[name] = (match.group(2), [])
    return out


def pins(path: str) -> dict[str, str]:
    return {name: version for name, (version, _) in locked(path).items()}


def test_every_image_and_the_dev_environment_have_a_lock() -> None:
    assert set(LOCKS) == {DEV_LOCK, BUILD_LOCK, *DOCKERFILES}
    for path in LOCKS:
        assert (ROOT / path).is_file(), f"{path} is missing: run make lock"


@pytest.mark.parametrize("path", sorted(LOCKS))
def test_the_lock_was_generated_from_the_current_requirements(path: str) -> None:
    assert lock.recorded_digest(LOCKS[path]) == lock.digest(LOCKS[path]), (
        f"{', '.join(LOCKS[path].sources)} changed since {path} was generated: run make lock"
    )


@pytest.mark.parametrize("path", sorted(LOCKS))
def test_every_requirement_is_pinned_within_its_range_with_hashes(path: str) -> None:
    entries = locked(path)
    for name, (version, hashes) in entries.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), (
            f"{path}: {name}=={version} has no sha256 hash: run make lock"
        )
    for text in lock.requirements(LOCKS[path]):
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        assert name in entries, f"{path} pins no {req.name}: run make lock"
        assert req.specifier.contains(entries[name][0], prereleases=True), (
            f"{path}: {req.name}=={entries[name][0]} is outside {req.specifier}: run make lock"
        )


def test_a_package_has_one_version_across_the_locks() -> None:
    versions: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in LOCKS:
        for name, version in pins(path).items():
            versions[name][version].append(path)
    split = {name: dict(by) for name, by in versions.items() if len(by) > 1}
    assert not split, f"one package, several versions (run make lock): {split}"


@pytest.mark.parametrize("path", sorted(set(LOCKS) - {DEV_LOCK}))
def test_what_an_image_installs_is_in_the_dev_lock(path: str) -> None:
    """The tests run with every package an image ships, at its version."""
    dev = pins(DEV_LOCK)
    missing = {n: v for n, v in pins(path).items() if dev.get(n) != v}
    assert not missing, f"{path} pins what {DEV_LOCK} does not: {missing}"


def test_the_venv_has_the_dev_lock_versions() -> None:
    """.venv (make install) holds what requirements-dev.lock pins (pip check: make install)."""
    wrong = {}
    for name, version in pins(DEV_LOCK).items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = "missing"
        if have != version:
            wrong[name] = f"{have}, locked {version}"
    assert not wrong, f"{sys.prefix} differs from {DEV_LOCK} (make install): {wrong}"


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


def test_an_image_lock_goes_stale_with_the_dev_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image's lock is resolved against the dev lock: a new dev requirement re-locks it."""
    entry = LOCKS["runtime/requirements.lock"]
    before = lock.digest(entry)
    real = lock.requirements
    monkeypatch.setattr(
        lock, "requirements", lambda e: [*real(e), "rich>=14"] if e == lock.DEV else real(e)
    )
    assert lock.digest(entry) != before


@pytest.mark.parametrize("path", sorted(DOCKERFILES))
def test_each_dockerfile_installs_exactly_its_lock_with_hashes(path: str) -> None:
    dockerfile, in_context = DOCKERFILES[path]
    text = (ROOT / dockerfile).read_text()
    assert re.search(rf"^COPY {re.escape(in_context)} ", text, re.M), f"{dockerfile}: COPY {path}"
    name = Path(path).name
    install = rf"pip install [^\n]*--require-hashes --no-deps -r \S*{re.escape(name)}"
    assert re.search(install, text), f"{dockerfile}: pip install --require-hashes of {name}"
    assert re.search(r"pip check", text), f"{dockerfile}: pip check after installing the lock"
    assert "tomllib" not in text, f"{dockerfile} reads requirements past the lock"
    # every other pip install: the project, without its dependencies
    for line in re.findall(r"pip install [^\n]*", text):
        assert "--require-hashes" in line or "--no-deps" in line, f"{dockerfile}: {line}"
    if dockerfile.startswith("operator/"):
        assert re.search(r"--require-hashes --no-deps -r build-requirements\.lock", text)
        assert "--no-build-isolation" in text, f"{dockerfile}: builds with the locked build system"


def test_make_install_and_make_lock_use_the_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    assert "hack/lock.py" in recipe
    stamp = makefile.split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"pip install -q --require-hashes -r \$\(DEV_LOCK\)", stamp)
    assert f"DEV_LOCK := {DEV_LOCK}" in makefile
    installs = re.findall(r"pip install [^\n]*", stamp)
    assert len(installs) == 2 and "--no-deps" in installs[1] and "-e ." in installs[1], installs
    assert "pip check" in stamp
    test = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "pip check" in test, "make test checks .venv's requirements"
