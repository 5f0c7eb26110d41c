"""Kubernetes quantities (``250m``, ``1.5``, ``128Mi``) with the client's own parser.

Not ``from kubernetes.utils.quantity import parse_quantity``: importing any module of
the client first runs ``kubernetes/__init__.py``, which builds the whole API client
(about 0.4 s), while the domain only
needs this parser to validate a manifest, often without any cluster. The parser's
module imports nothing but :mod:`decimal`, so it is loaded from the installed client
by its file, under a private name, without the package around it. The operator, which
imports the client anyway, gets the same function (same code, same results).

>>> parse_quantity("250m"), parse_quantity("1Ki")
(Decimal('0.250'), Decimal('1024'))
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any


def _client_parser() -> Callable[[Any], Decimal]:
    found = importlib.util.find_spec("kubernetes")  # locates the package, runs nothing
    assert found is not None and found.submodule_search_locations, "kubernetes is a dependency"
    path = Path(next(iter(found.submodule_search_locations))) / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location(f"{__name__}._client", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parse: Callable[[Any], Decimal] = module.parse_quantity
    return parse


parse_quantity = _client_parser()
"""``kubernetes.utils.quantity.parse_quantity``: a quantity as a :class:`~decimal.Decimal`;
``ValueError`` when it is not one."""


def positive_quantity(value: Any) -> str | None:
    """``value`` as the text of a positive Kubernetes quantity (``None`` stays ``None``),
    for the validators of quantity fields; a ``ValueError`` that says what is wrong
    otherwise.

    >>> positive_quantity(2), positive_quantity("250m"), positive_quantity(None)
    ('2', '250m', None)
    >>> positive_quantity("0")
    Traceback (most recent call last):
    ValueError: '0' must be positive
    """
    if value is None:
        return None
    text = str(value)
    try:
        q = parse_quantity(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    if q <= 0:
        raise ValueError(f"{text!r} must be positive")
    return text
