"""The admission webhook is called for the watched namespaces only.

Kopf writes the managed ValidatingWebhookConfiguration's ``webhooks`` itself; here its own
builder runs on the operator's registered handler, as its configuration manager calls it,
and each webhook it returns must carry the ``namespaceSelector`` of the watched namespaces
(and nothing else of Kopf's may change). An API server before 1.21 labels no namespace
with its name, so there the webhook keeps no selector rather than matching nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import kopf
import kopf._core.engines.admission as kopf_admission
import pytest
from kopf._cogs.structs.references import Resource
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.controller import admission
from backstop.domain.constants import GROUP, PLURAL, VERSION
from backstop.k8s.webhookscope import NAMESPACE_NAME_LABEL, namespace_selector, server_version

TOPOLOGIES = Resource(GROUP, VERSION, PLURAL, namespaced=True)
VERSION_API = client.VersionApi  # the real class (the tests replace the module's)
CLIENT_CONFIG: Any = {"service": {"namespace": "ops", "name": "rel-backstop-webhook"}}


@pytest.fixture(autouse=True)
def kopfs_builder() -> Iterator[None]:
    """Kopf's module as it was: :func:`admission.configure` scopes it process-wide."""
    yield
    kopf_admission.build_webhooks = admission.KOPF_BUILD_WEBHOOKS


def webhooks(registry: kopf.OperatorRegistry) -> list[dict[str, Any]]:
    """What Kopf's configuration manager writes: its module's builder on the handlers."""
    built: list[dict[str, Any]] = kopf_admission.build_webhooks(
        registry._webhooks.get_all_handlers(),
        resources=[TOPOLOGIES],
        name_suffix=admission.CONFIGURATION,
        client_config=CLIENT_CONFIG,
    )
    return built


def configured(monkeypatch: pytest.MonkeyPatch, hook: admission.Webhook, minor: str) -> Any:
    """``admission.configure`` against an API server of version 1.<minor>."""
    info = client.VersionInfo(
        major="1", minor=minor, build_date="", compiler="", git_commit="", git_tree_state="",
        git_version=f"v1.{minor}", go_version="", platform="",
    )  # fmt: skip
    version = mock.create_autospec(VERSION_API)
    version.return_value.get_code.return_value = info
    monkeypatch.setattr(client, "VersionApi", version)  # webhookscope reads it here
    monkeypatch.setattr(admission, "api_client", lambda: client.ApiClient())
    monkeypatch.setattr(admission, "build_server", lambda w: None)
    registry = kopf.OperatorRegistry()
    admission.configure(kopf.OperatorSettings(), registry, hook)
    return registry


def test_the_webhooks_kopf_writes_name_the_watched_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = kopf.OperatorRegistry()
    admission.register(plain, admission.Webhook(port=1))
    unscoped = webhooks(plain)
    assert unscoped and all("namespaceSelector" not in w for w in unscoped)

    hook = admission.Webhook(port=1, namespaces=("ops", "team-a", "team-b"))
    registry = configured(monkeypatch, hook, "29")
    scoped = webhooks(registry)
    assert len(scoped) == len(unscoped) == 1
    (webhook,) = scoped
    assert webhook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": ["ops", "team-a", "team-b"]}
        ]
    }
    rest = {k: v for k, v in webhook.items() if k != "namespaceSelector"}
    assert rest == unscoped[0]  # Kopf's rules, failure policy and client config unchanged
    assert webhook["failurePolicy"] == "Ignore"


def test_every_namespace_or_an_old_api_server_keeps_the_webhook_unscoped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    everywhere = configured(monkeypatch, admission.Webhook(port=1), "29")
    assert "namespaceSelector" not in webhooks(everywhere)[0]
    old = configured(monkeypatch, admission.Webhook(port=1, namespaces=("ops",)), "20")
    assert "namespaceSelector" not in webhooks(old)[0]


def test_the_selector_and_the_server_version() -> None:
    assert namespace_selector(["b", "a"], (1, 21)) is not None
    assert namespace_selector(["b", "a"], (1, 20)) is None
    assert namespace_selector(["a"], None) is None  # unknown: no selector that might match none
    api = mock.MagicMock(spec=client.ApiClient)
    api.call_api.side_effect = ApiException(status=403, reason="Forbidden")
    assert server_version(api) is None
