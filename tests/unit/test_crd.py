"""The checked-in CRDs are exactly what the pydantic models generate, and are structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backstop.k8s.crd import CRDS, build_streamtopology_crd, render

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("filename", sorted(CRDS))
def test_crd_files_do_not_drift_from_the_models(filename: str) -> None:
    path = ROOT / "crds" / filename
    assert path.read_text() == render(CRDS[filename]()), (
        f"crds/{filename} is out of date: run `backstop crd --write crds`"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.items():
            out.extend(_walk(v, f"{path}.{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_walk(v, f"{path}[{i}]"))
    return out


def test_schema_is_structural_openapi_v3_0() -> None:
    schema = build_streamtopology_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        assert "$defs" not in node, path
        assert "const" not in node, path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path
        for option in node.get("anyOf", []):
            assert option.get("type") != "null", path
        if "properties" in node:
            assert node.get("type") == "object", path


def test_spec_schema_carries_the_models_validation() -> None:
    spec = build_streamtopology_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["spec"]
    assert set(spec["required"]) >= {"recoveryLatencyBound", "operators"}
    # spec.image may be left out: the operator's default task image fills it (the chart's
    # <image.registry>/runtime), and the webhook refuses a topology with neither
    assert "image" not in spec["required"] and spec["properties"]["image"]["minLength"] == 1
    op = spec["properties"]["operators"]["items"]
    assert op["properties"]["name"]["pattern"].startswith("^[a-z0-9]")
    assert op["properties"]["parallelism"]["minimum"] == 1
    assert op["properties"]["priority"]["maximum"] == 10
    assert op["properties"]["resources"]["properties"]["cpu"]["x-kubernetes-int-or-string"]
    grouping = op["properties"]["inputs"]["items"]["properties"]["grouping"]
    assert set(grouping["enum"]) == {
        "forward", "key", "fields", "shuffle", "rebalance", "broadcast", "global"
    }  # fmt: skip
    assert grouping["default"] == "key"  # an input that names none hashes by key, as before
