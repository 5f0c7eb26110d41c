"""The peer pushes: tell a topology's task pods where their producers are.

One ``async`` worker per topology (:mod:`backstop.controller.handlers` lists it, and
:mod:`backstop.controller.workers` runs it) on Kopf's event loop. It wakes when the pod
index sees a pod of its topology change (:class:`PeerWake`) and at least every
:data:`RETRY` seconds, builds the topology's peer map from the indexed pods
(:func:`backstop.domain.peers.peer_map`), and pushes each pod that does not hold its
part of the newest map (:mod:`backstop.k8s.peerpush`): a pod that just got its IP, one
whose producers moved, one whose container restarted. A push that fails (the task's
endpoint is not up yet, or the pod is gone) is tried again on a later round, after a
backoff that grows with each failure. What was pushed is kept in the topology's memo
(:class:`~backstop.domain.peers.PeerState`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from backstop.controller import memo as topology_memo
from backstop.controller.context import gone, kube
from backstop.controller.workers import Stopped
from backstop.domain.peers import PeerState, Target, operator_inputs, peer_map, targets
from backstop.k8s import peerpush
from backstop.k8s.manifests import Owner

RETRY = 1.0
"""Seconds between rounds while nothing wakes the worker (failed pushes are retried)."""

SETTLE = 0.05
"""Seconds a round waits after its wake-up (at least as long as the last round took): a
burst of pod events (a fleet starting, a node's pods moving) makes one round, not one
per event."""
TOKEN_RETRY = 30.0
"""Seconds before the token's Secret is asked for again after the API refused it."""

Key = tuple[str | None, str]


class PeerWake:
    """Wakes the peer pushes of a topology when one of its pods changes.

    The pod index handler reports every pod event here, on Kopf's event loop, after Kopf
    stored the pod (see :func:`backstop.controller.indexes.pod_entry`); one per operator
    process, in the root memo. A worker that was busy when its event came finds it set.

    Examples
    --------
    >>> async def demo():
    ...     w = PeerWake()
    ...     w.saw(("ns", "t"))
    ...     return await w.wait(("ns", "t"), 0.01), await w.wait(("ns", "t"), 0.01)
    >>> asyncio.run(demo())
    (True, False)
    """

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}

    def _event(self, key: Key) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def saw(self, key: Key) -> None:
        """A pod of the topology ``key`` (namespace, name) changed."""
        self._event(key).set()

    async def wait(self, key: Key, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a change of ``key``'s pods; whether one came."""
        event = self._event(key)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        event.clear()
        return True

    def forget(self, key: Key) -> None:
        """Drop the topology's event (its worker ended)."""
        self._events.pop(key, None)


def plan_round(
    state: PeerState, pods: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]
) -> list[tuple[Target, dict[str, str]]]:
    """The pods to push to this round and their parts, the newest map taken first."""
    state.advance(peer_map(pods), int(time.time() * 1000))
    return state.due(targets(pods), operator_inputs(spec), time.monotonic())


async def push_round(
    state: PeerState,
    pods: Sequence[Mapping[str, Any]],
    spec: Mapping[str, Any],
    token: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    timeout: float = peerpush.TIMEOUT,
) -> dict[str, str | None]:
    """One round: the new map if it changed, then a push to every pod that lacks its
    part of it; ``{pod: None if it took it, else why not}`` of the pods pushed to.

    The map is built in a thread: over 10k pods it takes a few tenths of a second, which
    Kopf's event loop (the indexes, the other daemons) does not wait for.
    """
    due = await asyncio.to_thread(plan_round, state, pods, spec)
    if not due:
        return {}
    parts: dict[str, tuple[Target, dict[str, str]]] = {t.pod: (t, part) for t, part in due}
    pushes = [(t.pod, t.url, peerpush.body(state.version, part, t.promote)) for t, part in due]
    answers = await peerpush.put_all(pushes, token, timeout)
    now = time.monotonic()
    for pod, why in answers.items():
        if why is None:
            state.delivered(*parts[pod])
        else:
            state.failed(*parts[pod], now)
    failed = {p: w for p, w in answers.items() if w is not None}
    if failed:
        first = sorted(failed)[0]
        logger.debug(
            "peer map %d not taken by %d pod(s), retried: %s (%s)",
            state.version,
            len(failed),
            first,
            failed[first],
        )
    return answers


async def _token(owner: Owner, logger: logging.Logger | logging.LoggerAdapter[Any]) -> str | None:
    """The topology's peer token (its Secret created if missing); ``None`` while the API
    refuses (the pushes then go without, and tasks that have a token refuse them)."""
    try:
        return await asyncio.to_thread(peerpush.peers_token, kube().core, owner)
    except ApiException as err:
        logger.warning("peer token of %s: %s %s", owner.name, err.status, err.reason)
        return None


async def run(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    spec: kopf.Spec,
    stopped: Stopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Push the topology's peer map until the topology is gone or the operator stops."""
    assert namespace is not None
    key: Key = (namespace, name)
    owner = Owner(name=name, namespace=namespace, uid=meta["uid"])
    mem = topology_memo.of(memo)
    wake: PeerWake | None = memo.get("peer_wake")
    index: kopf.Index[Key, Any] = kwargs["pods_by_topology"]
    token_at = 0.0  # when to ask for the token again, while the API refuses it
    woke, count, settle = True, -1, SETTLE
    try:
        while not stopped and not gone(kwargs["topologies"], namespace, name, meta["uid"]):
            if mem.peers_token is None and time.monotonic() >= token_at:
                mem.peers_token = await _token(owner, logger)
                token_at = time.monotonic() + TOKEN_RETRY
            pods = list(index.get(key, []))
            # a round without a pod event looks only for a pod deleted without one (the
            # index shrank) or a push whose backoff ended: a steady topology costs nothing
            if woke or len(pods) != count or mem.peers.retry_due(time.monotonic()):
                began = time.monotonic()
                await push_round(mem.peers, pods, spec, mem.peers_token, logger)
                settle = max(SETTLE, time.monotonic() - began)
            count = len(pods)
            if wake is None:
                woke = False
                await asyncio.sleep(RETRY)
            elif woke := await wake.wait(key, RETRY):
                await asyncio.sleep(settle)  # the other events of a burst join this round
    finally:
        if wake is not None:
            wake.forget(key)
