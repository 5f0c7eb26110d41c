"""CustomResourceDefinitions generated from the pydantic models.

The CRD's OpenAPI schema is derived from :mod:`backstop.domain.spec` so the API server,
the CLI and the operator validate the same thing. Pydantic emits JSON Schema
(2020-12: ``$ref``, ``anyOf`` with ``null``, numeric ``exclusiveMinimum``);
Kubernetes wants a *structural* OpenAPI v3.0 schema (inlined, ``nullable``,
boolean ``exclusiveMinimum``), which works on v1.20 and on current releases.
``crds/*.yaml`` are this module's output; a test fails when they drift.
"""

from __future__ import annotations

from typing import Any

import yaml

from backstop.domain.constants import DNS_LABEL, GROUP, TOPOLOGY_NAME_MAX, VERSION
from backstop.domain.spec import StreamTopologySpec

_DROP = {"title", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Turn a pydantic JSON Schema node into a structural OpenAPI v3.0 node."""
    if isinstance(node, list):
        return [_structural(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if node.get("x-kubernetes-int-or-string"):
        keep = {k: node[k] for k in ("description", "default") if k in node}
        return {
            **keep,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "anyOf":
            options = [o for o in value if o.get("type") != "null"]
            if len(options) < len(value):
                out["nullable"] = True
            if len(options) == 1:
                out.update(_structural(options[0], defs))
                continue
            out["anyOf"] = _structural(options, defs)
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties" and value is False:
            continue  # structural schemas prune unknown fields instead
        if key == "additionalProperties" and node.get("x-kubernetes-preserve-unknown-fields"):
            continue  # a free-form map: kept as is instead of described
        out[key] = _structural(value, defs)
    return out


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of ``spec`` (camelCase, from the pydantic model)."""
    raw = StreamTopologySpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    schema.pop("description", None)
    return schema


def _condition_schema() -> dict[str, Any]:
    """``metav1.Condition`` as an OpenAPI schema."""
    return {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    }


def _crd(
    *,
    kind: str,
    plural: str,
    short: list[str],
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
    description: str,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["backstop"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": metadata or {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def _col(name: str, kind: str, path: str, description: str) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, "description": description}


def _topology_metadata_schema() -> dict[str, Any]:
    """The API server checks ``metadata.name`` against this (v1.20 does): a topology's name
    is the ``topology`` label value of every object it owns, so a DNS label of at most 63."""
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": TOPOLOGY_NAME_MAX, "pattern": DNS_LABEL}
        },
    }


def build_streamtopology_crd() -> dict[str, Any]:
    """The ``StreamTopology`` CRD (namespaced, short name ``st``, status subresource)."""
    spec = spec_schema()
    status = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {"type": "array", "items": _condition_schema()},
        },
    }
    return _crd(
        kind="StreamTopology",
        plural="streamtopologies",
        short=["st"],
        spec=spec,
        status=status,
        metadata=_topology_metadata_schema(),
        columns=[
            _col("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "All running"),
            _col(
                "Recovering",
                "string",
                '.status.conditions[?(@.type=="Recovering")].status',
                "A recovery session is running",
            ),
            _col("Tasks", "integer", ".status.plan.tasks", "Tasks in the topology"),
            _col(
                "Backups", "integer", ".status.plan.backupCount", "Tasks keeping upstream backups"
            ),
            _col("Nodes", "integer", ".status.plan.nodesUsed", "Nodes the plan uses"),
            _col(
                "WorstRecovery",
                "number",
                ".status.plan.worstRecoveryLatency",
                "Worst recovery latency over single node failures (s)",
            ),
            _col("Bound", "number", ".spec.recoveryLatencyBound", "Recovery latency bound (s)"),
            _col("Age", "date", ".metadata.creationTimestamp", "Age"),
        ],
        description="A stream topology run with a guaranteed recovery latency.",
    )


def build_recoveryplan_crd() -> dict[str, Any]:
    """The ``RecoveryPlan`` CRD: one object per step of a recovery or of a restore.

    A restore (trigger ``Restore``) moves running tasks to bring the bound back
    once capacity returns; its steps are RecoveryPlans too, so ``kubectl get
    recoveryplans`` shows the whole history of moves in one place.
    """
    status = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "phase": {"type": "string", "enum": ["Issued", "Applied", "Superseded", "Completed"]},
        },
    }
    return _crd(
        kind="RecoveryPlan",
        plural="recoveryplans",
        short=["rp"],
        spec=_recoveryplan_spec(),
        status=status,
        columns=[
            _col("Topology", "string", ".spec.topology", "StreamTopology"),
            _col("Step", "integer", ".spec.step", "Step of the session"),
            _col("Trigger", "string", ".spec.trigger", "What triggered the step"),
            _col("Recovered", "number", ".spec.recoveredPriority", "Priority of queries back"),
            _col("Failed", "number", ".spec.failedPriority", "Priority of queries that failed"),
            _col("Worst", "number", ".spec.worstAfter", "Restore: worst recovery after (s)"),
            _col("Phase", "string", ".status.phase", "Issued, Applied, Completed"),
            _col("Age", "date", ".metadata.creationTimestamp", "Age"),
        ],
        description="One step of an incremental recovery, or of restoring the bound.",
    )


def _recoveryplan_spec() -> dict[str, Any]:
    """The schema of a RecoveryPlan's ``spec``: which tasks go where, and what it recovers."""
    return {
        "type": "object",
        "required": ["topology", "step"],
        "properties": {
            "topology": {"type": "string", "description": "The StreamTopology recovered."},
            "session": {"type": "string", "description": "The recovery session id."},
            "step": {"type": "integer", "minimum": 1},
            "trigger": {
                "type": "string",
                "description": "NodeLost, DataPlane (a node loss confirmed on the data "
                "plane), NodeReady, NodeBack or Retry (a recovery step); "
                "Restore (a step restoring the bound when capacity returned); Consolidate "
                "(a step onto fewer nodes, apply: auto).",
            },
            "algorithm": {"type": "string"},
            "lostNodes": {"type": "array", "items": {"type": "string"}},
            "assignments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["task", "node"],
                    "properties": {"task": {"type": "string"}, "node": {"type": "string"}},
                },
            },
            "pending": {"type": "array", "items": {"type": "string"}},
            "recoveredQueries": {"type": "array", "items": {"type": "string"}},
            "recoveredPriority": {"type": "number"},
            "failedPriority": {"type": "number"},
            "worstBefore": {
                "type": "number",
                "nullable": True,
                "description": "Restore: worst single-node recovery (s) before the step.",
            },
            "worstAfter": {
                "type": "number",
                "nullable": True,
                "description": "Restore: worst single-node recovery (s) after the step.",
            },
        },
    }


def render(crd: dict[str, Any]) -> str:
    """YAML text of a CRD, stable so the checked-in files can be compared."""
    header = "# Generated by `backstop crd` from the pydantic models. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=100)


CRDS = {
    "streamtopology.yaml": build_streamtopology_crd,
    "recoveryplan.yaml": build_recoveryplan_crd,
}
