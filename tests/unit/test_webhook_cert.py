"""The admission webhook's CA and serving leaf: what they are, when each is renewed, and how
replicas share them in a Secret without overwriting each other's renewal.

Real certificates (``cryptography``) throughout; time is passed in, so a renewal two years
on is judged without waiting. The Secret API is an in-memory stand-in that refuses a write
whose ``resourceVersion`` is stale (409), as the API server does.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.k8s import webhooksecret
from backstop.k8s.webhookcert import Certificates, fresh, issue_leaf, new_ca, renewed

HOSTS = ["backstop-webhook.ops.svc", "backstop-webhook.ops.svc.cluster.local", "10.0.0.7"]
T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
MINUTE = datetime.timedelta(minutes=1)


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def bundle(certs: Certificates) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(certs.ca_bundle)


def basic(c: x509.Certificate) -> x509.BasicConstraints:
    return c.extensions.get_extension_for_class(x509.BasicConstraints).value


def signs(ca: x509.Certificate, leaf: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except Exception:
        return False
    return True


def test_the_leaf_is_a_server_certificate_the_ca_signs() -> None:
    certs = fresh(HOSTS, T0)
    (ca,) = bundle(certs)
    leaf = cert(certs.cert)
    assert basic(ca).ca is True and basic(leaf).ca is False
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in sans] == HOSTS
    assert leaf.issuer == ca.subject != leaf.subject
    assert signs(ca, leaf) and not signs(leaf, leaf)
    # the keys in the bundle are the ones the certificates carry
    leaf_key = serialization.load_pem_private_key(certs.key, None)
    ca_key = serialization.load_pem_private_key(certs.ca_key, None)
    assert leaf_key.public_key() == leaf.public_key()
    assert ca_key.public_key() == ca.public_key()


def test_lifetimes_are_two_years_for_the_ca_and_90_days_for_the_leaf() -> None:
    certs = fresh(HOSTS, T0)
    (ca,) = bundle(certs)
    leaf = cert(certs.cert)
    assert ca.not_valid_after_utc == T0 + 730 * DAY
    assert leaf.not_valid_after_utc == T0 + 90 * DAY
    assert ca.not_valid_before_utc == leaf.not_valid_before_utc == T0 - 5 * MINUTE


def test_a_leaf_never_outlives_the_ca_that_signs_it() -> None:
    ca, ca_key = new_ca(T0)
    late = T0 + 700 * DAY
    leaf = cert(issue_leaf(HOSTS, ca, ca_key, late)[0])
    assert leaf.not_valid_after_utc == cert(ca).not_valid_after_utc < late + 90 * DAY


def test_nothing_is_renewed_until_a_third_of_the_leaf_s_life_is_left() -> None:
    certs = fresh(HOSTS, T0)
    assert renewed(certs, HOSTS, T0 + MINUTE) is None
    assert renewed(certs, HOSTS, T0 + 59 * DAY) is None  # 31 of 90 days left
    new = renewed(certs, HOSTS, T0 + 61 * DAY)  # 29 left
    assert new is not None
    assert (new.ca_bundle, new.ca_key) == (certs.ca_bundle, certs.ca_key)
    assert new.cert != certs.cert and new.key != certs.key
    leaf = cert(new.cert)
    assert signs(bundle(certs)[0], leaf)
    assert leaf.not_valid_after_utc == T0 + 151 * DAY
    assert renewed(new, HOSTS, T0 + 62 * DAY) is None


def test_other_hostnames_get_a_new_leaf_at_once() -> None:
    certs = fresh(HOSTS, T0)
    new = renewed(certs, ["other.ops.svc"], T0 + MINUTE)
    assert new is not None and new.ca_bundle == certs.ca_bundle
    sans = cert(new.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in sans] == ["other.ops.svc"]


def test_a_ca_rollover_keeps_both_cas_trusted_until_the_old_one_expires() -> None:
    start = fresh(HOSTS, T0)
    (old_ca,) = bundle(start)
    # the CA has 243 of 730 days left after 487 days; the leaf is one of that time
    leaf_pem, leaf_key = issue_leaf(HOSTS, start.ca_bundle, start.ca_key, T0 + 480 * DAY)
    current = Certificates(start.ca_bundle, start.ca_key, leaf_pem, leaf_key)
    assert renewed(current, HOSTS, T0 + 486 * DAY) is None

    roll = T0 + 488 * DAY
    rolled = renewed(current, HOSTS, roll)
    assert rolled is not None
    new_ca, kept_ca = bundle(rolled)
    assert kept_ca == old_ca and new_ca != old_ca and basic(new_ca).ca
    assert rolled.ca_key != start.ca_key
    assert rolled.cert == leaf_pem, "the served leaf stays until the new CA is published"

    assert renewed(rolled, HOSTS, roll + 9 * MINUTE) is None
    moved = renewed(rolled, HOSTS, roll + 11 * MINUTE)
    assert moved is not None
    assert bundle(moved) == [new_ca, old_ca] and moved.ca_key == rolled.ca_key
    assert signs(new_ca, cert(moved.cert)) and not signs(old_ca, cert(moved.cert))

    assert renewed(moved, HOSTS, roll + 50 * DAY) is None  # both CAs still valid
    later = T0 + 729 * DAY  # the next leaves until then keep the old CA trusted
    kept = Certificates(
        moved.ca_bundle,
        moved.ca_key,
        *issue_leaf(HOSTS, moved.ca_bundle, moved.ca_key, later - DAY),
    )
    assert renewed(kept, HOSTS, later) is None
    pruned = renewed(kept, HOSTS, T0 + 731 * DAY)
    assert pruned is not None and bundle(pruned) == [new_ca]
    assert pruned.cert == kept.cert


def test_a_ca_key_that_is_not_the_ca_s_brings_a_new_ca() -> None:
    certs = fresh(HOSTS, T0)
    foreign = fresh(HOSTS, T0).ca_key
    new = renewed(Certificates(certs.ca_bundle, foreign, certs.cert, certs.key), HOSTS, T0)
    assert new is not None and len(bundle(new)) == 2 and new.ca_key not in (foreign, certs.ca_key)
    assert new.cert == certs.cert  # still trusted through the old CA


def legacy_self_signed() -> tuple[bytes, bytes]:
    """A certificate as an older operator made it: self-signed, CA:TRUE, ten years."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0])])
    made = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(T0 - DAY)
        .not_valid_after(T0 + 3650 * DAY)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName(HOSTS[0]),
                    x509.DNSName(HOSTS[1]),
                    x509.IPAddress(ipaddress.ip_address(HOSTS[2])),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return made.public_bytes(serialization.Encoding.PEM), key_pem


