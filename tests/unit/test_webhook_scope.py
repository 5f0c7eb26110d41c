"""The webhook entry the operator writes, called for the watched namespaces only.

The operator writes the ValidatingWebhookConfiguration's ``webhooks`` itself (Kopf's managed
mode is off): the entry must be the one Kopf's managed mode wrote for the validating handler
(its name, rules, failure policy, client config with the handler's path), written here by
hand from the Kubernetes ``admissionregistration.k8s.io/v1`` reference, plus the
``namespaceSelector`` of the watched namespaces. An API server before 1.21 labels no
namespace with its name, so there the webhook keeps no selector rather than matching nothing.
"""

from __future__ import annotations

import importlib
from typing import Any
from unittest import mock

import kopf
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.controller import admission
from backstop.controller.webhookserver import RotatingWebhookServer
from backstop.k8s import webhookconfig
from backstop.k8s.webhookconfig import validating_webhook, write_webhooks
from backstop.k8s.webhookscope import NAMESPACE_NAME_LABEL, namespace_selector, server_version

VERSION_API = client.VersionApi  # the real class (the tests replace the module's)
SERVICE_CONFIG: Any = {
    "service": {"namespace": "ops", "name": "rel-backstop-webhook", "port": 443, "path": ""},
    "caBundle": "Q0E=",
}
SELECTOR = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ops", "team-a"]}
    ]
}
EXPECTED = {  # by hand, from the ValidatingWebhook reference and Kopf's routing by path
    "name": "spec.backstop.streams.backstop.dev",
    "rules": [
        {
            "apiGroups": ["streams.backstop.dev"],
            "apiVersions": ["v1alpha1"],
            "resources": ["streamtopologies"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "*",
        }
    ],
    "clientConfig": {
        "service": {
            "namespace": "ops",
            "name": "rel-backstop-webhook",
            "port": 443,
            "path": "/spec",
        },
        "caBundle": "Q0E=",
    },
    "failurePolicy": "Ignore",
    "matchPolicy": "Equivalent",
    "sideEffects": "None",
    "timeoutSeconds": 30,
    "admissionReviewVersions": ["v1", "v1beta1"],
    "namespaceSelector": SELECTOR,
}


def entry(config: Any, selector: dict[str, Any] | None) -> dict[str, Any]:
    """The operator's entry for its handler, as :func:`admission.publisher` builds it."""
    return validating_webhook(
        config,
        configuration=admission.CONFIGURATION,
        handler_id=admission.HANDLER_ID,
        resource=("streams.backstop.dev", "v1alpha1", "streamtopologies"),
        operations=admission.OPERATIONS,
        namespace_selector=selector,
    )


def test_the_entry_is_the_validating_webhook_with_the_namespace_selector() -> None:
    assert entry(SERVICE_CONFIG, SELECTOR) == EXPECTED
    unscoped = {k: v for k, v in EXPECTED.items() if k != "namespaceSelector"}
    assert entry(SERVICE_CONFIG, None) == unscoped
    by_url = entry({"url": "https://10.0.0.5:9443/", "caBundle": "Q0E="}, None)
    assert by_url["clientConfig"] == {"url": "https://10.0.0.5:9443/spec", "caBundle": "Q0E="}
    assert SERVICE_CONFIG["service"]["path"] == ""  # the server's config is left as it was


def test_the_entry_matches_what_kopfs_managed_mode_writes() -> None:
    """Kopf's own builder on the registered handler gives the same entry, the selector
    aside. The builder is not public, but it is where it is in every Kopf the project allows
    (1.41 to 1.x): a release that moves it fails here, never skips, since the entry the
    operator writes by hand must still be the one Kopf would write."""
    kopfs = importlib.import_module("kopf._core.engines.admission")
    references = importlib.import_module("kopf._cogs.structs.references")
    registry = kopf.OperatorRegistry()
    admission.register(registry, admission.Webhook(port=1))
    resource = references.Resource("streams.backstop.dev", "v1alpha1", "streamtopologies")
    (built,) = kopfs.build_webhooks(
        registry._webhooks.get_all_handlers(),
        resources=[resource],
        name_suffix=admission.CONFIGURATION,
        client_config=SERVICE_CONFIG,
    )
    assert {k: v for k, v in built.items() if v is not None} == entry(SERVICE_CONFIG, None)


def configured(monkeypatch: pytest.MonkeyPatch, hook: admission.Webhook, minor: str) -> Any:
    """The settings ``admission.configure`` gives against an API server of 1.<minor>."""
    info = client.VersionInfo(
        major="1", minor=minor, build_date="", compiler="", git_commit="", git_tree_state="",
        git_version=f"v1.{minor}", go_version="", platform="",
    )  # fmt: skip
    version = mock.create_autospec(VERSION_API)
    version.return_value.get_code.return_value = info
    monkeypatch.setattr(client, "VersionApi", version)  # webhookscope reads it here
    monkeypatch.setattr(admission, "api_client", lambda: client.ApiClient())
    settings = kopf.OperatorSettings()
    admission.configure(settings, kopf.OperatorRegistry(), hook)
    return settings


def written(monkeypatch: pytest.MonkeyPatch, settings: Any, serving: bool = True) -> list[Any]:
    """What the configured server writes when it announces :data:`SERVICE_CONFIG`."""
    calls: list[Any] = []
    monkeypatch.setattr(admission, "write_webhooks", lambda *a, **kw: calls.append((a, kw)))
    server = settings.admission.server
    assert isinstance(server, RotatingWebhookServer) and server.publish is not None
    server.publish(SERVICE_CONFIG, serving)
    return calls


def test_the_server_writes_the_scoped_entry_and_kopf_manages_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook = admission.Webhook(port=1, namespaces=("ops", "team-a", "ops"))
    settings = configured(monkeypatch, hook, "29")
    assert settings.admission.managed is None
    ((args, kwargs),) = written(monkeypatch, settings)
    assert args[1:] == (admission.CONFIGURATION, [EXPECTED]) and kwargs == {"create": True}
    # stopping: a replica that is not persistent takes its entry away, creating nothing
    ((args, kwargs),) = written(monkeypatch, settings, serving=False)
    assert args[1:] == (admission.CONFIGURATION, []) and kwargs == {"create": False}
    persistent = configured(monkeypatch, admission.Webhook(port=1, persistent=True), "29")
    assert written(monkeypatch, persistent, serving=False) == []
    unmanaged = configured(monkeypatch, admission.Webhook(port=1, configuration=None), "29")
    assert unmanaged.admission.server.publish is None


def test_every_namespace_or_an_old_api_server_keeps_the_webhook_unscoped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    everywhere = configured(monkeypatch, admission.Webhook(port=1), "29")
    ((args, _),) = written(monkeypatch, everywhere)
    assert "namespaceSelector" not in args[2][0]
    old = configured(monkeypatch, admission.Webhook(port=1, namespaces=("ops",)), "20")
    ((args, _),) = written(monkeypatch, old)
    assert "namespaceSelector" not in args[2][0]


def test_the_selector_and_the_server_version() -> None:
    selector = namespace_selector(["b", "a"], (1, 21))
    assert selector == {
        "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": ["a", "b"]}]
    }
    assert namespace_selector(["b", "a"], (1, 20)) is None
    assert namespace_selector(["a"], None) is None  # unknown: no selector that might match none
    api = mock.MagicMock(spec=client.ApiClient)
    api.call_api.side_effect = ApiException(status=403, reason="Forbidden")
    assert server_version(api) is None


