"""The admission webhook's certificates: a CA and a short-lived serving leaf it signs, renewed.

Why not Kopf's own generator (``kopf.WebhookServer`` without ``certfile``): it needs
``certbuilder`` and ``oscrypto``, and oscrypto 1.3 (the newest release) cannot even load
against OpenSSL 3.0.10 and later ("Error detecting the version of libcrypto"). The
``cryptography`` package builds the certificates and is declared in ``pyproject.toml``.

Two certificates, as cert-manager-less webhook operators keep them (e.g. the Open Policy
Agent's cert-controller, Strimzi's cluster CA): a CA (``CA:TRUE``, :data:`CA_DAYS`), which
the webhook configuration's ``caBundle`` carries, and a serving leaf (``CA:FALSE``,
``serverAuth``, the hostnames as SANs, :data:`LEAF_DAYS`) signed by it, which the server
presents. Either is renewed when less than a third of its life is left (:func:`due`):

* a due leaf is replaced by one the newest CA signs;
* a due CA is replaced by a new CA with a new key, and the bundle keeps the old CA until it
  expires, so a leaf the old CA signed stays trusted; the leaf moves to the new CA only once
  that CA has been in the bundle for :data:`PUBLISH_SECONDS` (every replica has then
  announced the new bundle), so the API server never meets a leaf it cannot verify.

:func:`renewed` decides all this from the certificates alone (no other state), so any
replica that finds a renewal due makes the same decision; :mod:`backstop.k8s.webhooksecret`
keeps the result in the Secret the replicas share.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 730
"""The CA's life (two years): renewed after about 16 months, then trusted 8 more."""
LEAF_DAYS = 90
"""The serving leaf's life: renewed after 60 days, so a leaked key serves at most 90."""
PUBLISH_SECONDS = 600
"""How long a new CA is in the bundle before a leaf it signs is served: longer than every
replica takes to read the Secret and announce the bundle (a check a minute)."""
BACKDATE = datetime.timedelta(minutes=5)
"""Certificates start this much before they are made: clocks of the API server may lag."""


@dataclasses.dataclass(frozen=True)
class Certificates:
    """The webhook's certificates, PEM: what the Secret holds and the server serves."""

    ca_bundle: bytes
    """The CAs the webhook configuration trusts: the newest (the one ``ca_key`` signs with)
    first, then older ones not yet expired."""
    ca_key: bytes
    """The newest CA's key; empty when unknown (then the CA is renewed at once)."""
    cert: bytes
    """The serving leaf."""
    key: bytes
    """The serving leaf's key."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """A new CA certificate (``CA:TRUE``, may sign certificates only) and its key, PEM."""
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"backstop-webhook-ca-{now:%Y%m%d}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_ca_usage(), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem(cert), _key_pem(key)


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def issue_leaf(
    hostnames: Sequence[str], ca_pem: bytes, ca_key_pem: bytes, now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """A serving certificate for ``hostnames`` (IPs or DNS names) signed by the CA, and its
    key, PEM; it ends with the CA if that ends first.

    Examples
    --------
    >>> ca, ca_key = new_ca()
    >>> cert, key = issue_leaf(["127.0.0.1", "backstop.ns.svc"], ca, ca_key)
    >>> leaf = x509.load_pem_x509_certificate(cert)
    >>> [str(n.value) for n in leaf.extensions.get_extension_for_class(
    ...     x509.SubjectAlternativeName).value], key.startswith(b"-----BEGIN PRIVATE KEY")
    (['127.0.0.1', 'backstop.ns.svc'], True)
    """
    now = now or _now()
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    end = min(now + datetime.timedelta(days=LEAF_DAYS), ca.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hostnames]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _pem(cert), _key_pem(key)


def fresh(hostnames: Sequence[str], now: datetime.datetime | None = None) -> Certificates:
    """A new CA and a leaf for ``hostnames`` it signs."""
    ca, ca_key = new_ca(now)
    cert, key = issue_leaf(hostnames, ca, ca_key, now)
    return Certificates(ca_bundle=ca, ca_key=ca_key, cert=cert, key=key)


def due(cert: x509.Certificate, now: datetime.datetime | None = None) -> bool:
    """Whether less than a third of ``cert``'s life is left (or it has ended)."""
    now = now or _now()
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < life / 3


def _signs(ca: x509.Certificate, leaf: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _holds_key(ca: x509.Certificate, key_pem: bytes) -> bool:
    """Whether ``key_pem`` is the key of ``ca`` (an empty or foreign key is not)."""
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return isinstance(key, ec.EllipticCurvePrivateKey) and key.public_key() == ca.public_key()


def _serves(
    leaf: x509.Certificate,
    cas: Sequence[x509.Certificate],
    hostnames: Sequence[str],
    now: datetime.datetime,
) -> bool:
    """Whether ``leaf`` may be served now: in its validity, naming exactly ``hostnames``,
    signed by one of ``cas``."""
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        return False
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    if [str(n.value) for n in sans] != [str(_san(h).value) for h in hostnames]:
        return False
    return any(_signs(ca, leaf) for ca in cas)


def renewed(
    current: Certificates | None, hostnames: Sequence[str], now: datetime.datetime | None = None
) -> Certificates | None:
    """What should replace ``current`` now, or ``None`` while nothing is due (the module
    docstring says when what is renewed); ``None`` for ``current``: :func:`fresh` ones."""
    now = now or _now()
    if current is None:
        return fresh(hostnames, now)
    try:
        bundle = x509.load_pem_x509_certificates(current.ca_bundle)
        leaf = x509.load_pem_x509_certificate(current.cert)
    except ValueError:
        return fresh(hostnames, now)
    cas = [ca for ca in bundle if ca.not_valid_after_utc > now]
    changed = len(cas) != len(bundle)  # an expired CA leaves the bundle
    ca_key = current.ca_key
    if not cas or not _holds_key(cas[0], ca_key) or due(cas[0], now):
        ca_pem, ca_key = new_ca(now)
        cas = [x509.load_pem_x509_certificate(ca_pem), *cas]
        changed = True
    newest = cas[0]
    published = now - (newest.not_valid_before_utc + BACKDATE) >= datetime.timedelta(
        seconds=PUBLISH_SECONDS
    )
    cert, key = current.cert, current.key
    if not _serves(leaf, cas, hostnames, now) or (
        published and (due(leaf, now) or not _signs(newest, leaf))
    ):
        cert, key = issue_leaf(hostnames, _pem(newest), ca_key, now)
        changed = True
    if not changed:
        return None
    return Certificates(b"".join(_pem(ca) for ca in cas), ca_key, cert, key)
