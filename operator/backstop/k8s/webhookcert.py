"""The admission webhook's self-signed certificate: made here, shared by replicas in a Secret.

Why not Kopf's own generator (``kopf.WebhookServer`` without ``certfile``): it needs
``certbuilder`` and ``oscrypto``, and oscrypto 1.3 (the newest release) cannot even load
against OpenSSL 3.0.10 and later ("Error detecting the version of libcrypto"). The
``cryptography`` package builds the same kind of certificate (its own CA, the hostnames as
SANs) and is declared in ``pyproject.toml``.

Why a Secret: with leader election every replica serves admission behind one Service, and
the webhook configuration holds one ``caBundle``; replicas that each made their own
certificate would fail the API server's TLS check on every other request. The first replica
creates the Secret; the others (and later restarts) read it; a create that loses the race
(409) reads the winner's.

Why an owner: the operator, not Helm, creates the Secret, so ``helm uninstall`` alone would
leave it behind. It is owned by the ValidatingWebhookConfiguration the chart renders
(cluster-scoped, so it may own a namespaced object): when Helm deletes that, Kubernetes'
garbage collector deletes the Secret. A Secret found without that owner is adopted (one
patch).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("backstop.webhook")

VALID_DAYS = 3650
"""The certificate outlives any installation; delete the Secret and restart to renew it."""


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def self_signed(hostnames: Sequence[str]) -> tuple[bytes, bytes]:
    """A self-signed CA certificate for ``hostnames`` (IPs or DNS names) and its key, PEM.

    Examples
    --------
    >>> cert, key = self_signed(["127.0.0.1", "backstop.ns.svc"])
    >>> sans = x509.load_pem_x509_certificate(cert).extensions.get_extension_for_class(
    ...     x509.SubjectAlternativeName).value
    >>> [str(n.value) for n in sans], key.startswith(b"-----BEGIN PRIVATE KEY")
    (['127.0.0.1', 'backstop.ns.svc'], True)
    """
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hostnames]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _decode(secret: client.V1Secret) -> tuple[bytes, bytes]:
    data = secret.data or {}
    return base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])


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


def shared_certificate(
    api: client.ApiClient,
    namespace: str,
    name: str,
    hostnames: Sequence[str],
    owner: str | None = None,
) -> tuple[bytes, bytes]:
    """The certificate and key kept in Secret ``namespace/name``, created on first use,
    owned by ValidatingWebhookConfiguration ``owner`` (see the module docstring)."""
    core = client.CoreV1Api(api)
    ref = owner_reference(api, owner)
    try:
        secret = core.read_namespaced_secret(name, namespace)
        if ref is not None and not any(
            o.uid == ref["uid"] for o in secret.metadata.owner_references or []
        ):
            core.patch_namespaced_secret(name, namespace, {"metadata": {"ownerReferences": [ref]}})
            log.info("webhook: the certificate Secret %s/%s is owned by %s", namespace, name, owner)
        return _decode(secret)
    except ApiException as err:
        if err.status != 404:
            raise
    cert, key = self_signed(hostnames)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"app.kubernetes.io/component": "admission-webhook"},
            owner_references=[ref] if ref is not None else None,
        ),
        type="kubernetes.io/tls",
        data={
            "tls.crt": base64.b64encode(cert).decode(),
            "tls.key": base64.b64encode(key).decode(),
        },
    )
    try:
        core.create_namespaced_secret(namespace, body)
        log.info("webhook: created the certificate Secret %s/%s", namespace, name)
    except ApiException as err:
        if err.status != 409:
            raise
        return _decode(core.read_namespaced_secret(name, namespace))  # another replica's
    return cert, key
