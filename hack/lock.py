"""Write the lock files: every package the development environment and each image installs,
pinned with its hashes, by ``uv pip compile --generate-hashes``.

``make lock`` runs this after a change to the requirements (pyproject.toml,
runtime/requirements.txt). One set of versions: ``requirements-dev.lock`` is resolved first,
for everything at once (the core, every extra, runtime/requirements.txt and the build system's
requirements); each image's lock is then resolved from that image's own requirements with the
dev lock's pins as constraints, so a package that the tests run with and an image installs has
one version everywhere (docs/development.md, "Dependencies"). ``make install`` installs the dev
lock with ``pip install --require-hashes``, the Dockerfiles install theirs the same way, and
both run ``pip check``. The images run Debian bookworm's python3 (CPython 3.11) on x86_64, as
this machine and CI do, so every lock is resolved for that target whatever machine runs this.
Each lock file starts with the SHA-256 of its inputs (the requirement strings, the target, and
for an image's lock the dev lock's digest), which ``tests/unit/test_packaging_lock.py``
recomputes: a change to the requirements without ``make lock`` fails it.

Usage: ``python3 hack/lock.py [--upgrade] [--uv PATH]`` (default: ``uv`` beside this Python,
else on PATH).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_36"  # Debian bookworm: glibc 2.36
DIGEST_PREFIX = "# inputs-sha256: "
BUILD_SYSTEM = "build-system"  # a source: pyproject.toml's [build-system] requires


@dataclass(frozen=True)
class Lock:
    """One lock file, who installs it and what it is compiled from."""

    path: str  # from the repository root (an image's build context holds it: hack/images.sh)
    user: str
    # pyproject.toml (the core and ``extras``), a requirements file, BUILD_SYSTEM
    sources: tuple[str, ...]
    extras: tuple[str, ...] = ()


DEV = Lock(
    "requirements-dev.lock",
    "the development environment and CI (make install)",
    ("pyproject.toml", "runtime/requirements.txt", BUILD_SYSTEM),
    ("dev", "runtime", "spark", "testkit"),
)
LOCKS = (
    DEV,
    Lock(
        "operator/requirements.lock", "backstop/operator (operator/Dockerfile)", ("pyproject.toml",)
    ),
    Lock(
        "operator/spark-requirements.lock",
        "backstop/spark (operator/Dockerfile.spark)",
        ("pyproject.toml",),
        ("spark",),
    ),
    Lock(
        "operator/build-requirements.lock",
        "operator/Dockerfile*'s build stage (the build system of `pip install .`)",
        (BUILD_SYSTEM,),
    ),
    Lock(
        "runtime/requirements.lock",
        "backstop/runtime (runtime/Dockerfile)",
        ("runtime/requirements.txt",),
    ),
)


def _source_requirements(source: str, extras: tuple[str, ...]) -> list[str]:
    if source == BUILD_SYSTEM:
        return list(tomllib.loads((ROOT / "pyproject.toml").read_text())[BUILD_SYSTEM]["requires"])
    text = (ROOT / source).read_text()
    if source.endswith(".toml"):
        project = tomllib.loads(text)["project"]
        reqs = list(project["dependencies"])
        for extra in extras:
            reqs += project["optional-dependencies"][extra]
        return reqs
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def requirements(lock: Lock) -> list[str]:
    """The requirement strings ``lock`` is compiled from, as written in its sources."""
    return [r for source in lock.sources for r in _source_requirements(source, lock.extras)]


def digest(lock: Lock) -> str:
    """SHA-256 of ``lock``'s requirements (in any order), of the target it is resolved for, and,
    for an image's lock, of the dev lock's inputs (its constraints)."""
    target = f"cpython-{PYTHON_VERSION} {PLATFORM}"
    lines = [target, *sorted(" ".join(r.split()) for r in requirements(lock))]
    if lock != DEV:
        lines.append(f"constraints: {DEV.path} {digest(DEV)}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def recorded_digest(lock: Lock) -> str | None:
    """The digest written in ``lock``'s file, ``None`` when it has none (or no file)."""
    path = ROOT / lock.path
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line.removeprefix(DIGEST_PREFIX).strip()
    return None


def pins(text: str) -> dict[str, str]:
    """``name -> version`` of a lock file's text (names as written; continuation lines and
    comments skipped)."""
    out = {}
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)", line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


def header(lock: Lock) -> str:
    """The lines above uv's output: what the file is, how to regenerate it, its inputs' digest."""
    inputs = " ".join(
        ("pyproject.toml [build-system]" if s == BUILD_SYSTEM else s)
        + ("".join(f" [{e}]" for e in lock.extras) if s == "pyproject.toml" else "")
        for s in lock.sources
    )
    constraint = "" if lock == DEV else f" -c {DEV.path}"
    return (
        f"# {lock.user}: every package it installs, pinned with its hashes.\n"
        f"# Generated by `make lock` (hack/lock.py: uv pip compile --generate-hashes {inputs}"
        f"{constraint})\n# for CPython {PYTHON_VERSION} on {PLATFORM}; do not edit by hand.\n"
        f"{DIGEST_PREFIX}{digest(lock)}\n"
    )


def compile_lock(uv: str, lock: Lock, *, upgrade: bool, tmp: Path) -> None:
    """Resolve ``lock``'s requirements with uv and write its file (header first).

    uv keeps the pins of the file it replaces where they still satisfy the requirements, so a
    changed requirement moves only what it must; ``upgrade`` takes the newest releases instead
    (for the dev lock: the image locks follow it). An image's lock takes the dev lock's pins as
    constraints: it is a subset of the dev lock's resolution, so that always resolves.
    """
    cmd = [uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes",
           "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
           "--output-file", lock.path]  # fmt: skip
    stdin = None
    for source in lock.sources:
        if source == BUILD_SYSTEM:  # uv reads these from stdin ("-")
            stdin = "\n".join(_source_requirements(source, ())) + "\n"
            cmd.append("-")
        else:
            cmd.append(source)
    for extra in lock.extras:
        cmd += ["--extra", extra]
    if lock != DEV:
        constraints = tmp / "constraints.txt"  # the pins only: the hashes are the lock's own
        dev_pins = pins((ROOT / DEV.path).read_text())
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in dev_pins.items()))
        cmd += ["--constraint", str(constraints)]
    if upgrade and lock == DEV:
        cmd.append("--upgrade")
    subprocess.run(cmd, cwd=ROOT, check=True, input=stdin, text=True, stdout=subprocess.DEVNULL)
    path = ROOT / lock.path  # uv wrote no header (--no-header): ours goes on top
    constraint = str(tmp / "constraints.txt")  # every pin is "via" it: not worth a line
    body = [line for line in path.read_text().splitlines(keepends=True) if constraint not in line]
    path.write_text(header(lock) + "".join(body))


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("uv")
    if not found:
        sys.exit("error: uv not found: `make install` puts it in .venv (the dev extra)")
    return found


def main() -> None:
    """Regenerate every lock file, the dev lock first."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", help="the uv executable")
    parser.add_argument("--upgrade", action="store_true", help="the newest releases in range")
    args = parser.parse_args()
    uv = args.uv or _uv()
    with tempfile.TemporaryDirectory(prefix="backstop-lock-") as tmp:
        for lock in LOCKS:
            compile_lock(uv, lock, upgrade=args.upgrade, tmp=Path(tmp))
            print(f"{lock.path}: {lock.user}")


if __name__ == "__main__":
    main()
