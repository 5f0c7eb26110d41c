"""The ValidatingWebhookConfiguration the operator keeps up to date: its ``webhooks`` entry.

The operator writes the configuration itself (Kopf's managed mode stays off): every replica's
webhook server calls :func:`write_webhooks` with :func:`validating_webhook` each time it
announces a client config, at start and whenever its CA bundle changes, so the entry carries
the ``caBundle`` served now and the ``namespaceSelector`` of the watched namespaces
(:mod:`backstop.k8s.webhookscope`). The entry is the one Kopf's managed mode writes for a
``@kopf.on.validate`` handler: named after the handler id and the configuration, its rules
the handler's resource and operations, its client config the server's with the handler id
appended to the path (Kopf routes a request by the path's last segment to that handler).

The write is a JSON merge patch of ``webhooks``: the whole list is replaced, so an entry or a
selector no longer built disappears (a strategic merge would keep them), and the same patch
twice leaves the object as it is. A configuration not there yet is created with the entry.
"""

from __future__ import annotations

import copy
import logging
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("backstop.webhook")

ATTEMPTS = 5
"""Writes of the configuration before a conflict or transient error is given up for now."""
BACKOFF_SECONDS = 1.0
"""The first pause between attempts, doubled after each."""
TRANSIENT = {409, 429, 500, 502, 503, 504}
"""Statuses worth another attempt: a conflict, throttling, an API server briefly unwell."""
MERGE_PATCH = "application/merge-patch+json"
TIMEOUT_SECONDS = 30
"""How long the API server waits for an answer: the most it allows, as Kopf sets it."""
REVIEW_VERSIONS = ["v1", "v1beta1"]
"""The AdmissionReview versions Kopf's server understands."""
_BAD_NAME = re.compile(r"[^\w\d\.-]")


def webhook_name(handler_id: str, configuration: str) -> str:
    """The entry's name: the handler id made a DNS subdomain, then the configuration's name.

    >>> webhook_name("spec", "backstop.streams.backstop.dev")
    'spec.backstop.streams.backstop.dev'
    >>> webhook_name("a/b_c d", "cfg")
    'a.b-c20d.cfg'
    """
    name = handler_id.replace("/", ".").replace("_", "-")
    name = _BAD_NAME.sub(lambda m: m.group(0).encode("utf-8").hex(), name)
    return f"{name}.{configuration}" if configuration else name


def handler_client_config(config: Mapping[str, Any], handler_id: str) -> dict[str, Any]:
    """``config`` (a URL or a Service) calling the path of ``handler_id``.

    >>> handler_client_config({"url": "https://h:9443/", "caBundle": "Q0E="}, "spec")
    {'url': 'https://h:9443/spec', 'caBundle': 'Q0E='}
    >>> handler_client_config({"service": {"namespace": "ops", "name": "w", "path": ""}}, "spec")
    {'service': {'namespace': 'ops', 'name': 'w', 'path': '/spec'}}
    """
    out: dict[str, Any] = copy.deepcopy(dict(config))
    segment = urllib.parse.quote(handler_id)
    if out.get("url") is not None:
        out["url"] = f"{out['url'].rstrip('/')}/{segment}"
    if out.get("service") is not None:
        out["service"]["path"] = f"{out['service'].get('path', '')}/{segment}"
    return out


def validating_webhook(
    config: Mapping[str, Any],
    *,
    configuration: str,
    handler_id: str,
    resource: tuple[str, str, str],
    operations: Sequence[str],
    namespace_selector: Mapping[str, Any] | None,
    ignore_failures: bool = True,
) -> dict[str, Any]:
    """The ``webhooks`` entry calling ``handler_id`` for ``operations`` on ``resource``
    (``(group, version, plural)``) through the server's client ``config``; limited to the
    namespaces ``namespace_selector`` matches (``None``: every namespace)."""
    group, version, plural = resource
    entry: dict[str, Any] = {
        "name": webhook_name(handler_id, configuration),
        "sideEffects": "None",
        "failurePolicy": "Ignore" if ignore_failures else "Fail",
        "matchPolicy": "Equivalent",
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [plural],
                "operations": list(operations) or ["*"],
                "scope": "*",
            }
        ],
        "clientConfig": handler_client_config(config, handler_id),
        "timeoutSeconds": TIMEOUT_SECONDS,
        "admissionReviewVersions": list(REVIEW_VERSIONS),
    }
    if namespace_selector is not None:
        entry["namespaceSelector"] = copy.deepcopy(dict(namespace_selector))
    return entry


def _transient(err: Exception) -> bool:
    if isinstance(err, ApiException):
        return err.status in TRANSIENT
    return isinstance(err, OSError | urllib3.exceptions.HTTPError)


def write_webhooks(
    api: client.ApiClient,
    name: str,
    webhooks: list[dict[str, Any]],
    *,
    create: bool = True,
    backoff: float = BACKOFF_SECONDS,
) -> None:
    """Make ``webhooks`` the entries of ValidatingWebhookConfiguration ``name``, creating it
    when absent (unless not ``create``: then an absent one is left absent); a conflict or a
    transient error is tried again (:data:`ATTEMPTS`), after that (and on any other error)
    it is raised."""
    admission = client.AdmissionregistrationV1Api(api)
    body = {"webhooks": webhooks}
    for attempt in range(1, ATTEMPTS + 1):
        try:
            try:
                admission.patch_validating_webhook_configuration(
                    name, body, _content_type=MERGE_PATCH
                )
            except ApiException as err:
                if err.status != 404 or not create:
                    raise
                admission.create_validating_webhook_configuration(
                    {"metadata": {"name": name}, **body}
                )  # 409: another replica created it first; the next attempt patches it
            return
        except ApiException as err:
            if err.status == 404:  # gone and not to be created: nothing left to write
                return
            if attempt == ATTEMPTS or not _transient(err):
                raise
        except (OSError, urllib3.exceptions.HTTPError):
            if attempt == ATTEMPTS:
                raise
        log.info("webhook: writing configuration %s again (attempt %d)", name, attempt + 1)
        time.sleep(backoff * 2 ** (attempt - 1))
