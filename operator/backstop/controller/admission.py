"""The validating admission webhook: Kopf serves it, :mod:`backstop.domain.admission` decides.

``kubectl apply`` of a StreamTopology the operator would mark ``InvalidSpec`` (a cycle, an
unknown input, a negative CPU, an unknown algorithm, a bound not above the restart time, an
unknown field) is refused at once with one line naming the field. The handler is Kopf's
(``@kopf.on.validate``, registered at startup only when a webhook port is given) and Kopf
runs the HTTPS server (:class:`~backstop.controller.webhookserver.RotatingWebhookServer`);
the operator keeps the ``ValidatingWebhookConfiguration`` up to date itself
(:mod:`backstop.k8s.webhookconfig`, Kopf's managed mode off): the server writes the webhook
entry each time it announces a client config, at start and whenever its CA bundle changes.
Every process serving admission writes it, the leader and each standby alike; the entries
they write are the same. Unless ``persistent``, a process that stops empties ``webhooks``.
With cert-manager's certificates the server's ``caBundle`` is the ``ca.crt`` of the Secret
cert-manager injects from (its annotation on the configuration), so both write the same CA.

Scope and failure policy (docs/admission.md): only CREATE and UPDATE of
``streamtopologies`` (never ``/status``, never Pods, ConfigMaps or RecoveryPlans), and
``failurePolicy: Ignore``: while no operator answers, changes are admitted as before and the
operator marks a bad spec ``InvalidSpec`` when it is back. Recovery writes only status and
other kinds, so the webhook can never block it; an update that leaves the spec alone (the
operator's own annotations, its finalizer) is always admitted. An operator that watches
some namespaces only gives its webhook a ``namespaceSelector`` naming them
(:mod:`backstop.k8s.webhookscope`): the API server does not call it for other namespaces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import kopf
from kubernetes import client

from backstop.controller.settings import settings
from backstop.controller.webhookserver import (
    Publish,
    RotatingWebhookServer,
    Served,
    Source,
    directory_source,
)
from backstop.domain.admission import admission_problem, admission_warnings
from backstop.domain.constants import GROUP, PLURAL, VERSION
from backstop.domain.spec import spec_hash
from backstop.k8s.cluster import ClusterUnavailable, api_client
from backstop.k8s.webhookcert import Certificates, renewed
from backstop.k8s.webhookconfig import validating_webhook, write_webhooks
from backstop.k8s.webhookscope import namespace_selector, server_version
from backstop.k8s.webhooksecret import owner_reference, synced

logger = logging.getLogger(__name__)

CONFIGURATION = f"backstop.{GROUP}"
"""Default name of the ValidatingWebhookConfiguration the operator keeps up to date."""
HANDLER_ID = "spec"
"""The validating handler's id: the last segment of the path the API server calls."""
OPERATIONS: tuple[Literal["CREATE", "UPDATE"], ...] = ("CREATE", "UPDATE")
"""What the webhook judges: creates and updates (never deletes, never ``/status``)."""


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
    read again every minute and served when they change."""
    cert_secret: str | None = None
    """``namespace/name`` of a Secret holding the CA and serving certificate shared by
    replicas (created on first use, renewed when due); none: each process makes its own."""
    configuration: str | None = CONFIGURATION
    """The ValidatingWebhookConfiguration the operator keeps up to date; ``None``: left
    alone (configured by hand)."""
    persistent: bool = False
    """Keep the webhook registered when this process stops (other replicas still serve)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces the operator watches (none: every namespace); the webhooks are
    called for these only (:func:`scope`)."""

    def hostnames(self) -> list[str]:
        """The names the API server may call this server by (the certificate's SANs)."""
        if self.service:
            ns, name = self.service.split("/", 1)
            return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}"]
        return [self.host or self.addr]


def validate(body: kopf.Body, warnings: list[str] | None = None, **kwargs: Any) -> None:
    """Refuse a create/update whose spec the operator would refuse (one line, naming the
    field); admit the others with their Warnings (Kopf's ``warnings``, which the API server
    passes on to the client: ``kubectl`` prints each as ``Warning: ...``)."""
    old, operation = kwargs.get("old"), kwargs.get("operation")
    meta = body.get("metadata", {})
    old_spec = old.get("spec") if old and operation == "UPDATE" else None
    problem = admission_problem(
        body.get("spec"),
        name=meta.get("name"),
        annotations=meta.get("annotations") or {},
        old_spec=old_spec,
        old_annotations=(old.get("metadata", {}).get("annotations") or {}) if old else None,
        old_running=old_spec is not None and _running(old or {}, old_spec),
        allow_node_local_store=settings().allow_node_local_store,
        default_image=settings().task_image,
    )
    if problem is not None:
        raise kopf.AdmissionError(problem, code=422)
    if warnings is not None:
        warnings.extend(admission_warnings(body.get("spec"), old_spec=old_spec))


