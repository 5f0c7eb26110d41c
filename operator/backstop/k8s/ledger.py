"""One capacity ledger per operator process: CPU, memory and pod slots per node.

Planners of different topologies run at the same time: a recovery of topology A, a
recovery of B and a reconcile of C. Were each to read free capacity on its own, all
three could plan onto the same free core in the same second, and the scheduler would
leave the surplus pods ``Unschedulable``; memory and the node's pod limit count as
much as CPU.

The ledger is the one place that answers "what is still free on node N": the
node's allocatable resources minus the requests of every pod bound or pinned
there (any namespace, any workload, from a watch, see :class:`PodFeed`), minus
the *holds* of pods a recorded plan asks for but that do not exist yet. Planning
happens inside :meth:`CapacityLedger.booking`, which serializes planners of all
topologies: read the free capacity, plan, :meth:`Booking.reserve` the new pods
(refused if they do not fit), and only then write the plan to the status. A
reconcile plans first outside it on a snapshot and only reserves inside, planning
again there on a conflict (:meth:`CapacityLedger.plan_and_book`). A
hold ends when its pod shows up on its node (the pod's own requests count from
then on), when the plan that made it is superseded (:meth:`CapacityLedger.release`
or an exclusive reserve), or after :data:`HOLD_SECONDS` as a safety net.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from backstop.k8s.podresources import (
    EPS,
    PodKey,
    Resources,
    manifest_holds,
    planner_cpu,
    pod_owner,
    pod_place,
    pod_requests,
)
from planners import PlannerError

__all__ = [
    "HOLD_SECONDS",
    "SYNC_TIMEOUT",
    "Booking",
    "CapacityLedger",
    "Overcommitted",
    "PodKey",
    "Reading",
    "Resources",
    "manifest_holds",
    "planner_cpu",
    "pod_owner",
    "pod_place",
    "pod_requests",
]

log = logging.getLogger("backstop.ledger")

HOLD_SECONDS = 180.0
"""A hold whose pod never showed up is dropped after this long (its plan was abandoned)."""
SYNC_TIMEOUT = 30.0
"""How long a booking waits for the pod feed's first complete listing."""

T = TypeVar("T")


class Overcommitted(PlannerError):
    """A reservation does not fit the free capacity of a node (the message names it)."""


@dataclass(frozen=True)
class _Entry:
    """All the ledger keeps of a pod (or a hold): about 200 bytes, whatever the pod."""

    node: str
    requests: Resources
    owner: str | None
    at: float = 0.0


def _entry(pod: Mapping[str, Any]) -> tuple[PodKey, _Entry | None]:
    """A pod's key and what it holds (``None``: nothing, e.g. finished or not placed)."""
    meta = pod.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    node = pod_place(pod)
    return key, None if node is None else _Entry(node, pod_requests(pod), pod_owner(pod))


def _shown(pod: _Entry | None, hold: _Entry) -> bool:
    return pod is not None and pod.node == hold.node


