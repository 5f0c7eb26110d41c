"""Reading YAML documents with libyaml's C parser when PyYAML has it.

PyYAML's default (pure-Python) ``safe_load`` dominates reading a manifest of thousands
of operators. ``CSafeLoader`` builds the
same plain objects (the safe subset) an order of magnitude faster; a PyYAML built
without libyaml falls back to ``SafeLoader``. Every manifest the CLI, the operator and
the Spark job read goes through :func:`load_all`.
"""

from __future__ import annotations

from typing import Any

import yaml

SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when available, else PyYAML's pure-Python one."""


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream (``None`` for empty ones), with :data:`SafeLoader`.

    Raises ``yaml.YAMLError`` on invalid YAML, as ``yaml.safe_load_all`` does.

    Examples
    --------
    >>> load_all("a: 1\\n---\\n- x\\n")
    [{'a': 1}, ['x']]
    """
    return list(yaml.load_all(text, Loader=SafeLoader))