def _running(old: Mapping[str, Any], old_spec: Mapping[str, Any]) -> bool:
    """Whether the stored spec is the one the topology's pods run: its plan was made from
    it (``status.plan.specHash``) and placed. When a later edit was refused by the operator
    (no webhook answered then), the stored spec is that edit, and the operator's own check
    against its plan's spec decides."""
    plan = (old.get("status") or {}).get("plan") or {}
    return bool(plan.get("assignment")) and plan.get("specHash") == spec_hash(dict(old_spec))


def register(registry: kopf.OperatorRegistry, webhook: Webhook) -> None:
    """Register :func:`validate` for CREATE/UPDATE of StreamTopologies (not ``/status``)."""
    kopf.on.validate(
        group=GROUP,
        version=VERSION,
        plural=PLURAL,
        id=HANDLER_ID,
        operations=list(OPERATIONS),
        ignore_failures=True,
        persistent=webhook.persistent,
        registry=registry,
    )(validate)


def certificate_source(webhook: Webhook) -> Source:
    """Where the server's certificates come from: cert-manager's files, the Secret the
    replicas share, or (neither given) a CA and leaf of this process's own."""
    if webhook.cert_dir:
        return directory_source(webhook.cert_dir)
    if webhook.cert_secret:
        ns, name = webhook.cert_secret.split("/", 1)
        owner: list[dict[str, str] | None] = [None]  # looked up until found, then kept

        def shared() -> Served:
            with api_client() as api:
                owner[0] = owner[0] or owner_reference(api, webhook.configuration)
                certs = synced(client.CoreV1Api(api), ns, name, webhook.hostnames(), owner[0])
            return Served(certs.cert, certs.key, certs.ca_bundle)

        return shared
    own: list[Certificates] = []

    def private() -> Served:
        new = renewed(own[-1] if own else None, webhook.hostnames())
        if new is not None:
            own[:] = [new]
        return Served(own[-1].cert, own[-1].key, own[-1].ca_bundle)

    return private


def publisher(webhook: Webhook, selector: dict[str, Any] | None) -> Publish | None:
    """What the server calls with each client config it announces: write the webhook
    entry into ``webhook.configuration`` (none: nothing to write), limited by ``selector``;
    when it stops, empty ``webhooks`` unless ``persistent`` (other replicas still serve)."""
    name = webhook.configuration
    if name is None:
        return None

    def publish(config: kopf.WebhookClientConfig, serving: bool) -> None:
        if not serving and webhook.persistent:
            return  # the entry stays as written
        entry = validating_webhook(
            config,
            configuration=name,
            handler_id=HANDLER_ID,
            resource=(GROUP, VERSION, PLURAL),
            operations=OPERATIONS,
            namespace_selector=selector,
        )
        with api_client() as api:
            write_webhooks(api, name, [entry] if serving else [], create=serving)
        logger.info("webhook: wrote configuration %s (%s)", name, "serving" if serving else "off")

    return publish


def build_server(webhook: Webhook, selector: dict[str, Any] | None = None) -> kopf.WebhookServer:
    """Kopf's HTTPS server with the certificates the configuration asks for, renewed and
    reloaded while it runs (:mod:`backstop.controller.webhookserver`), writing the webhook
    configuration limited by ``selector`` (:func:`publisher`)."""
    return RotatingWebhookServer(
        source=certificate_source(webhook),
        service=webhook.service,
        addr=webhook.addr,
        port=webhook.port,
        host=webhook.host or webhook.addr,
        publish=publisher(webhook, selector),
    )


def scope(webhook: Webhook) -> dict[str, Any] | None:
    """The ``namespaceSelector`` of the watched namespaces, where the API server labels
    namespaces with their names (``None``: the webhook is called for every namespace)."""
    if not webhook.namespaces:
        return None
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
    return selector


def configure(
    settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry, webhook: Webhook
) -> None:
    """Serve admission from this operator: the handler, and the server that writes the
    webhook configuration, limited to the watched namespaces where the API server allows it
    (Kopf's managed mode stays off: the operator writes the configuration itself)."""
    register(registry, webhook)
    settings.admission.server = build_server(webhook, scope(webhook))
    settings.admission.managed = None


def serve_while_standby(
    webhook: Webhook, *, namespaces: Collection[str], clusterwide: bool, scanning: bool
) -> Callable[[threading.Event], None]:
    """What a standby replica runs until it leads: admission only, in its own Kopf.

    With leader election only the leader runs the operator's handlers, but every replica
    answers admission requests behind the Service, so losing the leader never leaves the
    webhook without a server. The standby's Kopf has a registry with the validating handler
    alone (it watches nothing) and runs on while the replica leads (the leader's Kopf leaves
    the port to it, :func:`backstop.k8s.leader.run_elected`) until ``stop`` is set.

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