def secret(data: dict[str, str], version: int = 1) -> client.V1Secret:
    return client.V1Secret(
        metadata=client.V1ObjectMeta(name="tls", resource_version=str(version)), data=data
    )


def test_an_older_secret_keeps_its_certificate_trusted_while_a_ca_takes_over() -> None:
    old_cert, old_key = legacy_self_signed()
    data = {
        "tls.crt": base64.b64encode(old_cert).decode(),
        "tls.key": base64.b64encode(old_key).decode(),
    }
    current = webhooksecret.decode(secret(data))
    assert current is not None
    rolled = renewed(current, HOSTS, T0)
    assert rolled is not None
    new_ca, old = bundle(rolled)
    assert old == cert(old_cert) and basic(new_ca).ca
    assert rolled.cert == old_cert
    moved = renewed(rolled, HOSTS, T0 + 11 * MINUTE)
    assert moved is not None and signs(new_ca, cert(moved.cert))
    assert basic(cert(moved.cert)).ca is False


class Secrets:
    """The Secret API of one namespace, in memory: ``resourceVersion`` preconditions hold."""

    def __init__(self) -> None:
        self.stored: client.V1Secret | None = None
        self.version = 0
        self.patches: list[dict[str, Any]] = []
        self.before_patch: list[Any] = []  # run at the next patch, as another replica racing

    def read_namespaced_secret(self, name: str, namespace: str) -> client.V1Secret:
        if self.stored is None:
            raise ApiException(status=404, reason="Not Found")
        return client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name,
                resource_version=str(self.version),
                owner_references=self.stored.metadata.owner_references,
            ),
            data=dict(self.stored.data),
        )

    def create_namespaced_secret(self, namespace: str, body: client.V1Secret) -> None:
        if self.stored is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self.stored, self.version = body, self.version + 1

    def patch_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any]) -> Any:
        hooks, self.before_patch = self.before_patch, []
        for hook in hooks:
            hook()
        self.patches.append(body)
        assert self.stored is not None
        wanted = body.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.stored.data = {**self.stored.data, **body.get("data", {})}
        self.version += 1
        return self.read_namespaced_secret(name, namespace)


