"""The options of ``backstop operator``: their declarations, and their values checked.

The typer declarations live here as ``Annotated`` aliases so that the command's signature
stays one line per option; :class:`OperatorOptions` holds the values the command received,
says what is wrong with them (one line, for exit 2) and exports the operator-wide recovery
defaults to the environment the controller's settings read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

import typer

LOG_LEVELS = ("debug", "info", "warning", "error")

NamespaceOpt = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", help="Watch this namespace (repeatable)."),
]
AllNamespacesOpt = Annotated[
    bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace.")
]
CapacityAllNamespacesOpt = Annotated[
    bool,
    typer.Option(
        envvar="BACKSTOP_CAPACITY_ALL_NAMESPACES",
        help=(
            "Count the pods of every namespace in each node's free capacity (a cluster-wide"
            " pod list/watch); otherwise only the watched namespaces' pods are read and"
            " counted. Implied by --all-namespaces."
        ),
    ),
]
LivenessOpt = Annotated[str, typer.Option(help="Liveness endpoint URL ('' to disable).")]
LogFormatOpt = Annotated[str, typer.Option(help="Log format: json (structured) or plain.")]
LogLevelOpt = Annotated[str, typer.Option(help=f"One of {', '.join(LOG_LEVELS)}.")]
KubeconfigOpt = Annotated[
    str | None, typer.Option(envvar="KUBECONFIG", help="Path to a kubeconfig.")
]
GracePeriodOpt = Annotated[
    float | None,
    typer.Option(
        min=0,
        envvar="BACKSTOP_GRACE_PERIOD_SECONDS",
        help="Default spec.recovery.gracePeriodSeconds for topologies that omit it.",
    ),
]
UtilizationCapOpt = Annotated[
    float | None,
    typer.Option(
        min=0,
        max=1,
        envvar="BACKSTOP_UTILIZATION_CAP",
        help="Default spec.recovery.utilizationCap for topologies that omit it.",
    ),
]
RecoveryPlanHistoryOpt = Annotated[
    int | None,
    typer.Option(
        min=2,
        envvar="BACKSTOP_RECOVERYPLAN_HISTORY",
        help="RecoveryPlans kept per topology (the newest; older ones are deleted).  [default: 20]",
    ),
]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        envvar="BACKSTOP_METRICS_PORT",
        help="Serve Prometheus /metrics on this port (every replica; unset: no endpoint).",
    ),
]
ClusterScanningOpt = Annotated[
    bool,
    typer.Option(
        help=(
            "Let Kopf observe Namespaces and CRDs cluster-wide (needs list/watch on both);"
            " --no-cluster-scanning serves the given namespaces and the CRDs present at"
            " startup, so namespaced RBAC suffices."
        ),
    ),
]
LeaderElectOpt = Annotated[
    bool,
    typer.Option(
        envvar="BACKSTOP_LEADER_ELECT",
        help=(
            "Run as one of several replicas: act only while holding a coordination.k8s.io"
            " Lease, wait as a standby otherwise, exit when the Lease is lost."
        ),
    ),
]
LeaderElectNamespaceOpt = Annotated[
    str | None,
    typer.Option(
        envvar="BACKSTOP_OPERATOR_NAMESPACE",
        help="Namespace of the Lease (default: the first --namespace, else 'default').",
    ),
]
LeaderElectNameOpt = Annotated[
    str, typer.Option(help="Name of the Lease (one per operator installation).")
]
LeaseDurationOpt = Annotated[
    int, typer.Option(min=2, help="Seconds a standby waits for a silent leader.")
]
RenewDeadlineOpt = Annotated[
    int, typer.Option(min=2, help="Seconds a leader retries renewing before it exits.")
]
RetryPeriodOpt = Annotated[
    int, typer.Option(min=1, help="Seconds between renewals and between standby attempts.")
]
WebhookPortOpt = Annotated[
    int,
    typer.Option(
        min=0,
        max=65535,
        envvar="BACKSTOP_WEBHOOK_PORT",
        help="Serve the validating admission webhook on this port (0: no webhook).",
    ),
]
WebhookAddrOpt = Annotated[
    str, typer.Option(envvar="BACKSTOP_WEBHOOK_ADDR", help="Address the webhook listens on.")
]
WebhookHostOpt = Annotated[
    str | None,
    typer.Option(
        envvar="BACKSTOP_WEBHOOK_HOST",
        help="Host the API server calls (https://HOST:PORT/); default: --webhook-addr.",
    ),
]
WebhookServiceOpt = Annotated[
    str | None,
    typer.Option(
        envvar="BACKSTOP_WEBHOOK_SERVICE",
        help="NAMESPACE/NAME of a Service (port 443) to the operator pods that the API "
        "server calls instead of a URL.",
    ),
]
WebhookCertDirOpt = Annotated[
    str | None,
    typer.Option(
        envvar="BACKSTOP_WEBHOOK_CERT_DIR",
        help="Directory with tls.crt, tls.key (and ca.crt), e.g. from cert-manager; "
        "default: a self-signed certificate.",
    ),
]
WebhookCertSecretOpt = Annotated[
    str | None,
    typer.Option(
        envvar="BACKSTOP_WEBHOOK_CERT_SECRET",
        help="NAMESPACE/NAME of a Secret that keeps the self-signed certificate, shared "
        "by every replica (created on first use).",
    ),
]
WebhookConfigurationOpt = Annotated[
    str,
    typer.Option(
        envvar="BACKSTOP_WEBHOOK_CONFIGURATION",
        help="ValidatingWebhookConfiguration the operator keeps up to date ('': none).",
    ),
]


@dataclass(frozen=True)
class OperatorOptions:
    """The values ``backstop operator`` was given (see the option declarations above)."""

    namespace: list[str]
    all_namespaces: bool
    liveness: str
    log_format: str
    log_level: str
    kubeconfig: str | None
    grace_period_seconds: float | None
    utilization_cap: float | None
    recoveryplan_history: int | None
    metrics_port: int | None
    cluster_scanning: bool
    leader_elect: bool
    leader_elect_namespace: str | None
    leader_elect_name: str
    lease_duration: int
    renew_deadline: int
    retry_period: int
    webhook_port: int
    webhook_addr: str
    webhook_host: str | None
    webhook_service: str | None
    webhook_cert_dir: str | None
    webhook_cert_secret: str | None
    webhook_configuration: str
    capacity_all_namespaces: bool = False

    def problem(self) -> str | None:
        """What is wrong with these options, in one line, or ``None``.

        Examples
        --------
        >>> OperatorOptions(**{**_EXAMPLE, "namespace": []}).problem()
        'pass --namespace NAME (repeatable) or --all-namespaces'
        >>> OperatorOptions(**{**_EXAMPLE, "webhook_service": "svc"}).problem()
        "--webhook-service must be NAMESPACE/NAME, got 'svc'"
        >>> OperatorOptions(**_EXAMPLE).problem() is None
        True
        """
        if not self.namespace and not self.all_namespaces:
            return "pass --namespace NAME (repeatable) or --all-namespaces"
        if self.log_level not in LOG_LEVELS:
            return f"--log-level must be one of {', '.join(LOG_LEVELS)}"
        if self.log_format not in ("json", "plain"):
            return "--log-format must be json or plain"
        if self.utilization_cap == 0:
            return "--utilization-cap must be in (0, 1]"
        for ref, flag in (
            (self.webhook_service, "service"),
            (self.webhook_cert_secret, "cert-secret"),
        ):
            if ref is not None and ref.count("/") != 1:
                return f"--webhook-{flag} must be NAMESPACE/NAME, got {ref!r}"
        return None

    def export(self) -> None:
        """Put the kubeconfig and the operator-wide recovery defaults (Helm values
        ``recovery.*``) into the environment, where the controller's settings read them."""
        exported = {
            "KUBECONFIG": self.kubeconfig or None,
            "BACKSTOP_GRACE_PERIOD_SECONDS": self.grace_period_seconds,
            "BACKSTOP_UTILIZATION_CAP": self.utilization_cap,
            "BACKSTOP_RECOVERYPLAN_HISTORY": self.recoveryplan_history,
            "BACKSTOP_METRICS_PORT": self.metrics_port,
        }
        for name, value in exported.items():
            if value is not None:
                os.environ[name] = str(value)

    @property
    def namespaces(self) -> list[str]:
        """The namespaces Kopf serves (none: every namespace)."""
        return [] if self.all_namespaces else list(self.namespace)

    @property
    def pod_namespaces(self) -> tuple[str, ...]:
        """The namespaces whose pods the capacity ledger reads (none: every namespace).

        Examples
        --------
        >>> OperatorOptions(**{**_EXAMPLE, "namespace": ["a", "b"]}).pod_namespaces
        ('a', 'b')
        >>> OperatorOptions(**{**_EXAMPLE, "capacity_all_namespaces": True}).pod_namespaces
        ()
        """
        return () if self.capacity_all_namespaces else tuple(self.namespaces)

    @property
    def lease_namespace(self) -> str:
        """Namespace of the leader-election Lease."""
        return self.leader_elect_namespace or (self.namespace or ["default"])[0]


_EXAMPLE: dict[str, object] = {
    "namespace": ["default"],
    "all_namespaces": False,
    "liveness": "http://0.0.0.0:8080/healthz",
    "log_format": "json",
    "log_level": "info",
    "kubeconfig": None,
    "grace_period_seconds": None,
    "utilization_cap": None,
    "recoveryplan_history": None,
    "metrics_port": None,
    "cluster_scanning": True,
    "leader_elect": False,
    "leader_elect_namespace": None,
    "leader_elect_name": "backstop-operator",
    "lease_duration": 15,
    "renew_deadline": 10,
    "retry_period": 2,
    "webhook_port": 0,
    "webhook_addr": "127.0.0.1",
    "webhook_host": None,
    "webhook_service": None,
    "webhook_cert_dir": None,
    "webhook_cert_secret": None,
    "webhook_configuration": "backstop.streams.backstop.dev",
}
"""The command's defaults with ``-n default``: a starting point for the examples."""
