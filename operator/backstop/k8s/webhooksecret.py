"""The admission webhook's certificates shared by replicas in a Secret, renewed by any of them.

Why a Secret: with leader election every replica serves admission behind one Service, and
the webhook configuration holds one ``caBundle``; replicas that each made their own CA would
fail the API server's TLS check on every other request. The Secret (type
``kubernetes.io/tls``) holds ``tls.crt``/``tls.key`` (the serving leaf), ``ca.crt`` (the
bundle of trusted CAs) and ``ca.key`` (the newest CA's key); :mod:`backstop.k8s.webhookcert`
says what is renewed when.

Every replica calls :func:`synced` when its server starts and then once a minute: the first
creates the Secret (a create that loses the race, 409, reads the winner's); whichever finds
a renewal due writes it with the ``resourceVersion`` it read as a precondition, so of two
replicas renewing at once one wins and the other (409) reads the winner's certificates and
finds nothing left to do. A Secret written by an older version (``tls.crt`` a self-signed
certificate, no CA) counts as a bundle of that one certificate without a CA key: a new CA
joins it and the old certificate is served until the new CA is published.

Why an owner: the operator, not Helm, creates the Secret, so ``helm uninstall`` alone would
leave it behind. It is owned by the ValidatingWebhookConfiguration the chart renders
(cluster-scoped, so it may own a namespaced object): when Helm deletes that, Kubernetes'
garbage collector deletes the Secret. A Secret found without that owner is adopted (one
patch).
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.k8s.webhookcert import Certificates, renewed

log = logging.getLogger("backstop.webhook")

ATTEMPTS = 5
"""Reads and writes of the Secret before a renewal that keeps conflicting waits a check."""


def decode(secret: client.V1Secret) -> Certificates | None:
    """The certificates in ``secret`` (see the module docstring for an older one's), or
    ``None`` when it holds none."""
    data = secret.data or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return None
    cert = base64.b64decode(data["tls.crt"])
    return Certificates(
        ca_bundle=base64.b64decode(data["ca.crt"]) if "ca.crt" in data else cert,
        ca_key=base64.b64decode(data.get("ca.key", "")),
        cert=cert,
        key=base64.b64decode(data["tls.key"]),
    )


def encode(certs: Certificates) -> dict[str, str]:
    """The Secret's ``data`` for ``certs``."""
    files = {"tls.crt": certs.cert, "tls.key": certs.key}
    files |= {"ca.crt": certs.ca_bundle, "ca.key": certs.ca_key}
    return {k: base64.b64encode(v).decode() for k, v in files.items()}


def owner_reference(api: client.ApiClient, configuration: str | None) -> dict[str, str] | None:
    """An ownerReference to ValidatingWebhookConfiguration ``configuration``, or ``None``
    when there is none (yet): then the Secret has no owner and stays until deleted by hand."""
    if not configuration:
        return None
    try:
        vwc = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
            configuration
        )
    except ApiException as err:
        if err.status not in (403, 404):
            raise
        log.warning(
            "webhook: no ValidatingWebhookConfiguration %s to own the certificate Secret (%s)",
            configuration,
            err.reason,
        )
        return None
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "name": configuration,
        "uid": vwc.metadata.uid,
    }


def synced(
    core: Any,
    namespace: str,
    name: str,
    hostnames: Sequence[str],
    ref: dict[str, str] | None,
    now: datetime.datetime | None = None,
) -> Certificates:
    """The certificates kept in Secret ``namespace/name`` (through ``core``, a
    ``CoreV1Api``): created on first use, renewed when due, owned by ``ref`` (an
    :func:`owner_reference`); ``now`` is the time renewals are judged at."""
    current: Certificates | None = None
    for _ in range(ATTEMPTS):
        try:
            secret = core.read_namespaced_secret(name, namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            made = renewed(None, hostnames, now)
            assert made is not None
            if _create(core, namespace, name, made, ref):
                return made
            continue  # another replica created it first: read and judge theirs
        secret = _adopt(core, namespace, name, secret, ref)
        current = decode(secret)
        new = renewed(current, hostnames, now)
        if new is None and current is not None:
            return current
        assert new is not None
        body = {"metadata": {"resourceVersion": secret.metadata.resource_version}}
        try:
            core.patch_namespaced_secret(name, namespace, {**body, "data": encode(new)})
        except ApiException as err:
            if err.status != 409:
                raise
            log.info("webhook: another replica renewed the certificate first; reading theirs")
            continue
        log.info("webhook: renewed the certificates in Secret %s/%s", namespace, name)
        return new
    if current is None:
        raise RuntimeError(f"webhook: no certificate in Secret {namespace}/{name}")
    log.warning("webhook: the certificate Secret keeps changing; renewing at the next check")
    return current


def _create(
    core: Any, namespace: str, name: str, certs: Certificates, ref: dict[str, str] | None
) -> bool:
    """Create the Secret with ``certs``; ``False`` when it exists already (409)."""
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"app.kubernetes.io/component": "admission-webhook"},
            owner_references=[ref] if ref is not None else None,
        ),
        type="kubernetes.io/tls",
        data=encode(certs),
    )
    try:
        core.create_namespaced_secret(namespace, body)
    except ApiException as err:
        if err.status != 409:
            raise
        return False
    log.info("webhook: created the certificate Secret %s/%s", namespace, name)
    return True


def _adopt(core: Any, namespace: str, name: str, secret: Any, ref: dict[str, str] | None) -> Any:
    """``secret``, given owner ``ref`` if it lacks it (the patched Secret is returned)."""
    if ref is None or any(o.uid == ref["uid"] for o in secret.metadata.owner_references or []):
        return secret
    patched = core.patch_namespaced_secret(
        name, namespace, {"metadata": {"ownerReferences": [ref]}}
    )
    log.info("webhook: the certificate Secret %s/%s is owned by %s", namespace, name, ref["name"])
    return patched
