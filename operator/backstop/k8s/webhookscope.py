"""Which namespaces the admission webhook is called for: the watched ones only.

A StreamTopology in a namespace this operator does not watch is another release's (or
nobody's) to judge; the API server should not call this operator's webhook for it, nor wait
on it. The ``namespaceSelector`` of each webhook names the watched namespaces by the label
every namespace carries with its own name, ``kubernetes.io/metadata.name``, which API servers
set from Kubernetes 1.21 on. On an older server no namespace has that label, so such a
selector would match nothing and turn the webhook off: there the webhook keeps no selector.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label an API server (1.21+) sets on every namespace: the namespace's name."""
LABELLED_SINCE = (1, 21)
"""The first Kubernetes version whose namespaces carry :data:`NAMESPACE_NAME_LABEL`."""


def namespace_selector(
    namespaces: Collection[str], server: tuple[int, int] | None
) -> dict[str, Any] | None:
    """The ``namespaceSelector`` limiting the webhook to ``namespaces``, or ``None`` for no
    limit: every namespace is watched (none named), or the server (``(major, minor)``;
    ``None``: unknown) may not label its namespaces.

    >>> namespace_selector(["team", "ops", "team"], (1, 29))
    {'matchExpressions': [{'key': 'kubernetes.io/metadata.name', 'operator': 'In', \
'values': ['ops', 'team']}]}
    >>> namespace_selector(["team"], (1, 20)), namespace_selector([], (1, 29))
    (None, None)
    """
    if not namespaces or server is None or server < LABELLED_SINCE:
        return None
    expression = {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(set(namespaces))}
    return {"matchExpressions": [expression]}


def parse_version(major: str, minor: str) -> tuple[int, int] | None:
    """``(major, minor)`` of the API server's ``/version`` (``minor`` may end in ``+``).

    >>> parse_version("1", "21+"), parse_version("1", "x")
    ((1, 21), None)
    """
    found = [re.match(r"\d+", part or "") for part in (major, minor)]
    if found[0] is None or found[1] is None:
        return None
    return int(found[0].group()), int(found[1].group())


def server_version(api: client.ApiClient) -> tuple[int, int] | None:
    """The API server's ``(major, minor)``, or ``None`` when it cannot be read."""
    try:
        info = client.VersionApi(api).get_code()
    except (ApiException, OSError):
        return None
    return parse_version(str(info.major), str(info.minor))
