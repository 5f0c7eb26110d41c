"""The operator Deployment's readiness probe, and its admission webhook's namespaces.

The chart renders the ValidatingWebhookConfiguration without webhooks: the operator's webhook
server writes its entry, with a ``namespaceSelector`` of the namespaces it watches, which it
takes from the ``--namespace`` flags the chart passes. Here the rendered flags go through
``backstop operator``'s own parsing and settings into what the server writes.

``backstop operator --liveness URL`` serves ``/healthz`` there (Kopf's liveness endpoint
while leading, :func:`backstop.k8s.leader.run_elected`'s own server while standing by);
the readiness probe must ask that path on that port, as the liveness probe does, and give
up sooner than the liveness probe restarts the pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlparse

import kopf
import pytest
from kubernetes import client

from backstop.cli import operator as operator_cli
from backstop.cli._operator_options import OperatorOptions
from backstop.controller import admission
from backstop.controller.webhookserver import RotatingWebhookServer
from tests.chart.test_chart import Doc, container, env_of, helm, operator_command, render

__all__ = ["helm"]  # the fixture, shared with test_chart.py

pytestmark = pytest.mark.helm


def liveness_url(c: Doc) -> str:
    """The ``--liveness`` the chart passes ``backstop operator``."""
    (arg,) = [a for a in c["args"] if a.startswith("--liveness=")]
    url: str = arg.split("=", 1)[1]
    return url


@pytest.mark.parametrize("values", [None, {"health": {"port": 8181}}], ids=["default", "port"])
def test_the_readiness_probe_asks_the_operators_health_endpoint(
    helm: str, tmp_path: Path, values: Doc | None
) -> None:
    c = container(render(helm, tmp_path, values))
    served = urlparse(liveness_url(c))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    ready, live = c["readinessProbe"], c["livenessProbe"]
    assert ready["httpGet"]["path"] == served.path == "/healthz"
    assert ports[ready["httpGet"]["port"]] == served.port
    assert ready["httpGet"] == live["httpGet"]
    # not ready sooner than dead: the Service drops it before the kubelet restarts it
    give_up = ready["periodSeconds"] * ready["failureThreshold"]
    assert give_up < live["periodSeconds"] * live["failureThreshold"]
    assert ready["initialDelaySeconds"] <= live["initialDelaySeconds"]


def written_webhooks(monkeypatch: pytest.MonkeyPatch, c: Doc) -> list[dict[str, Any]]:
    """The webhooks the operator container ``c`` (its args and env; an API server of 1.29)
    writes when its server announces a client config."""
    for name, value in env_of(c).items():
        monkeypatch.setenv(name, value)
    params = operator_command().make_context("operator", list(c["args"][1:])).params
    assert params["webhook_port"], "the chart serves the webhook"
    options = OperatorOptions(**{**params, "namespace": list(params["namespace"] or [])})
    registry = kopf.OperatorRegistry()
    version = mock.MagicMock()
    version.return_value.get_code.return_value = client.VersionInfo(
        major="1", minor="29", build_date="", compiler="", git_commit="", git_tree_state="",
        git_version="v1.29.0", go_version="", platform="",
    )  # fmt: skip
    monkeypatch.setattr(client, "VersionApi", version)  # webhookscope reads it here
    monkeypatch.setattr(admission, "api_client", lambda: client.ApiClient())
    monkeypatch.setattr(kopf, "get_default_registry", lambda: registry)
    written: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(admission, "write_webhooks", lambda api, name, w, **_: written.append(w))
    settings, _ = operator_cli._kopf_settings(options)
    server = settings.admission.server
    assert isinstance(server, RotatingWebhookServer) and server.publish is not None
    server.publish({"service": {"namespace": "ops", "name": "rel-backstop-webhook"}}, True)
    (webhooks,) = written
    return webhooks


def test_the_webhook_is_called_for_the_watched_namespaces_only(
    helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values: Doc = {"watchNamespaces": ["team-a", "team-b"]}
    (webhook,) = written_webhooks(monkeypatch, container(render(helm, tmp_path, values, "ops")))
    (expression,) = webhook["namespaceSelector"]["matchExpressions"]
    assert expression == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["ops", "team-a", "team-b"],
    }
    everywhere = container(render(helm, tmp_path, {"watchAllNamespaces": True}))
    (unscoped,) = written_webhooks(monkeypatch, everywhere)
    assert "namespaceSelector" not in unscoped
