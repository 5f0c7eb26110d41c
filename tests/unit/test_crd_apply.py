"""``backstop crd --apply`` without a cluster: what it refuses, and how it says so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from backstop.cli import app
from backstop.k8s import crdapply


class _OldCrds:
    """An API server holding CRDs whose objects are stored as ``v1alpha0``."""

    def __init__(self, _api: Any) -> None:
        self.replaced: list[str] = []

    def read_custom_resource_definition(self, name: str) -> Any:
        return SimpleNamespace(
            status=SimpleNamespace(stored_versions=["v1alpha0", "v1alpha1"], conditions=[]),
            metadata=SimpleNamespace(resource_version="7"),
        )

    def replace_custom_resource_definition(self, name: str, body: Any) -> None:
        self.replaced.append(name)


def test_a_crd_whose_objects_are_stored_in_an_unserved_version_is_not_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[_OldCrds] = []

    def api(_api: Any) -> _OldCrds:
        made.append(_OldCrds(_api))
        return made[-1]

    monkeypatch.setattr(client, "ApiextensionsV1Api", api)
    with pytest.raises(crdapply.CrdUpgradeRefused, match="stored as v1alpha0"):
        crdapply.apply_crds(SimpleNamespace())
    assert made[0].replaced == []


def test_the_cli_says_why_it_cannot_apply_in_one_line(tmp_path: Any) -> None:
    missing = tmp_path / "no-kubeconfig"
    result = CliRunner().invoke(app, ["crd", "--apply", "--kubeconfig", str(missing)])
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot apply the CRDs:"), result.output
    assert "Traceback" not in result.output
