"""The data-plane confirmations: confirm a node loss that task pods noticed, within a second.

One ``async`` worker per topology (:mod:`backstop.controller.handlers` lists it, and
:mod:`backstop.controller.workers` runs it) on Kopf's event loop, beside the peer
pushes. Every :data:`POLL` seconds it asks each running task pod of the topology for its
suspicions (``GET /suspects``, :mod:`backstop.k8s.suspectpoll`), groups the suspected
tasks by their pod's node, and probes every task pod of the topology on such a node
(``GET /ready``; the poll was the first of :data:`~backstop.k8s.suspectpoll.TRIES`
tries). A node none of whose pods answers is lost now
(:func:`backstop.domain.dataplane.confirm`): it is recorded in the topology's memo, and
the supervisor, woken at once, sees it NotReady and lost
(:func:`backstop.domain.dataplane.with_confirmed`) and starts the same recovery session
the node-monitor's NotReady and grace period start, with the trigger ``DataPlane``. A
node with a pod that answers is a false suspicion: logged, not acted on.
The node-monitor's path stays as it is, the fallback for what the data plane does not see.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from backstop.controller import memo as topology_memo
from backstop.controller.context import gone, node_snapshot, post_event
from backstop.controller.workers import Stopped
from backstop.domain.dataplane import (
    HOLD,
    PollBackoff,
    TaskPod,
    Verdict,
    confirm,
    own_suspicions,
    suspected_nodes,
    task_pods,
)
from backstop.domain.incidents import NodeInfo
from backstop.k8s import suspectpoll

POLL = float(os.environ.get("BACKSTOP_SUSPECT_POLL_SECONDS", "0.25"))
"""Seconds between polls of a topology's suspicions (0: the worker does nothing, and only
the node-monitor's path notices a lost node)."""
QUIET = 60.0
"""Seconds between two log lines about the same node's false suspicion."""


async def confirm_round(
    indexed: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, NodeInfo],
    confirmed: Mapping[str, float],
    backoff: PollBackoff,
    timeout: float = suspectpoll.TIMEOUT,
    tries: int = suspectpoll.TRIES,
    silence: dict[str, float] | None = None,
) -> list[Verdict]:
    """One round: poll the pods' suspicions (those not backing off), add the operator's
    own (:func:`~backstop.domain.dataplane.own_suspicions`), probe the suspected nodes'
    pods and, where none answers, their kubelets, and judge each such node (nodes already
    confirmed are not judged again). ``silence``: node → since when (monotonic seconds)
    none of its pods answers, kept from round to round by the caller."""
    silence = {} if silence is None else silence
    pods = task_pods(indexed)
    backoff.forget_except(pods.values())
    asked = backoff.due(pods.values(), time.monotonic())
    answers = await suspectpoll.suspects(asked, timeout)
    now = time.monotonic()
    for p in asked:
        if answers.get(p.task) is None:
            backoff.failed(p, now)
        else:
            backoff.answered(p)
    ready = {n for n, info in nodes.items() if info.ready and n not in confirmed}
    known = {t: p for t, p in pods.items() if backoff.known(p)}  # not one still starting
    silent = {t for t in known if answers.get(t) is None}  # not asked: backing off
    reports = [s for found in answers.values() if found for s in found]
    reports += own_suspicions(known, silent, time.time())
    by_node = suspected_nodes(reports, known, ready)
    for n in [n for n in silence if n not in by_node]:
        del silence[n]
    if not by_node:
        return []
    judged = sorted(by_node)
    on = {n: [p for p in known.values() if p.node == n] for n in judged}
    answered = await _probe(on, answers, tries, timeout)
    dead = [n for n in judged if not any(answered[n].values())]
    kubelets = await asyncio.gather(
        *(suspectpoll.reachable(nodes[n].kubelet, timeout) for n in dead)
    )
    kubelet = dict(zip(dead, kubelets, strict=True))
    verdicts = []
    for n in judged:
        since = silence.setdefault(n, now) if n in kubelet else silence.pop(n, now)
        verdicts.append(
            confirm(n, by_node[n], on[n], answered[n], tries, kubelet.get(n), now - since)
        )
    return verdicts


async def _probe(
    on: Mapping[str, Sequence[TaskPod]],
    answers: Mapping[str, object],
    tries: int,
    timeout: float,
) -> dict[str, dict[str, bool]]:
    """``{node: {pod: whether it answered}}`` of the suspected nodes' pods: this round's
    poll was a pod's first try (unless it was backing off); a node with a pod that
    answered it is up, the others' pods are probed for the rest of the tries."""
    polled = {p.pod: answers.get(p.task) is not None for ps in on.values() for p in ps}
    out = {n: {p.pod: polled[p.pod] for p in ps} for n, ps in on.items()}
    rest = {n: tries - all(p.task in answers for p in ps) for n, ps in on.items()}
    probing = [n for n, ps in on.items() if not any(polled[p.pod] for p in ps)]
    probes = await asyncio.gather(
        *(
            suspectpoll.probe([p for p in on[n] if not polled[p.pod]], rest[n], timeout)
            for n in probing
        )
    )
    for n, got in zip(probing, probes, strict=True):
        out[n].update(got)
    return out


def act(
    verdicts: Sequence[Verdict],
    mem: topology_memo.TopologyMemo,
    body: kopf.Body,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    now: float,
) -> bool:
    """Record the lost nodes in the memo (with a log line and an Event each), log false
    suspicions now and then; whether a node was confirmed lost."""
    lost = False
    for v in verdicts:
        if v.lost:
            mem.dataplane_lost[v.node] = now
            logger.warning("%s", v.message)
            post_event(body, "NodeLost", v.message, warning=True)
            lost = True
        elif "false suspicion" in v.message and now - mem.dataplane_told.get(v.node, 0) >= QUIET:
            mem.dataplane_told[v.node] = now
            logger.info("%s", v.message)
            post_event(body, "NodeSuspected", v.message)
    for node, at in list(mem.dataplane_lost.items()):
        if now - at >= HOLD:
            del mem.dataplane_lost[node]
    return lost


async def run(
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    body: kopf.Body,
    stopped: Stopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Poll and confirm until the topology is gone or the operator stops."""
    assert namespace is not None
    if POLL <= 0:
        return
    key = (namespace, name)
    mem = topology_memo.of(memo)
    index: kopf.Index[tuple[str | None, str], Any] = kwargs["pods_by_topology"]
    watch: topology_memo.NodeWatch | None = memo.get("node_watch")
    backoff, silence = PollBackoff(), dict[str, float]()
    while not stopped and not gone(kwargs["topologies"], namespace, name, meta["uid"]):
        began = time.monotonic()
        pods = list(index.get(key, []))
        if pods:
            nodes = node_snapshot(kwargs["node_index"])
            verdicts = await confirm_round(
                pods, nodes, mem.dataplane_lost, backoff, silence=silence
            )
            if act(verdicts, mem, body, logger, time.time()) and watch is not None:
                watch.poke()  # the supervisor looks now, not up to a second later
        took = time.monotonic() - began  # a round of many pods waits as long as it took
        await asyncio.sleep(max(0.05, POLL - took, took))
