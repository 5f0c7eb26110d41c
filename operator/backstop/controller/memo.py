"""Per-topology state the controller keeps between handler calls, in Kopf's ``memo``.

Kopf gives every object its own ``memo`` (keyed by the object's uid, shared by its
handlers and workers, dropped when the object is forgotten), so state kept here never
leaks from one topology to another or from a deleted object to a re-created one of the
same name. :func:`of` returns the topology's :class:`TopologyMemo`, creating it on first
use.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from backstop.domain.peers import PeerState
from backstop.domain.spec import StreamTopologySpec
from planners import TaskGraph

KEY = "backstop"
"""The key of the :class:`TopologyMemo` inside Kopf's per-object memo."""


@dataclass
class TopologyMemo:
    """What one topology's handlers remember between calls."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    """The reconcile handler and the supervisor never interleave on one topology."""
    parsed: dict[int, tuple[StreamTopologySpec, TaskGraph]] = field(default_factory=dict)
    """The parsed spec and its task graph, by generation (``None``-free: invalid specs
    are parsed again on every call)."""
    written: tuple[int, dict[str, Any]] = (0, {})
    """The status we last wrote and its resourceVersion (the watch may lag behind it)."""
    ensured: dict[str, str] = field(default_factory=dict)
    """Fingerprints of the RecoveryPlans and ConfigMap this process wrote as the status
    asked (empty after a restart, so a new operator writes them once again)."""
    restore_looked: tuple[str, float] | None = None
    """The restore's last look at usable capacity: ``(node key, time)``."""
    restore_no_gain: str | None = None
    """The capacity key at which consolidation last found nothing to gain."""
    probes: dict[str, tuple[str, float, str | None]] = field(default_factory=dict)
    """Unready pods' own reasons (``k8s.taskprobe``): pod name → (resourceVersion, when
    asked, reason), so a tick asks a task again only when its pod changed or every
    :data:`~backstop.controller.tick.PROBE_EVERY` seconds."""
    held: Any = None
    """The key of ``desired`` whose pods the supervisor last held in the capacity ledger
    (:func:`~backstop.controller.supervisor.converge`): a hold lasts until its pod shows
    up, so a round whose pods all run and whose plan was held before needs none."""
    desired: tuple[Any, dict[str, dict[str, Any]]] | None = None
    """The pods of the plan in force and their key (uid, generation, plan): built again
    only when one of these changes (:func:`~backstop.controller.tick.planned_pods`)."""
    wire: tuple[str | None, dict[str, Any]] | None = None
    """The status as the API stores it (compact) and its resourceVersion: the base of the
    next status patch (:func:`~backstop.controller.tick.status_wire`)."""
    matched: bool | None = None
    """Whether the pods matched the plan in force at the last converge."""
    peers: PeerState = field(default_factory=PeerState)
    """The peer map pushed to the task pods, and which pod holds what of it
    (:mod:`backstop.controller.peers`)."""
    peers_token: str | None = None
    """The topology's peer token, read from (or first written to) its Secret."""
    drain_blocked: tuple[str, float] | None = None
    """The blocked drain last told in an Event (its nodes and tasks) and when, so the
    Event is repeated only when that changes or every few minutes
    (:func:`backstop.controller.drain.drain_tick`)."""
    drain_blocked_since: tuple[str, float] | None = None
    """The cordoned nodes of a blocked drain and since when it is blocked."""
    drain_released: bool = False
    """The budget lets a blocked drain's pods through (``drainTimeoutSeconds`` passed)."""
    dataplane_lost: dict[str, float] = field(default_factory=dict)
    """Nodes the data-plane daemon confirmed lost, and when (epoch seconds): the supervisor
    counts them lost at once (:mod:`backstop.controller.dataplane`)."""
    dataplane_told: dict[str, float] = field(default_factory=dict)
    """When a node's last false suspicion was logged (epoch seconds)."""
    recovery_free: dict[str, float] | None = None
    """The free CPU per usable node that the recovery decision last planned on, while a
    session waits for capacity: a tick that sees more tries again at once
    (:func:`~backstop.controller.supervisor.recovery_tick`)."""
    replicas_looked: dict[str, float] | None = None
    """The free CPU per usable node when missing replicas were last looked for
    (:func:`~backstop.controller.replicas.replica_tick`): looked for again when it changes."""
    steady: tuple[Any, float] | None = None
    """The inputs (:attr:`~backstop.controller.tick.Tick.inputs`) of the last whole round
    that found everything settled, and when (``time.monotonic``): a round on the same
    inputs only looks for a loss (:func:`~backstop.controller.supervisor.supervise_once`)."""


