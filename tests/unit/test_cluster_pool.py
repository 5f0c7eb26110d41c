"""The operator's API client keeps a connection for every thread that may call at once."""

from __future__ import annotations

from pathlib import Path

from backstop.controller.kopf_config import HANDLER_WORKERS
from backstop.k8s import cluster
from backstop.k8s.kubeio import API_CONCURRENCY

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_fleet_of_100_topologies_does_not_overflow_the_connection_pool(tmp_path: Path) -> None:
    """Why: with a 32-connection pool the fleet run (100 topologies, two daemon threads
    each, 16 handler workers) logged urllib3's "Connection pool is full" warnings."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    api = cluster.api_client(str(path))
    threads = HANDLER_WORKERS + 2 * 100 + API_CONCURRENCY
    assert api.configuration.connection_pool_maxsize >= threads
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] >= threads
