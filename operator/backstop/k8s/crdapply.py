"""Installing and upgrading the CRDs from the operator's own models: ``backstop crd --apply``.

Helm installs a chart's ``crds/`` once and never upgrades them, so a new operator version
would otherwise run against the CRDs of the first one it was installed with (a new field
pruned by the API server, say). ``backstop crd --apply`` (run by the chart's upgrade hook, or
by hand with the operator's image) creates the CRDs or replaces them with the ones this
version generates (:mod:`backstop.k8s.crd`), then waits until the API server serves them.

It refuses, naming the CRD and the versions, to replace a CRD whose objects are stored in a
version the new CRD no longer serves (``status.storedVersions``): the API server would keep
those objects unreadable. Such an upgrade needs the stored objects migrated first (see
``docs/install.md``, "Upgrades").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.k8s.crd import CRDS


class CrdUpgradeRefused(Exception):
    """A CRD's stored objects would be left in a version it no longer serves."""


def unserved_stored(crd: Mapping[str, Any], stored: Iterable[str]) -> list[str]:
    """The stored versions (``status.storedVersions``) that ``crd`` does not serve.

    >>> crd = {"spec": {"versions": [{"name": "v1beta1", "served": True}]}}
    >>> unserved_stored(crd, ["v1alpha1", "v1beta1"]), unserved_stored(crd, ["v1beta1"])
    (['v1alpha1'], [])
    """
    served = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
    return [v for v in stored if v not in served]


def apply_crds(api: client.ApiClient, timeout: float = 60.0) -> list[tuple[str, str]]:
    """Create or replace every CRD of this version; ``(name, "created" | "configured")``
    each, once the API server says it is established.

    Raises
    ------
    CrdUpgradeRefused
        When a CRD's objects are stored in a version the new CRD does not serve.
    ApiException
        When the API server refuses a call.
    """
    ext = client.ApiextensionsV1Api(api)
    done: list[tuple[str, str]] = []
    for build in CRDS.values():
        crd = build()
        name = crd["metadata"]["name"]
        try:
            old = ext.read_custom_resource_definition(name)
        except ApiException as err:
            if err.status != 404:
                raise
            ext.create_custom_resource_definition(crd)
            done.append((name, "created"))
            continue
        lost = unserved_stored(crd, (old.status and old.status.stored_versions) or [])
        if lost:
            raise CrdUpgradeRefused(
                f"{name}: objects are stored as {', '.join(lost)}, which this version does "
                "not serve; migrate them to a served version first"
            )
        crd["metadata"]["resourceVersion"] = old.metadata.resource_version
        ext.replace_custom_resource_definition(name, crd)
        done.append((name, "configured"))
    deadline = time.monotonic() + timeout
    for name, _ in done:
        while not _established(ext, name):
            if time.monotonic() > deadline:
                raise ApiException(status=0, reason=f"{name} not established in {timeout:g}s")
            time.sleep(0.2)
    return done


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    conds = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conds)
