"""Print pip constraints that pin every dependency of pyproject.toml to its floor.

``make test-oldest`` installs the project with these (``pip install -c``), so the unit tests
run on the oldest versions the project claims to support. Usage:
``python3 hack/oldest-constraints.py [EXTRA ...] > constraints.txt``. A requirement without a
floor (``types-PyYAML``) is left to pip.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def floors(extras: list[str]) -> list[str]:
    """``name==floor`` for the project's dependencies and the given extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    pins = {}
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.-]+", req)
        floor = re.search(r">=\s*([^,;\s]+)", req)
        if name and floor:
            pins[name.group(0).lower()] = f"{name.group(0)}=={floor.group(1)}"
    return sorted(pins.values())


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1:])))