class CapacityLedger:
    """Free resources per node for every planner of this process (see the module docstring)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._lock = threading.RLock()
        """Guards the pods and holds; held for moments (an event, a sum, a reserve)."""
        self._planning = threading.RLock()
        """Serializes planners (:meth:`booking`) without stopping the feed or the readers."""
        self._turn = threading.Condition()
        self._urgent = 0
        """Recovery planners waiting for the booking: the others let them go first."""
        self._pods: dict[PodKey, _Entry] = {}
        self._holds: dict[PodKey, _Entry] = {}
        self._used: dict[str, Resources] = {}
        """Requests of pods and holds per node, kept as they change: :meth:`free` reads
        these sums instead of walking every pod under the lock (a fleet's 5,000 pods,
        summed for each of 100 reconciles, held the lock that the feed needs)."""
        self._owned: dict[str, dict[str, Resources]] = {}
        """The same sums per owner (``namespace/topology``), for ``free(exclude=...)``."""
        self._clock = clock
        self.synced = threading.Event()
        self.optimistic = 0
        """Plans made outside the booking and reserved as they were (:meth:`plan_and_book`)."""
        self.conflicts = 0
        """Plans made outside the booking whose room was taken meanwhile: made again inside."""

    # ------------------------------------------------------------- the pod feed
    def observe(self, pod: Mapping[str, Any]) -> None:
        """A pod was added or changed (from the watch)."""
        key, entry = _entry(pod)
        with self._lock:
            self._set(self._pods, key, entry)
            if entry is None:
                return
            hold = self._holds.get(key)
            if hold is not None and hold.node == entry.node:
                self._set(self._holds, key, None)  # the pod itself counts from now on

    def forget(self, key: PodKey) -> None:
        """A pod was deleted."""
        with self._lock:
            self._set(self._pods, key, None)

    def _set(self, table: dict[PodKey, _Entry], key: PodKey, entry: _Entry | None) -> None:
        """Put (or with ``None`` drop) a pod or hold, keeping the per-node sums."""
        old = table.pop(key, None)
        if old is not None:
            self._count(old, -1)
        if entry is not None:
            table[key] = entry
            self._count(entry, 1)

    def _count(self, entry: _Entry, sign: int) -> None:
        req = entry.requests if sign > 0 else Resources() - entry.requests
        sums = [self._used]
        if entry.owner is not None:
            sums.append(self._owned.setdefault(entry.owner, {}))
        for per_node in sums:
            total = per_node.get(entry.node, Resources()) + req
            if total.pods == 0 and abs(total.cpu) < EPS and abs(total.memory) < 0.5:
                per_node.pop(entry.node, None)  # nothing left: no float residue kept
            else:
                per_node[entry.node] = total
        if entry.owner is not None and not self._owned[entry.owner]:
            del self._owned[entry.owner]

    def _recount(self) -> None:
        self._used, self._owned = {}, {}
        for entry in [*self._pods.values(), *self._holds.values()]:
            self._count(entry, 1)

    def replace_pods(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """A complete listing (start, or after the watch lost its place)."""
        with self.relisting() as observe:
            for pod in pods:
                observe(pod)

    @contextmanager
    def relisting(
        self, namespace: str | None = None, *, complete: bool = True
    ) -> Iterator[Callable[[Mapping[str, Any]], None]]:
        """A complete listing read page by page: ``observe`` each pod; on exit the
        ledger's pods are replaced at once (readers see the old set until then).

        ``namespace``: the listing covers that namespace only, and only its pods are
        replaced (the feed of several namespaces lists each on its own); ``None``: every
        namespace. ``complete``: with this listing every namespace the feed follows has
        been listed once, so planners may book (:attr:`synced`).
        """
        fresh: dict[PodKey, _Entry] = {}

        def observe(pod: Mapping[str, Any]) -> None:
            key, entry = _entry(pod)
            if entry is not None:
                fresh[key] = entry

        yield observe
        with self._lock:
            if namespace is not None:
                kept = {k: e for k, e in self._pods.items() if k[0] != namespace}
                fresh = {**kept, **fresh}
            self._pods = fresh
            for key in [k for k, h in self._holds.items() if _shown(fresh.get(k), h)]:
                del self._holds[key]
            self._recount()
            if complete:
                self.synced.set()

    def pod_count(self) -> int:
        """Pods that hold resources now (bound or pinned, not finished)."""
        with self._lock:
            return len(self._pods)

    # ----------------------------------------------------------------- reading
    def free(
        self, allocatable: Mapping[str, Resources], *, exclude: str | None = None
    ) -> dict[str, Resources]:
        """``allocatable`` minus pods and holds, per node; ``exclude`` a topology's own.

        A reconcile or restore may move the topology's own pods, so it passes
        ``exclude="namespace/name"``; a recovery step adds to the pods that run.
        """
        with self._lock:
            self._expire()
            used, none = self._used, Resources()
            if exclude is None or exclude not in self._owned:
                return {n: a - used.get(n, none) for n, a in allocatable.items()}
            own = self._owned[exclude]
            return {n: a - (used.get(n, none) - own.get(n, none)) for n, a in allocatable.items()}

    def holds(self, owner: str | None = None) -> dict[PodKey, tuple[str, Resources]]:
        """Current holds (of one owner): ``{pod: (node, requests)}``."""
        with self._lock:
            self._expire()
            return {
                k: (e.node, e.requests)
                for k, e in self._holds.items()
                if owner is None or e.owner == owner
            }

    # ----------------------------------------------------------------- writing
    @contextmanager
    def booking(self, timeout: float = SYNC_TIMEOUT, *, urgent: bool = False) -> Iterator[Booking]:
        """Serialize planners: free capacity read inside stays theirs until they reserve.

        Only planners wait for each other here; the pod feed, holds of recorded plans
        and readers go on (:meth:`Booking.reserve` checks again under the data lock, so
        a pod or hold that arrived meanwhile is never double-booked). An ``urgent``
        planner (a recovery step: failed tasks wait on it) goes before every waiting
        planner that is not: a node loss in a fleet is not queued behind the plans of
        topologies being created. Not reentrant for a non-urgent planner.
        """
        if not self.synced.wait(timeout):
            raise Overcommitted("the capacity ledger has not listed the pods yet")
        self._acquire(urgent)
        try:
            yield Booking(self)
        finally:
            self._planning.release()

    def plan_and_book(
        self,
        plan: Callable[[Reading], T | None],
        reserve: Callable[[Booking, T], None],
        timeout: float = SYNC_TIMEOUT,
    ) -> T | None:
        """Plan outside the booking on a snapshot of free capacity, reserve inside it.

        So planners of different topologies run at the same time (CP-SAT
        releases the GIL, and a planner's Python waits for no other), and the
        booking is held only for the reservation. ``reserve`` checks the plan's pods
        against the capacity free *now*; if a plan reserved meanwhile took their room
        (:class:`Overcommitted`, a conflict) the plan is made again inside the
        booking, where nothing can take it, and reserved (an ``Overcommitted`` from
        that second reservation propagates). Recoveries keep their priority: the
        reservation waits behind urgent planners like any booking. ``plan`` returning
        ``None`` (it recorded a failure) books nothing.
        """
        if not self.synced.wait(timeout):
            raise Overcommitted("the capacity ledger has not listed the pods yet")
        made = plan(Reading(self))
        if made is None:
            return None
        with self.booking(timeout) as booking:
            try:
                reserve(booking, made)
            except Overcommitted as err:
                with self._lock:
                    self.conflicts += 1
                log.info("capacity taken while planning (%s): planning again in the booking", err)
                made = plan(booking)
                if made is not None:
                    reserve(booking, made)
                return made
            with self._lock:
                self.optimistic += 1
            return made

    def _acquire(self, urgent: bool) -> None:
        if urgent:
            with self._turn:
                self._urgent += 1
            try:
                self._planning.acquire()
            finally:
                with self._turn:
                    self._urgent -= 1
                    self._turn.notify_all()
            return
        while True:
            with self._turn:
                self._turn.wait_for(lambda: self._urgent == 0)
            self._planning.acquire()
            with self._turn:
                if self._urgent == 0:
                    return
            self._planning.release()  # an urgent one came meanwhile: it goes first

    def hold(self, owner: str, pods: Mapping[PodKey, tuple[str, Resources]]) -> None:
        """Count pods a *recorded* plan asks for until they show up (no capacity check).

        Used for plans already in the status (a resumed reconcile, converge after
        a restart), so their capacity is never handed out twice.
        """
        with self._lock:
            now = self._clock()
            for key, (node, req) in pods.items():
                shown = self._pods.get(key)
                if shown is not None and shown.node == node:
                    self._set(self._holds, key, None)
                    continue
                old = self._holds.get(key)
                at = old.at if old is not None and old.node == node else now
                self._set(self._holds, key, _Entry(node, req, owner, at))

    def release(self, owner: str, keep: frozenset[PodKey] = frozenset()) -> None:
        """Drop an owner's holds (its plan was superseded or the topology deleted)."""
        with self._lock:
            for key in [k for k, e in self._holds.items() if e.owner == owner and k not in keep]:
                self._set(self._holds, key, None)

    def _expire(self) -> None:
        limit = self._clock() - HOLD_SECONDS
        for key in [k for k, e in self._holds.items() if e.at < limit]:
            log.warning("capacity hold of pod %s/%s expired: its pod never showed up", *key)
            self._set(self._holds, key, None)


class Reading:
    """Free capacity for a planner: read outside a booking (a snapshot, see
    :meth:`CapacityLedger.plan_and_book`) or inside one (:class:`Booking`)."""

    def __init__(self, ledger: CapacityLedger) -> None:
        self.ledger = ledger

    def free(
        self, allocatable: Mapping[str, Resources], *, exclude: str | None = None
    ) -> dict[str, Resources]:
        """See :meth:`CapacityLedger.free` (thread-safe: it takes the data lock)."""
        return self.ledger.free(allocatable, exclude=exclude)


class Booking(Reading):
    """What a planner may do while it holds the ledger (:meth:`CapacityLedger.booking`)."""

    def reserve(
        self,
        owner: str,
        pods: Mapping[PodKey, tuple[str, Resources]],
        allocatable: Mapping[str, Resources],
        *,
        exclusive: bool = False,
    ) -> None:
        """Hold ``pods`` for ``owner`` if every node can take them, else change nothing.

        With ``exclusive`` (a whole new plan) the owner's other holds go, and its
        running pods do not count against the new plan (it replaces them).

        Raises
        ------
        Overcommitted
            Some node lacks CPU, memory or pod slots; the message names it.
        """
        with self.ledger._lock:  # check and hold at once: the feed may add a pod meanwhile
            self._reserve(owner, pods, allocatable, exclusive=exclusive)

    def _reserve(
        self,
        owner: str,
        pods: Mapping[PodKey, tuple[str, Resources]],
        allocatable: Mapping[str, Resources],
        *,
        exclusive: bool,
    ) -> None:
        free = self.ledger.free(allocatable, exclude=owner if exclusive else None)
        if not exclusive:  # holds being replaced (same pod, new node) give their room back
            for key in pods:
                old = self.ledger._holds.get(key)
                if old is not None and old.node in free:
                    free[old.node] = free[old.node] + old.requests
        need: dict[str, Resources] = {}
        for node, req in pods.values():
            need[node] = need.get(node, Resources()) + req
        for node, req in sorted(need.items()):
            have = free.get(node)
            if have is None or not req.fits_in(have):
                raise Overcommitted(
                    f"node {node}: need cpu {req.cpu:g}, memory {req.memory:g}, "
                    f"{req.pods} pods; free {have or 'none (not usable)'}"
                )
        if exclusive:
            self.ledger.release(owner, keep=frozenset(pods))
        self.ledger.hold(owner, pods)