def stored(api: Secrets) -> Certificates:
    assert api.stored is not None
    certs = webhooksecret.decode(api.stored)
    assert certs is not None
    return certs


def test_the_first_replica_creates_the_secret_and_the_others_read_it() -> None:
    api = Secrets()
    first = webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0)
    assert api.stored is not None and api.stored.type == "kubernetes.io/tls"
    assert sorted(api.stored.data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert stored(api) == first
    assert webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0 + MINUTE) == first
    assert api.patches == []


def test_a_renewal_is_written_with_the_version_it_was_judged_on() -> None:
    api = Secrets()
    first = webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0)
    version = api.version
    new = webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0 + 61 * DAY)
    assert new != first and stored(api) == new
    (patch,) = api.patches
    assert patch["metadata"]["resourceVersion"] == str(version)


def test_a_replica_that_loses_a_renewal_race_serves_the_winner_s() -> None:
    api = Secrets()
    webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0)
    due = T0 + 61 * DAY
    won: list[Certificates] = []
    api.before_patch.append(
        lambda: won.append(webhooksecret.synced(api, "ops", "tls", HOSTS, None, due))
    )
    lost = webhooksecret.synced(api, "ops", "tls", HOSTS, None, due)
    assert won and lost == won[0] == stored(api)
    assert len(api.patches) == 2, "the winner's write and the loser's refused one"


def test_a_create_that_loses_the_race_reads_the_winner_s() -> None:
    theirs = fresh(HOSTS, T0)

    class Racing(Secrets):
        def read_namespaced_secret(self, name: str, namespace: str) -> client.V1Secret:
            if self.stored is None and not getattr(self, "raced", False):
                self.raced = True
                err = ApiException(status=404, reason="Not Found")
                self.stored = client.V1Secret(
                    metadata=client.V1ObjectMeta(name=name), data=webhooksecret.encode(theirs)
                )
                raise err
            return super().read_namespaced_secret(name, namespace)

    api = Racing()
    assert webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0 + MINUTE) == theirs


def test_a_secret_that_keeps_conflicting_is_served_as_it_is() -> None:
    api = Secrets()
    first = webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0)

    def bump() -> None:
        api.version += 1
        api.before_patch.append(bump)

    api.before_patch.append(bump)
    served = webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0 + 61 * DAY)
    assert served == first == stored(api)
    assert len(api.patches) == webhooksecret.ATTEMPTS


def test_an_api_error_other_than_a_conflict_is_raised() -> None:
    api = Secrets()
    webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0)

    def forbid() -> None:
        raise ApiException(status=403, reason="Forbidden")

    api.before_patch.append(forbid)
    with pytest.raises(ApiException):
        webhooksecret.synced(api, "ops", "tls", HOSTS, None, T0 + 61 * DAY)
