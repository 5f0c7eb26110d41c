"""``backstop operator`` and ``backstop crd``: run the controller, print its CRDs."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlparse

import typer

from backstop.cli._operator_options import (
    AllNamespacesOpt,
    CapacityAllNamespacesOpt,
    ClusterScanningOpt,
    GracePeriodOpt,
    KubeconfigOpt,
    LeaderElectNameOpt,
    LeaderElectNamespaceOpt,
    LeaderElectOpt,
    LeaseDurationOpt,
    LivenessOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsPortOpt,
    NamespaceOpt,
    OperatorOptions,
    RecoveryPlanHistoryOpt,
    RenewDeadlineOpt,
    RetryPeriodOpt,
    UtilizationCapOpt,
    WebhookAddrOpt,
    WebhookCertDirOpt,
    WebhookCertSecretOpt,
    WebhookConfigurationOpt,
    WebhookHostOpt,
    WebhookPortOpt,
    WebhookServiceOpt,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from kopf import OperatorSettings
    from kubernetes.client import ApiClient

    from backstop.controller.admission import Webhook
    from backstop.controller.metrics import OperatorMetrics


def operator(
    namespace: NamespaceOpt = None,
    all_namespaces: AllNamespacesOpt = False,
    capacity_all_namespaces: CapacityAllNamespacesOpt = False,
    liveness: LivenessOpt = "http://0.0.0.0:8080/healthz",
    log_format: LogFormatOpt = "json",
    log_level: LogLevelOpt = "info",
    kubeconfig: KubeconfigOpt = None,
    grace_period_seconds: GracePeriodOpt = None,
    utilization_cap: UtilizationCapOpt = None,
    recoveryplan_history: RecoveryPlanHistoryOpt = None,
    metrics_port: MetricsPortOpt = None,
    cluster_scanning: ClusterScanningOpt = True,
    leader_elect: LeaderElectOpt = False,
    leader_elect_namespace: LeaderElectNamespaceOpt = None,
    leader_elect_name: LeaderElectNameOpt = "backstop-operator",
    lease_duration: LeaseDurationOpt = 15,
    renew_deadline: RenewDeadlineOpt = 10,
    retry_period: RetryPeriodOpt = 2,
    webhook_port: WebhookPortOpt = 0,
    webhook_addr: WebhookAddrOpt = "127.0.0.1",
    webhook_host: WebhookHostOpt = None,
    webhook_service: WebhookServiceOpt = None,
    webhook_cert_dir: WebhookCertDirOpt = None,
    webhook_cert_secret: WebhookCertSecretOpt = None,
    webhook_configuration: WebhookConfigurationOpt = "backstop.streams.backstop.dev",
) -> None:
    """Run the Backstop operator (Kopf) until interrupted.

    It reconciles StreamTopology objects: plans backups and placement against the
    live Ready nodes, creates one pinned pod per task, and keeps the status up to date.
    """
    options = OperatorOptions(
        namespace=list(namespace or []),
        all_namespaces=all_namespaces,
        liveness=liveness,
        log_format=log_format,
        log_level=log_level,
        kubeconfig=kubeconfig,
        grace_period_seconds=grace_period_seconds,
        utilization_cap=utilization_cap,
        recoveryplan_history=recoveryplan_history,
        metrics_port=metrics_port,
        cluster_scanning=cluster_scanning,
        leader_elect=leader_elect,
        leader_elect_namespace=leader_elect_namespace,
        leader_elect_name=leader_elect_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        webhook_port=webhook_port,
        webhook_addr=webhook_addr,
        webhook_host=webhook_host,
        webhook_service=webhook_service,
        webhook_cert_dir=webhook_cert_dir,
        webhook_cert_secret=webhook_cert_secret,
        webhook_configuration=webhook_configuration,
        capacity_all_namespaces=capacity_all_namespaces,
    )
    start(options)


def _refuse(problem: str | None) -> None:
    """Exit 2 with ``error: PROBLEM`` on one line, unless there is no problem."""
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)


def start(options: OperatorOptions) -> None:
    """Check the options and the ports, then run Kopf: at once, or while elected.

    Every check that can fail comes before Kopf starts, so a mistake is one line and
    exit 2 rather than a traceback inside Kopf's event loop or a login retried for ever.
    """
    _refuse(options.problem())
    options.export()
    webhook_addr = options.webhook_addr if options.webhook_port else None
    listens = _listens(options.liveness, webhook_addr, options.webhook_port)
    _refuse(listen_problem(listens) if listens is not None else "--liveness must be a URL")
    import kopf

    import backstop.controller.handlers  # noqa: F401  (registers the handlers)
    from backstop.k8s.cluster import ClusterUnavailable, api_client

    metrics = _serve_metrics()
    kopf.configure(
        verbose=options.log_level == "debug",
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger().setLevel(options.log_level.upper())
    # with leader election the webhook's own Kopf serves admission all along (_run_elected)
    settings, webhook = _kopf_settings(options, serve_admission=not options.leader_elect)

    def run() -> None:
        metrics.leader.set(1)
        kopf.run(
            memo=kopf.Memo(metrics=metrics, pod_namespaces=options.pod_namespaces),
            settings=settings,
            standalone=True,
            clusterwide=options.all_namespaces,
            namespaces=options.namespaces,
            liveness_endpoint=options.liveness or None,
        )

    try:  # a missing kubeconfig is one line and exit 2, not a Kopf that retries forever
        api = api_client()
    except ClusterUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if not options.leader_elect:
        run()
        return
    _run_elected(options, api, run, webhook)


def _kopf_settings(
    options: OperatorOptions, *, serve_admission: bool = True
) -> tuple[OperatorSettings, Webhook | None]:
    """Kopf's settings for these options, and the admission webhook if one is served.

    With ``serve_admission`` the webhook is registered in Kopf's default registry and its
    server added to these settings, so the operator's Kopf serves it; without (leader
    election), the operator's Kopf has neither and leaves the port to the webhook's own
    Kopf (:func:`_run_elected`).
    """
    import kopf

    from backstop.controller import admission

    settings = kopf.OperatorSettings()
    settings.scanning.disabled = not options.cluster_scanning
    if not options.webhook_port:
        return settings, None
    webhook = admission.Webhook(
        port=options.webhook_port,
        addr=options.webhook_addr,
        host=options.webhook_host,
        service=options.webhook_service,
        cert_dir=options.webhook_cert_dir,
        cert_secret=options.webhook_cert_secret,
        configuration=options.webhook_configuration or None,
        persistent=options.leader_elect,  # one replica stopping must not unregister the others
        namespaces=tuple(options.namespaces),
    )
    if serve_admission:
        admission.configure(settings, kopf.get_default_registry(), webhook)
    return settings, webhook


def _run_elected(
    options: OperatorOptions, api: ApiClient, run: Callable[[], None], webhook: Webhook | None
) -> None:
    """Run ``run`` while this replica holds the Lease; serve the webhook all along.

    The webhook's own Kopf (the validating handler alone) starts with the standby and runs
    on while this replica leads: a takeover never stops it nor binds its port again, so
    admission stays served and ``run`` starts as soon as the Lease is held.
    """
    from backstop.controller import admission
    from backstop.k8s.leader import Election, run_elected

    election = Election(
        namespace=options.lease_namespace,
        name=options.leader_elect_name,
        lease_duration=options.lease_duration,
        renew_deadline=options.renew_deadline,
        retry_period=options.retry_period,
    )
    _refuse(election.problem())
    serve = None
    if webhook is not None:
        serve = admission.serve_while_standby(
            webhook,
            namespaces=list(options.namespace),
            clusterwide=options.all_namespaces,
            scanning=options.cluster_scanning,
        )
    run_elected(api, election, run, health=options.liveness or None, serve=serve)


Listen = tuple[str, str, int]
"""``(flag, host, port)``: a port the operator listens on and the flag that chose it."""


def _listens(liveness: str, webhook_addr: str | None, webhook_port: int) -> list[Listen] | None:
    """The ports this process will listen on (``None``: ``--liveness`` is no URL)."""
    out: list[Listen] = []
    metrics = os.environ.get("BACKSTOP_METRICS_PORT", "")
    if metrics.isdigit():
        out.append(("--metrics-port", "0.0.0.0", int(metrics)))
    if webhook_addr is not None:
        out.append(("--webhook-port", webhook_addr, webhook_port))
    if liveness:
        url = urlparse(liveness)
        try:
            port = url.port or 80
        except ValueError:
            return None
        if url.scheme not in ("http", "https") or not url.hostname:
            return None
        out.append(("--liveness", url.hostname, port))
    return out


def listen_problem(listens: list[Listen]) -> str | None:
    """Why the operator could not listen on one of ``listens``, in one line, or ``None``.

    Checked before anything starts: otherwise Kopf's webhook or liveness server fails to
    bind inside its event loop and prints a traceback (and, in a standby, in a thread
    while the process waits on). Two flags may not name one port; each port is bound once
    (with ``SO_REUSEADDR``, as the servers do) and released at once.

    Examples
    --------
    >>> listen_problem([("--liveness", "0.0.0.0", 8080), ("--metrics-port", "0.0.0.0", 8080)])
    '--liveness and --metrics-port both name port 8080; choose another port'
    """
    seen: dict[int, str] = {}
    for flag, _, port in listens:
        if port in seen:
            return f"{seen[port]} and {flag} both name port {port}; choose another port"
        seen[port] = flag
    for flag, host, port in listens:
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
        except OSError as err:
            why = err.strerror or str(err)
            return f"{flag}: cannot listen on {host}:{port} ({why}); choose another port"
    return None


def _serve_metrics() -> OperatorMetrics:
    """The process's :class:`~backstop.controller.metrics.OperatorMetrics`, served on the
    configured port (before the election, so a standby answers scrapes too)."""
    from backstop.controller import metrics as module
    from backstop.controller import settings as config

    try:
        port = config.settings().metrics_port
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    metrics = module.OperatorMetrics()
    if port is not None:
        try:
            module.serve(metrics, port)
        except OSError as err:
            typer.echo(f"error: --metrics-port {port}: {err.strerror or err}", err=True)
            raise typer.Exit(2) from None
    return metrics


def crd(
    write: Annotated[
        Path | None, typer.Option(help="Write the files into this directory instead.")
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Create or upgrade them in the cluster (Helm never upgrades CRDs).",
        ),
    ] = False,
    kubeconfig: Annotated[
        str | None, typer.Option(envvar="KUBECONFIG", help="Path to a kubeconfig (--apply).")
    ] = None,
) -> None:
    """Print the CustomResourceDefinitions (generated from the pydantic models)."""
    from backstop.k8s.crd import CRDS, render

    if apply:
        _apply_crds(kubeconfig)
        return
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for filename, build in CRDS.items():
            (write / filename).write_text(render(build()))
            typer.echo(f"wrote {write / filename}")
        return
    typer.echo("---\n".join(render(build()) for build in CRDS.values()), nl=False)


def _apply_crds(kubeconfig: str | None) -> None:
    """``crd --apply``: one line per CRD; exit 1 with the reason when it cannot."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from backstop.k8s.cluster import ClusterUnavailable, api_client
    from backstop.k8s.crdapply import CrdUpgradeRefused, apply_crds

    try:
        for name, what in apply_crds(api_client(kubeconfig)):
            typer.echo(f"customresourcedefinition {name} {what}")
    except CrdUpgradeRefused as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except (ApiException, ClusterUnavailable, HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        typer.echo(f"error: cannot apply the CRDs: {reason}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    """Add ``operator`` and ``crd`` to the CLI."""
    app.command("operator")(operator)
    app.command("crd")(crd)
