"""The ``<topology>-spec`` ConfigMap: the spec the recorded plan was computed from.

While a later edit is rejected (invalid, or infeasible on the nodes there are), the
supervisor keeps recovering and converging the pods of the last good plan, and building
those pods takes that plan's whole spec (images, pod templates, each operator's
``config``). The StreamTopology holds only the current spec, and its status names the
plan's spec by ``status.plan.specHash``; the content lives here, in an object of its own
(owned by the topology, so the garbage collector removes it), so that the topology
stores its spec once and its status does not grow with the spec.

The reconcile writes it before it records a new plan (write-ahead: a plan in the status
always finds its spec here, or an older one the hash tells apart); the supervise daemon
reads it only when it falls back to the last good plan, once per generation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from backstop.domain.constants import GROUP, SPEC_CONFIGMAP_SUFFIX
from backstop.domain.status.types import PlanStatus
from backstop.k8s.kubeio import Kube
from backstop.k8s.topologyobjects import Owner

SPEC_KEY = "spec.json"
HASH_KEY = "specHash"


def spec_configmap_name(topology: str) -> str:
    """The name of a topology's spec ConfigMap."""
    return topology + SPEC_CONFIGMAP_SUFFIX


def build_spec_configmap(owner: Owner, spec: Mapping[str, Any], spec_hash: str) -> dict[str, Any]:
    """The ConfigMap holding ``spec`` (compact JSON) under its plan's ``specHash``.

    Examples
    --------
    >>> cm = build_spec_configmap(Owner("t", "ns", "u"), {"image": "x"}, "abc")
    >>> cm["metadata"]["name"], cm["data"]
    ('t-spec', {'specHash': 'abc', 'spec.json': '{"image":"x"}'})
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": spec_configmap_name(owner.name),
            "namespace": owner.namespace,
            "labels": {f"{GROUP}/topology": owner.name},
            "ownerReferences": [owner.reference()],
        },
        "data": {
            HASH_KEY: spec_hash,
            SPEC_KEY: json.dumps(dict(spec), separators=(",", ":"), sort_keys=True),
        },
    }


def stored_spec(data: Mapping[str, str] | None, spec_hash: str) -> dict[str, Any] | None:
    """The spec a ConfigMap's ``data`` holds for ``spec_hash``; ``None`` when it holds
    another one (or none, or one that is not a JSON object).

    Examples
    --------
    >>> data = build_spec_configmap(Owner("t", "ns", "u"), {"image": "x"}, "abc")["data"]
    >>> stored_spec(data, "abc"), stored_spec(data, "def"), stored_spec(None, "abc")
    ({'image': 'x'}, None, None)
    """
    if not data or data.get(HASH_KEY) != spec_hash:
        return None
    try:
        spec = json.loads(data.get(SPEC_KEY) or "")
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def plan_spec(k: Kube, owner: Owner, plan: PlanStatus) -> dict[str, Any] | None:
    """The spec ``plan`` was computed from: the status's own copy (written by older
    operators), else the spec ConfigMap's if it is that plan's; ``None`` when neither is."""
    if plan.spec is not None:
        return dict(plan.spec)
    if plan.spec_hash is None:
        return None
    data = k.configmap_data(owner.namespace, spec_configmap_name(owner.name))
    return stored_spec(data, plan.spec_hash)