def of(memo: MutableMapping[str, Any]) -> TopologyMemo:
    """The topology's memory inside Kopf's per-object ``memo`` (created on first use).

    Examples
    --------
    >>> memo: dict[str, Any] = {}
    >>> of(memo) is of(memo), of({}) is of(memo)
    (True, False)
    """
    found = memo.get(KEY)
    if not isinstance(found, TopologyMemo):
        found = memo.setdefault(KEY, TopologyMemo())
    return found


class NodeWatch:
    """Wakes the supervise daemons when a node turns Ready or NotReady.

    A daemon looks about once a second and, between looks, only sleeps; without a wake-up
    a node's NotReady would wait up to a second to be noticed, on top of its grace period
    (the first RecoveryPlan is due within 1 s of detection). The node index (on Kopf's event
    loop) reports every node here; only a change of readiness wakes the daemons, which
    then wait just until the grace period ends (:func:`backstop.domain.recovery.next_look`).
    One per operator process, in the operator-wide memo.

    Examples
    --------
    >>> w = NodeWatch()
    >>> seen = w.changes
    >>> w.saw("n1", True); w.changes > seen          # a new node: a change
    True
    >>> seen = w.changes
    >>> w.saw("n1", True); w.wait(seen, 0.01)       # the same readiness: none
    False
    >>> w.saw("n1", False); w.wait(seen, 0.01)
    True
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: dict[str, bool] = {}
        self.changes = 0
        """How many readiness changes were seen (a daemon waits for this to grow)."""

    def saw(self, node: str, ready: bool) -> None:
        """The node index saw ``node`` (every event; only a readiness change wakes)."""
        with self._cond:
            if self._ready.get(node) == ready:
                return
            self._ready[node] = ready
            self.changes += 1
            self._cond.notify_all()

    def poke(self) -> None:
        """Wake the daemons without a readiness change (a loss confirmed on the data
        plane, :mod:`backstop.controller.dataplane`)."""
        with self._cond:
            self.changes += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a change after ``seen`` (:attr:`changes` read
        before the daemon's look, so a change during the look is not missed)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.changes != seen, timeout=max(timeout, 0.0))


class PodChanges:
    """Counts the pod index's updates of each topology, so a round can tell that its pods
    did not change since the last one without looking at them.

    At 10k pods, matching the pods to the plan and deriving pod states and conditions
    costs a round about 0.4 CPU s, and a node's loss waits behind it; a round whose pods
    did not change skips that. Kopf's index keeps no version; the pod index handler reports every
    ADDED/MODIFIED here. A DELETED event reaches no handler, but it shrinks the index, so
    a round compares this count *and* the number of indexed pods. The index handler runs
    just before Kopf stores its result, so it counts twice: at once, and again on the
    event loop's next turn (after the store), so a round that read the first count with
    the old pods sees the second and looks again. One per process, in the root memo.

    Examples
    --------
    >>> c = PodChanges()
    >>> c.count(("ns", "t")), c.saw(("ns", "t")), c.count(("ns", "t"))
    (0, None, 1)
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str | None, str], int] = {}

    def saw(self, key: tuple[str | None, str]) -> None:
        """One pod event of the topology ``key`` (namespace, name)."""
        self._counts[key] = self._counts.get(key, 0) + 1

    def count(self, key: tuple[str | None, str]) -> int:
        """How many pod events of ``key`` were seen (0 for none)."""
        return self._counts.get(key, 0)
