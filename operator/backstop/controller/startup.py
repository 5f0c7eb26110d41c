"""What the operator starts with and stops with: Kopf's settings and the shared state.

The process's shared state lives in Kopf's root memo: the one capacity ledger
(:mod:`backstop.k8s.ledger`) the planners of every topology share, its pod feed, the
node watch and pod-change counters that wake the supervisors
(:mod:`backstop.controller.memo`), the wake-ups of the peer pushes
(:mod:`backstop.controller.peers`), the metrics (:mod:`backstop.controller.metrics`)
and the scheduled full garbage collections (:mod:`backstop.controller.gckeeper`).
"""

from __future__ import annotations

import kopf

from backstop.controller import gckeeper, kopf_config, metrics, peers
from backstop.controller import memo as topology_memo
from backstop.controller import settings as config
from backstop.controller.context import kube
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.podfeed import PodFeed


def start(settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    """Keep Kopf's bookkeeping under our own domain; post no log lines as Events.

    Also starts the process's one capacity ledger, shared through ``memo`` by the
    planners of every topology, fed with the pods of ``memo.pod_namespaces`` (every
    namespace when that is empty or absent), and the process's metrics unless the CLI
    put them there.
    """
    kopf_config.apply_kopf_settings(settings)
    try:  # read the environment once, now: a bad value stops the operator at startup
        config.settings()
    except ValueError as err:
        raise kopf.PermanentError(str(err)) from None
    memo.ledger = CapacityLedger()
    memo.node_watch = topology_memo.NodeWatch()  # wakes the supervisors on a node's NotReady
    memo.pod_changes = topology_memo.PodChanges()  # lets a steady round skip its pods
    memo.peer_wake = peers.PeerWake()  # a pod's change wakes its topology's peer pushes
    if memo.get("metrics") is None:  # `backstop operator` passes the one it serves
        memo.metrics = metrics.OperatorMetrics()
    # the namespaces whose pods the ledger reads (`backstop operator` passes them; none:
    # every namespace, as under `kopf run -A`)
    pod_namespaces = tuple(memo.get("pod_namespaces") or ())
    memo.pod_feed = PodFeed(kube().api, memo.ledger, pod_namespaces).start()
    memo.gc_keeper = gckeeper.start()  # full collections on a schedule (10k pods' objects)


def stop(memo: kopf.Memo) -> None:
    """Stop the ledger's pod watch and the scheduled collections with the operator."""
    if memo.get("pod_feed") is not None:
        memo.pod_feed.stop()
    if memo.get("gc_keeper") is not None:
        memo.gc_keeper.set()
