"""Connecting to a Kubernetes API server, the same way for the CLI, simulator and tests.

One place decides where credentials come from (``--kubeconfig``, ``$KUBECONFIG``,
``~/.kube/config`` or the in-cluster service account) so every entry point behaves
alike and reports an unreachable cluster with the same clear message.
"""

from __future__ import annotations

import os

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException


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
    try:
        if path:
            return config.new_client_from_config(config_file=path)
        try:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        except ConfigException:
            return config.new_client_from_config()
    except (ConfigException, OSError) as err:
        raise ClusterUnavailable(
            f"cannot load a Kubernetes configuration ({err}); set KUBECONFIG or pass --kubeconfig"
        ) from None
