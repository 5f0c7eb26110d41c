"""``backstop operator`` and ``backstop crd``: run the controller, print its CRDs."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlparse

import typer

if TYPE_CHECKING:
    from backstop.controller.metrics import OperatorMetrics

LOG_LEVELS = ("debug", "info", "warning", "error")


def operator(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch this namespace (repeatable)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace.")
    ] = False,
    liveness: Annotated[
        str, typer.Option(help="Liveness endpoint URL ('' to disable).")
    ] = "http://0.0.0.0:8080/healthz",
    log_format: Annotated[
        str, typer.Option(help="Log format: json (structured) or plain.")
    ] = "json",
    log_level: Annotated[str, typer.Option(help=f"One of {', '.join(LOG_LEVELS)}.")] = "info",
    kubeconfig: Annotated[
        str | None, typer.Option(envvar="KUBECONFIG", help="Path to a kubeconfig.")
    ] = None,
    grace_period_seconds: Annotated[
        float | None,
        typer.Option(
            min=0,
            envvar="BACKSTOP_GRACE_PERIOD_SECONDS",
            help="Default spec.recovery.gracePeriodSeconds for topologies that omit it.",
        ),
    ] = None,
    utilization_cap: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=1,
            envvar="BACKSTOP_UTILIZATION_CAP",
            help="Default spec.recovery.utilizationCap for topologies that omit it.",
        ),
    ] = None,
    recoveryplan_history: Annotated[
        int | None,
        typer.Option(
            min=2,
            envvar="BACKSTOP_RECOVERYPLAN_HISTORY",
            help="RecoveryPlans kept per topology (the newest; older ones are deleted)."
            "  [default: 20]",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            envvar="BACKSTOP_METRICS_PORT",
            help="Serve Prometheus /metrics on this port (every replica; unset: no endpoint).",
        ),
    ] = None,
    cluster_scanning: Annotated[
        bool,
        typer.Option(
            help=(
                "Let Kopf observe Namespaces and CRDs cluster-wide (needs list/watch on both);"
                " --no-cluster-scanning serves the given namespaces and the CRDs present at"
                " startup, so namespaced RBAC suffices."
            ),
        ),
    ] = True,
    leader_elect: Annotated[
        bool,
        typer.Option(
            envvar="BACKSTOP_LEADER_ELECT",
            help=(
                "Run as one of several replicas: act only while holding a coordination.k8s.io"
                " Lease, wait as a standby otherwise, exit when the Lease is lost."
            ),
        ),
    ] = False,
    leader_elect_namespace: Annotated[
        str | None,
        typer.Option(
            envvar="BACKSTOP_OPERATOR_NAMESPACE",
            help="Namespace of the Lease (default: the first --namespace, else 'default').",
        ),
    ] = None,
    leader_elect_name: Annotated[
        str, typer.Option(help="Name of the Lease (one per operator installation).")
    ] = "backstop-operator",
    lease_duration: Annotated[
        int, typer.Option(min=2, help="Seconds a standby waits for a silent leader.")
    ] = 15,
    renew_deadline: Annotated[
        int, typer.Option(min=2, help="Seconds a leader retries renewing before it exits.")
    ] = 10,
    retry_period: Annotated[
        int, typer.Option(min=1, help="Seconds between renewals and between standby attempts.")
    ] = 2,
    webhook_port: Annotated[
        int,
        typer.Option(
            min=0,
            max=65535,
            envvar="BACKSTOP_WEBHOOK_PORT",
            help="Serve the validating admission webhook on this port (0: no webhook).",
        ),
    ] = 0,
    webhook_addr: Annotated[
        str, typer.Option(envvar="BACKSTOP_WEBHOOK_ADDR", help="Address the webhook listens on.")
    ] = "127.0.0.1",
    webhook_host: Annotated[
        str | None,
        typer.Option(
            envvar="BACKSTOP_WEBHOOK_HOST",
            help="Host the API server calls (https://HOST:PORT/); default: --webhook-addr.",
        ),
    ] = None,
    webhook_service: Annotated[
        str | None,
        typer.Option(
            envvar="BACKSTOP_WEBHOOK_SERVICE",
            help="NAMESPACE/NAME of a Service (port 443) to the operator pods that the API "
            "server calls instead of a URL.",
        ),
    ] = None,
    webhook_cert_dir: Annotated[
        str | None,
        typer.Option(
            envvar="BACKSTOP_WEBHOOK_CERT_DIR",
            help="Directory with tls.crt, tls.key (and ca.crt), e.g. from cert-manager; "
            "default: a self-signed certificate.",
        ),
    ] = None,
    webhook_cert_secret: Annotated[
        str | None,
        typer.Option(
            envvar="BACKSTOP_WEBHOOK_CERT_SECRET",
            help="NAMESPACE/NAME of a Secret that keeps the self-signed certificate, shared "
            "by every replica (created on first use).",
        ),
    ] = None,
    webhook_configuration: Annotated[
        str,
        typer.Option(
            envvar="BACKSTOP_WEBHOOK_CONFIGURATION",
            help="ValidatingWebhookConfiguration the operator keeps up to date ('': none).",
        ),
    ] = "backstop.streams.backstop.dev",
) -> None:
    """Run the Backstop operator (Kopf) until interrupted.

    It reconciles StreamTopology objects: plans backups and placement against the
    live Ready nodes, creates one pinned pod per task, and keeps the status up to date.
    """
    if not namespace and not all_namespaces:
        typer.echo("error: pass --namespace NAME (repeatable) or --all-namespaces", err=True)
        raise typer.Exit(2)
    if log_level not in LOG_LEVELS:
        typer.echo(f"error: --log-level must be one of {', '.join(LOG_LEVELS)}", err=True)
        raise typer.Exit(2)
    if log_format not in ("json", "plain"):
        typer.echo("error: --log-format must be json or plain", err=True)
        raise typer.Exit(2)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    # Operator-wide recovery defaults (Helm values recovery.*), exported for the handlers.
    if grace_period_seconds is not None:
        os.environ["BACKSTOP_GRACE_PERIOD_SECONDS"] = str(grace_period_seconds)
    if utilization_cap is not None:
        if utilization_cap == 0:
            typer.echo("error: --utilization-cap must be in (0, 1]", err=True)
            raise typer.Exit(2)
        os.environ["BACKSTOP_UTILIZATION_CAP"] = str(utilization_cap)
    if recoveryplan_history is not None:
        os.environ["BACKSTOP_RECOVERYPLAN_HISTORY"] = str(recoveryplan_history)
    for ref, flag in ((webhook_service, "service"), (webhook_cert_secret, "cert-secret")):
        if ref is not None and ref.count("/") != 1:
            typer.echo(f"error: --webhook-{flag} must be NAMESPACE/NAME, got {ref!r}", err=True)
            raise typer.Exit(2)
    if metrics_port is not None:
        os.environ["BACKSTOP_METRICS_PORT"] = str(metrics_port)
    listens = _listens(liveness, webhook_addr if webhook_port else None, webhook_port)
    problem = listen_problem(listens) if listens is not None else "--liveness must be a URL"
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    import kopf

    import backstop.controller.handlers  # noqa: F401  (registers the handlers)
    from backstop.controller import admission
    from backstop.k8s.cluster import ClusterUnavailable, api_client
    from backstop.k8s.leader import Election, run_elected

    metrics = _serve_metrics()

    kopf.configure(
        verbose=log_level == "debug",
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.PLAIN,
    )
    logging.getLogger().setLevel(log_level.upper())
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = not cluster_scanning
    webhook = None
    if webhook_port:
        webhook = admission.Webhook(
            port=webhook_port,
            addr=webhook_addr,
            host=webhook_host,
            service=webhook_service,
            cert_dir=webhook_cert_dir,
            cert_secret=webhook_cert_secret,
            configuration=webhook_configuration or None,
            persistent=leader_elect,  # one replica stopping must not unregister the others
        )
        admission.configure(settings, kopf.get_default_registry(), webhook)

    def run() -> None:
        metrics.leader.set(1)
        kopf.run(
            memo=kopf.Memo(metrics=metrics),
            settings=settings,
            standalone=True,
            clusterwide=all_namespaces,
            namespaces=[] if all_namespaces else list(namespace or []),
            liveness_endpoint=liveness or None,
        )

    try:  # a missing kubeconfig is one line and exit 2, not a Kopf that retries forever
        api = api_client()
    except ClusterUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if not leader_elect:
        run()
        return
    election = Election(
        namespace=leader_elect_namespace or (namespace or ["default"])[0],
        name=leader_elect_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
    )
    problem = election.problem()
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    standby = None
    if webhook is not None:
        standby = admission.serve_while_standby(
            webhook,
            namespaces=list(namespace or []),
            clusterwide=all_namespaces,
            scanning=cluster_scanning,
        )
    run_elected(api, election, run, health=liveness or None, standby=standby)


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
) -> None:
    """Print the CustomResourceDefinitions (generated from the pydantic models)."""
    from backstop.k8s.crd import CRDS, render

    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for filename, build in CRDS.items():
            (write / filename).write_text(render(build()))
            typer.echo(f"wrote {write / filename}")
        return
    typer.echo("---\n".join(render(build()) for build in CRDS.values()), nl=False)


def register(app: typer.Typer) -> None:
    """Add ``operator`` and ``crd`` to the CLI."""
    app.command("operator")(operator)
    app.command("crd")(crd)
