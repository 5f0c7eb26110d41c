"""``backstop crd --apply`` on a real API server: it upgrades CRDs that Helm never would.

An older CRD is simulated by taking a printer column away from the live StreamTopology CRD;
``backstop crd --apply`` puts the CRD this version generates back (the column with it), and
says what it did in one line per CRD.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from typer.testing import CliRunner

from backstop.cli import app
from backstop.domain.constants import GROUP
from backstop_testkit.support.kubetools import install_crds

pytestmark = pytest.mark.cluster

NAME = f"streamtopologies.{GROUP}"


def _columns(ext: client.ApiextensionsV1Api) -> list[str]:
    crd = ext.read_custom_resource_definition(NAME)
    return [c.name for c in crd.spec.versions[0].additional_printer_columns or []]


def test_crd_apply_upgrades_an_older_crd_in_place(cluster: str, kube: client.ApiClient) -> None:
    install_crds(kube)
    ext = client.ApiextensionsV1Api(kube)
    full = _columns(ext)
    assert full[-1] == "Age", full
    old = ext.read_custom_resource_definition(NAME)
    body = kube.sanitize_for_serialization(old)
    body["spec"]["versions"][0]["additionalPrinterColumns"] = body["spec"]["versions"][0][
        "additionalPrinterColumns"
    ][:-1]
    ext.replace_custom_resource_definition(NAME, body)
    assert _columns(ext) == full[:-1]
    result = CliRunner().invoke(app, ["crd", "--apply", "--kubeconfig", cluster])
    assert result.exit_code == 0, result.output
    assert f"customresourcedefinition {NAME} configured" in result.output.splitlines()
    assert _columns(ext) == full
