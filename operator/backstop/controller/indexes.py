"""The entries of Kopf's in-memory indexes: the task pods per topology and every Node.

Kopf keeps the indexes (:mod:`backstop.controller.handlers` registers them); the
reconciles and the supervise daemons read them instead of listing the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf

from backstop.domain.constants import LABEL_TOPOLOGY
from backstop.domain.incidents import NodeInfo, node_info
from backstop.k8s.podrecord import slim_pod


def pod_entry(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, memo: Mapping[str, Any] | None
) -> dict[tuple[str | None, str], Any]:
    """The pod index's entry of a task pod, under its topology.

    Each pod is kept as :func:`~backstop.k8s.podrecord.slim_pod` makes it: only the
    fields the operator reads (about 1/5 of the pod's JSON; 10k whole pods take about
    240 MB of the operator's memory).

    Every event is counted for the supervisor's steady rounds (:class:`~.memo.PodChanges`)
    and wakes the topology's peers daemon (:class:`~.peers.PeerWake`); runs on Kopf's
    event loop.
    """
    key = (namespace, labels[LABEL_TOPOLOGY])
    changes = (memo or {}).get("pod_changes")
    if changes is not None:
        changes.saw(key)  # now, and once more after Kopf stored this pod
        asyncio.get_running_loop().call_soon(changes.saw, key)
    wake = (memo or {}).get("peer_wake")
    if wake is not None:  # the peers daemon reads the index: after Kopf stored this pod
        asyncio.get_running_loop().call_soon(wake.saw, key)
    return {key: slim_pod(body)}


def node_entry(name: str, body: kopf.Body, memo: kopf.Memo) -> dict[str, NodeInfo]:
    """The node index's entry of a Node; a change of its readiness wakes the supervise
    daemons (:class:`~.memo.NodeWatch`)."""
    info = node_info(body)
    if memo.get("node_watch") is not None:
        memo.node_watch.saw(name, info.ready)
    return {name: info}
