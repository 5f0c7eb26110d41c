"""The validating admission webhook: Kopf serves it, :mod:`backstop.domain.admission` decides.

``kubectl apply`` of a StreamTopology the operator would mark ``InvalidSpec`` (a cycle, an
unknown input, a negative CPU, an unknown algorithm, a bound not above the restart time, an
unknown field) is refused at once with one line naming the field. The handler is Kopf's
(``@kopf.on.validate``, registered at startup only when a webhook port is given); Kopf runs
the HTTPS server and keeps the ``ValidatingWebhookConfiguration`` up to date
(``settings.admission.managed``).

Scope and failure policy (docs/admission.md): only CREATE and UPDATE of
``streamtopologies`` (never ``/status``, never Pods, ConfigMaps or RecoveryPlans), and
``failurePolicy: Ignore``: while no operator answers, changes are admitted as before and the
operator marks a bad spec ``InvalidSpec`` when it is back. Recovery writes only status and
other kinds, so the webhook can never block it; an update that leaves the spec alone (the
operator's own annotations, its finalizer) is always admitted. An operator that watches
some namespaces only gives its webhooks a ``namespaceSelector`` naming them
(:mod:`backstop.k8s.webhookscope`): the API server does not call it for other namespaces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any

import kopf
import kopf._core.engines.admission as kopf_admission

from backstop.controller.settings import settings
from backstop.domain.admission import admission_problem
from backstop.domain.constants import GROUP, PLURAL, VERSION
from backstop.k8s.cluster import ClusterUnavailable, api_client
from backstop.k8s.webhookcert import self_signed, shared_certificate
from backstop.k8s.webhookscope import namespace_selector, server_version

logger = logging.getLogger(__name__)

CONFIGURATION = f"backstop.{GROUP}"
"""Default name of the ValidatingWebhookConfiguration the operator manages."""


@dataclasses.dataclass(frozen=True)
class Webhook:
    """Where the webhook listens, how the API server reaches it and where its certificate is."""

    port: int
    addr: str = "127.0.0.1"
    """Address to listen on (``0.0.0.0`` in a pod)."""
    host: str | None = None
    """Host the API server calls (``https://host:port/``); default ``addr``."""
    service: str | None = None
    """``namespace/name`` of a Service to the operator pods: the API server calls it (port
    443) instead of a URL."""
    cert_dir: str | None = None
    """A directory with ``tls.crt``, ``tls.key`` and ``ca.crt`` (e.g. cert-manager's Secret);
    Kopf reloads them when they change."""
    cert_secret: str | None = None
    """``namespace/name`` of a Secret holding the self-signed certificate shared by replicas
    (created on first use); none: each process makes its own."""
    configuration: str | None = CONFIGURATION
    """The ValidatingWebhookConfiguration Kopf keeps up to date; ``None``: not managed."""
    persistent: bool = False
    """Keep the webhook registered when this process stops (other replicas still serve)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces the operator watches (none: every namespace); the webhooks are
    called for these only (:func:`scope_webhooks`)."""

    def hostnames(self) -> list[str]:
        """The names the API server may call this server by (the certificate's SANs)."""
        if self.service:
            ns, name = self.service.split("/", 1)
            return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}"]
        return [self.host or self.addr]


def validate(body: kopf.Body, **kwargs: Any) -> None:
    """Refuse a create/update whose spec the operator would refuse (one line, naming the field)."""
    old, operation = kwargs.get("old"), kwargs.get("operation")
    meta = body.get("metadata", {})
    problem = admission_problem(
        body.get("spec"),
        name=meta.get("name"),
        annotations=meta.get("annotations") or {},
        old_spec=old.get("spec") if old and operation == "UPDATE" else None,
        old_annotations=(old.get("metadata", {}).get("annotations") or {}) if old else None,
        allow_node_local_store=settings().allow_node_local_store,
    )
    if problem is not None:
        raise kopf.AdmissionError(problem, code=422)


def register(registry: kopf.OperatorRegistry, webhook: Webhook) -> None:
    """Register :func:`validate` for CREATE/UPDATE of StreamTopologies (not ``/status``)."""
    kopf.on.validate(
        group=GROUP,
        version=VERSION,
        plural=PLURAL,
        id="spec",
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        persistent=webhook.persistent,
        registry=registry,
    )(validate)