def admission_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    api = mock.MagicMock()
    monkeypatch.setattr(client, "AdmissionregistrationV1Api", lambda _: api)
    return api


def test_the_write_replaces_the_list_by_a_merge_patch_and_creates_when_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = admission_api(monkeypatch)
    write_webhooks(mock.Mock(), "cfg", [EXPECTED])
    api.patch_validating_webhook_configuration.assert_called_once_with(
        "cfg", {"webhooks": [EXPECTED]}, _content_type="application/merge-patch+json"
    )
    api.create_validating_webhook_configuration.assert_not_called()

    api = admission_api(monkeypatch)
    api.patch_validating_webhook_configuration.side_effect = ApiException(status=404)
    write_webhooks(mock.Mock(), "cfg", [EXPECTED])
    api.create_validating_webhook_configuration.assert_called_once_with(
        {"metadata": {"name": "cfg"}, "webhooks": [EXPECTED]}
    )
    api = admission_api(monkeypatch)
    api.patch_validating_webhook_configuration.side_effect = ApiException(status=404)
    write_webhooks(mock.Mock(), "cfg", [], create=False)  # stopping: nothing to empty
    api.create_validating_webhook_configuration.assert_not_called()


def test_the_write_retries_transient_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    api = admission_api(monkeypatch)
    api.patch_validating_webhook_configuration.side_effect = [
        ApiException(status=503),
        OSError("connection reset"),
        ApiException(status=409),
        None,
    ]
    write_webhooks(mock.Mock(), "cfg", [EXPECTED], backoff=0)
    assert api.patch_validating_webhook_configuration.call_count == 4

    api = admission_api(monkeypatch)
    api.patch_validating_webhook_configuration.side_effect = ApiException(status=403)
    with pytest.raises(ApiException):
        write_webhooks(mock.Mock(), "cfg", [EXPECTED], backoff=0)
    assert api.patch_validating_webhook_configuration.call_count == 1

    api = admission_api(monkeypatch)
    api.patch_validating_webhook_configuration.side_effect = ApiException(status=500)
    with pytest.raises(ApiException):
        write_webhooks(mock.Mock(), "cfg", [EXPECTED], backoff=0)
    assert api.patch_validating_webhook_configuration.call_count == webhookconfig.ATTEMPTS
