"""Connecting to a Kubernetes API server, the same way for the CLI, simulator and tests.

One place decides where credentials come from (``--kubeconfig``, ``$KUBECONFIG``,
``~/.kube/config`` or the in-cluster service account) so every entry point behaves
alike and reports an unreachable cluster with the same clear message.
"""

from __future__ import annotations

import os

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

CONNECTION_POOL = 256
"""Connections per API client kept for reuse (urllib3 discards, with a warning, beyond).

Why this many: every thread of the operator may hold a connection at once (Kopf's
16 handler workers, each topology's supervise thread and the converge work it hands on,
and :data:`backstop.k8s.kubeio.API_CONCURRENCY` bulk pod calls), so a fleet of 100
topologies has over 200. A smaller pool makes urllib3 log "Connection pool is full,
discarding connection" and reopen TLS connections. The size only bounds idle
connections kept (urllib3 opens more when needed); an unused slot costs nothing."""


class ClusterUnavailable(Exception):
    """No usable cluster configuration, or the API server does not answer."""


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from ``kubeconfig``, ``$KUBECONFIG``/``~/.kube/config``, or in-cluster.

    Raises
    ------
    ClusterUnavailable
        When no configuration can be loaded.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    # the default pool (5 × CPUs) is smaller than the operator's threads: Kopf's
    # workers, two daemons per topology and the bulk pod calls of backstop.k8s.kubeio
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize, CONNECTION_POOL)
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=cfg)
            return client.ApiClient(cfg)
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException:
            config.load_kube_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except (ConfigException, OSError) as err:
        raise ClusterUnavailable(
            f"cannot load a Kubernetes configuration ({err}); set KUBECONFIG or pass --kubeconfig"
        ) from None