class ServiceWebhookServer(kopf.WebhookServer):
    """Kopf's server, announced to the API server as a Service rather than a URL."""

    def __init__(self, *, service: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service_ref = service

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        ns, name = self.service_ref.split("/", 1)
        async for config in super().__call__(fn):
            yield kopf.WebhookClientConfig(
                service=kopf.WebhookClientConfigService(namespace=ns, name=name, port=443, path=""),
                caBundle=config.get("caBundle"),
            )


def build_server(webhook: Webhook) -> kopf.WebhookServer:
    """Kopf's HTTPS server with the certificate the configuration asks for."""
    if webhook.cert_dir:
        d = Path(webhook.cert_dir)
        files = {"certfile": str(d / "tls.crt"), "pkeyfile": str(d / "tls.key")}
        if (d / "ca.crt").exists():
            files["cafile"] = str(d / "ca.crt")
    else:
        if webhook.cert_secret:
            ns, name = webhook.cert_secret.split("/", 1)
            cert, key = shared_certificate(
                api_client(), ns, name, webhook.hostnames(), owner=webhook.configuration
            )
        else:
            cert, key = self_signed(webhook.hostnames())
        d = Path(tempfile.mkdtemp(prefix="backstop-webhook-"))
        (d / "tls.crt").write_bytes(cert)
        (d / "tls.key").write_bytes(key)
        (d / "tls.key").chmod(0o600)
        files = {"certfile": str(d / "tls.crt"), "pkeyfile": str(d / "tls.key")}
    common: dict[str, Any] = {"addr": webhook.addr, "port": webhook.port, **files}
    if webhook.service:
        return ServiceWebhookServer(service=webhook.service, **common)
    return kopf.WebhookServer(host=webhook.host or webhook.addr, **common)


KOPF_BUILD_WEBHOOKS = kopf_admission.build_webhooks
"""Kopf's own builder of the managed configuration's ``webhooks``."""


def scope_webhooks(selector: dict[str, Any] | None) -> None:
    """Give every webhook Kopf writes into the managed configuration ``selector`` as its
    ``namespaceSelector`` (``None``: Kopf's webhooks as they are).

    Kopf builds the whole ``webhooks`` list each time it reconfigures (and merge-patches it
    over the old one) with no namespace selector of its own, so the selector is added to
    what its builder returns: the module attribute its configuration manager calls.
    """

    def scoped(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        webhooks = KOPF_BUILD_WEBHOOKS(*args, **kwargs)
        return [{**w, "namespaceSelector": selector} for w in webhooks]

    kopf_admission.build_webhooks = KOPF_BUILD_WEBHOOKS if selector is None else scoped


def configure(
    settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry, webhook: Webhook
) -> None:
    """Serve admission from this operator: the handler, the server and the managed
    configuration, limited to the watched namespaces where the API server allows it."""
    register(registry, webhook)
    settings.admission.server = build_server(webhook)
    settings.admission.managed = webhook.configuration
    selector = None
    if webhook.namespaces:
        try:
            version = server_version(api_client())
        except ClusterUnavailable:  # the operator says so itself, in one line
            version = None
        selector = namespace_selector(webhook.namespaces, version)
        if selector is None:
            logger.warning(
                "the API server labels no namespace with its name (before Kubernetes 1.21): "
                "the admission webhook is called for every namespace"
            )
    scope_webhooks(selector)


def serve_while_standby(
    webhook: Webhook, *, namespaces: Collection[str], clusterwide: bool, scanning: bool
) -> Callable[[threading.Event], None]:
    """What a standby replica runs until it leads: admission only, in its own Kopf.

    With leader election only the leader runs the operator's handlers, but every replica
    answers admission requests behind the Service, so losing the leader never leaves the
    webhook without a server. The standby's Kopf has a registry with the validating handler
    alone (it watches nothing) and stops when ``stop`` is set, before the leader's Kopf starts
    on the same port.

    A plain :class:`kopf.OperatorRegistry` has none of the login handlers Kopf's default
    registry comes with, so the standby's Kopf logged "Initial authentication has failed" and
    served nothing: it logs in as the leader's does (:func:`kopf.login_via_client`, the
    kubeconfig or the pod's ServiceAccount).
    """

    def serve(stop: threading.Event) -> None:
        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(kopf.login_via_client)
        settings = kopf.OperatorSettings()
        settings.scanning.disabled = not scanning
        configure(settings, registry, webhook)
        asyncio.run(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                clusterwide=clusterwide,
                namespaces=list(namespaces),
                stop_flag=stop,
            )
        )

    return serve
