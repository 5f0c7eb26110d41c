"""Where each task of a topology listens, from its pods: the peer map the operator pushes.

A task finds its producers through the map the operator sends it (``PUT /peers`` on the
task's ``metrics`` port, see ``runtime/backstop_runtime/peermap.py``): ``{task:
"podIP:dataPort"}`` of the topology's running task pods, each active replica under
``<task>#r<k>`` beside its primary (its consumers read both). The operator already watches
the pods, so a task that moved is found as soon as its new pod has an IP, without the
store's peer registry (which the runtime still falls back to for a task the map does not
name). Everything here is pure: :mod:`backstop.controller.peers` reads the pod index,
calls these, and pushes (:mod:`backstop.k8s.peerpush`).

Each pod is sent the addresses of the tasks it reads from (the tasks of its operator's
inputs), not the whole map: a move then reaches only its consumers, and a shuffle of
many tasks does not send every pod every address.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backstop.domain.constants import (
    ANN_EPOCH,
    DATA_PORT,
    LABEL_OPERATOR,
    LABEL_ROLE,
    LABEL_TASK,
    METRICS_PORT,
    POD_NAME_SEPARATOR,
)

BACKOFF = 1.0
"""Seconds before a pod that did not take its map is tried again; doubled per failure."""
BACKOFF_MAX = 30.0
"""The longest wait between two tries of one pod for one map."""


def _port(pod: Mapping[str, Any], name: str, default: int) -> int:
    """The task container's declared port ``name`` (``default`` if it declares none)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") != "task":
            continue
        for p in c.get("ports") or []:
            if p.get("name") == name and p.get("containerPort"):
                return int(p["containerPort"])
    return default


REPLICA_MARK = "#r"
"""A task's ``k``-th active replica goes by ``<task>#r<k>`` in the map (as the runtime's
``copy_name``): a task id never holds ``#``."""


def _replica_number(meta: Mapping[str, Any]) -> str | None:
    """``k`` of a replica's pod name ``<pod>--r<k>``; ``None`` for any other name."""
    head, _, k = str(meta.get("name", "")).rpartition(f"{POD_NAME_SEPARATOR}r")
    return k if head and k.isdigit() else None


def _copy(meta: Mapping[str, Any], task: str) -> str | None:
    """The name of the pod's copy of ``task`` in the map: the task id for a primary,
    ``<task>#r<k>`` for a replica (``k`` from its name, ``<pod>--r<k>``)."""
    if (meta.get("labels") or {}).get(LABEL_ROLE, "primary") == "primary":
        return task
    k = _replica_number(meta)
    return None if k is None else f"{task}{REPLICA_MARK}{k}"


def _running_copy(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(copy, podIP)`` of a running task pod (a primary or an active replica) that is
    not being deleted (see :func:`_copy` for the name)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    task, ip = (meta.get("labels") or {}).get(LABEL_TASK), status.get("podIP")
    if not task or not ip or meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    copy = _copy(meta, str(task))
    return None if copy is None else (copy, str(ip))


def _epoch(pod: Mapping[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(ANN_EPOCH, 0))
    except ValueError:
        return 0


def address(ip: str, port: int) -> str:
    """``ip:port``, an IPv6 address in brackets.

    >>> address("10.89.1.7", 7077), address("fd00::7", 7077)
    ('10.89.1.7:7077', '[fd00::7]:7077')
    """
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def peer_map(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{copy: "podIP:dataPort"}`` of the running task pods among ``pods`` (Running,
    with an IP, not being deleted). Two such pods of one task (a replacement that runs
    before the old pod's deletion shows) give the one of the higher fencing epoch.

    >>> def pod(task, ip, phase="Running", epoch="0"):
    ...     return {"metadata": {"name": "t--" + task, "labels": {
    ...         "streams.backstop.dev/task": task}, "annotations": {
    ...         "streams.backstop.dev/epoch": epoch}}, "status": {"phase": phase, "podIP": ip}}
    >>> peer_map([pod("a-0", "10.0.0.1"), pod("b-0", "10.0.0.2", "Pending"),
    ...           pod("a-0", "10.0.0.3", epoch="2"), pod("c-0", None)])
    {'a-0': '10.0.0.3:7077'}
    >>> replica = pod("a-0", "10.0.0.4")
    >>> replica["metadata"].update(name="t--a-0--r0")
    >>> replica["metadata"]["labels"]["streams.backstop.dev/role"] = "replica"
    >>> peer_map([pod("a-0", "10.0.0.1"), replica])
    {'a-0': '10.0.0.1:7077', 'a-0#r0': '10.0.0.4:7077'}
    """
    best: dict[str, tuple[int, str, str]] = {}
    for pod in pods:
        found = _running_copy(pod)
        if found is None:
            continue
        task, ip = found
        rank = (_epoch(pod), str((pod.get("metadata") or {}).get("name", "")))
        here = (*rank, address(ip, _port(pod, "data", DATA_PORT)))
        if task not in best or here[:2] > best[task][:2]:
            best[task] = here
    return {task: where for task, (_, _, where) in sorted(best.items())}


@dataclass(frozen=True)
class Target:
    """A task pod to push to: where its endpoint is and which incarnation it is."""

    pod: str
    url: str
    operator: str
    incarnation: tuple[str, int]
    """``(podIP, restartCount)``: a new pod or a restarted container holds no map yet."""
    promote: int | None = None
    """For a replica's pod promoted to primary (:mod:`backstop.domain.promotion`): the
    operator epoch its push tells it to claim with; ``None`` for every other pod."""


def _promoted_epoch(pod: Mapping[str, Any]) -> int | None:
    """The epoch of a replica's pod that is labelled primary (a promoted replica), else
    ``None``.

    >>> meta = {"name": "t--a-0--r1", "labels": {"streams.backstop.dev/role": "primary"},
    ...         "annotations": {"streams.backstop.dev/epoch": "2"}}
    >>> _promoted_epoch({"metadata": meta})
    2
    >>> _promoted_epoch({"metadata": {**meta, "name": "t--a-0"}}) is None
    True
    """
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_ROLE, "primary") != "primary":
        return None
    return None if _replica_number(meta) is None else _epoch(pod)


def targets(pods: Iterable[Mapping[str, Any]]) -> list[Target]:
    """The pods to push to: the running copies of :func:`peer_map`, each with its
    ``PUT /peers`` URL on its ``metrics`` port.

    >>> pod = {"metadata": {"name": "t--a-0", "labels": {"streams.backstop.dev/task": "a-0",
    ...     "streams.backstop.dev/operator": "a"}}, "status": {"phase": "Running",
    ...     "podIP": "10.0.0.1", "containerStatuses": [{"name": "task", "restartCount": 2}]}}
    >>> [(t.pod, t.url, t.operator, t.incarnation) for t in targets([pod])]
    [('t--a-0', 'http://10.0.0.1:9090/peers', 'a', ('10.0.0.1', 2))]
    """
    out = []
    for pod in pods:
        found = _running_copy(pod)
        if found is None:
            continue
        meta = pod.get("metadata") or {}
        restarts = sum(
            int(cs.get("restartCount") or 0)
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if cs.get("name") == "task"
        )
        ip = found[1]
        out.append(
            Target(
                pod=str(meta.get("name", "")),
                url=f"http://{address(ip, _port(pod, 'metrics', METRICS_PORT))}/peers",
                operator=str((meta.get("labels") or {}).get(LABEL_OPERATOR, "")),
                incarnation=(ip, restarts),
                promote=_promoted_epoch(pod),
            )
        )
    return sorted(out, key=lambda t: t.pod)


def operator_inputs(spec: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """``{operator: the operators it reads from}`` of a topology's spec (as stored).

    >>> operator_inputs({"operators": [{"name": "src"},
    ...     {"name": "count", "inputs": [{"operator": "src"}]}]})
    {'src': frozenset(), 'count': frozenset({'src'})}
    """
    out: dict[str, frozenset[str]] = {}
    for op in spec.get("operators") or []:
        if isinstance(op, Mapping) and op.get("name"):
            ins = op.get("inputs") or []
            out[str(op["name"])] = frozenset(
                str(i["operator"]) for i in ins if isinstance(i, Mapping) and i.get("operator")
            )
    return out


def map_for(
    full: Mapping[str, str], operator: str, inputs: Mapping[str, frozenset[str]]
) -> dict[str, str]:
    """The part of ``full`` a task of ``operator`` reads from: its input operators'
    tasks (the whole map for an operator the spec does not name, a spec edited since).

    >>> full = {"src-0": "10.0.0.1:7077", "count-0": "10.0.0.2:7077"}
    >>> inputs = {"src": frozenset(), "count": frozenset({"src"})}
    >>> map_for(full, "count", inputs), map_for(full, "src", inputs)
    ({'src-0': '10.0.0.1:7077'}, {})
    >>> map_for(full, "gone", inputs) == full
    True
    """
    if operator not in inputs:
        return dict(full)
    wanted = inputs[operator]
    return {
        t: a
        for t, a in full.items()
        if t.rsplit("-", 1)[0] in wanted and not _standing_by(t, inputs)
    }


def _standing_by(copy: str, inputs: Mapping[str, frozenset[str]]) -> bool:
    """Whether ``copy`` is a replica of a source: it stands by and serves no batch, so no
    consumer is told of it (a consumer would count it as a producer that does not answer).

    >>> inputs = {"src": frozenset(), "count": frozenset({"src"})}
    >>> _standing_by("src-0#r0", inputs), _standing_by("count-0#r0", inputs)
    (True, False)
    >>> _standing_by("src-0", inputs)
    False
    """
    task, mark, _ = copy.partition(REPLICA_MARK)
    return bool(mark) and inputs.get(task.rsplit("-", 1)[0]) == frozenset()


def fingerprint(peers: Mapping[str, str]) -> str:
    """A short digest of a map, to tell whether a pod holds it already."""
    return hashlib.sha256(json.dumps(peers, sort_keys=True).encode()).hexdigest()[:16]


def _digest(target: Target, digest: str) -> str:
    """What a pod holds once it took a map of ``digest``: with its promotion, if any (a
    promotion of a pod that holds the map already is pushed all the same)."""
    return digest if target.promote is None else f"{digest}+primary@{target.promote}"


@dataclass
class PeerState:
    """What the operator pushed to one topology's pods (in its Kopf memo)."""

    version: int = 0
    """The version of the newest map: it grows whenever the map changes."""
    full: dict[str, str] = field(default_factory=dict)
    """The newest map of the whole topology."""
    held: dict[str, tuple[tuple[str, int], str]] = field(default_factory=dict)
    """Pod name → (incarnation, fingerprint of the map it acknowledged)."""
    failing: dict[str, tuple[tuple[str, int], str, int, float]] = field(default_factory=dict)
    """Pod name → (incarnation, fingerprint, failures in a row, when to try again): a
    pod that does not answer is tried again later and later (:data:`BACKOFF`), so a pod
    that never serves (an endpoint that cannot be reached from the operator) costs
    little; a new incarnation or another map is tried at once."""

    def advance(self, full: Mapping[str, str], now_ms: int) -> bool:
        """Take ``full`` as the newest map if it differs; whether it did.

        The version is the wall clock in milliseconds, or one more than the last if that
        is higher: it grows with every change, and an operator that restarts (or another
        replica taking over) starts above what the previous one sent, so the tasks do not
        ignore it. An operator counter would start again at 1.

        >>> s = PeerState()
        >>> s.advance({"a-0": "10.0.0.1:7077"}, 1000), s.version
        (True, 1000)
        >>> s.advance({"a-0": "10.0.0.1:7077"}, 2000), s.version
        (False, 1000)
        >>> s.advance({"a-0": "10.0.0.2:7077"}, 900), s.version
        (True, 1001)
        """
        if self.version and dict(full) == self.full:
            return False
        self.version = max(self.version + 1, now_ms)
        self.full = dict(full)
        return True

    def due(
        self, pods: Iterable[Target], inputs: Mapping[str, frozenset[str]], now: float = 0.0
    ) -> list[tuple[Target, dict[str, str]]]:
        """The pods that do not hold their part of the newest map, with that part. Pods
        gone from ``pods`` are forgotten; a pod that reads from no running task and held
        nothing before (a source, say) is sent nothing.

        >>> s = PeerState()
        >>> _ = s.advance({"src-0": "10.0.0.1:7077"}, 1000)
        >>> src = Target("t--src-0", "http://10.0.0.1:9090/peers", "src", ("10.0.0.1", 0))
        >>> sink = Target("t--sink-0", "http://10.0.0.2:9090/peers", "sink", ("10.0.0.2", 0))
        >>> inputs = {"src": frozenset(), "sink": frozenset({"src"})}
        >>> [(t.pod, part) for t, part in s.due([src, sink], inputs)]
        [('t--sink-0', {'src-0': '10.0.0.1:7077'})]
        """
        present = list(pods)
        names = {t.pod for t in present}
        self.held = {p: h for p, h in self.held.items() if p in names}
        self.failing = {p: f for p, f in self.failing.items() if p in names}
        out = []
        parts: dict[str, tuple[dict[str, str], str]] = {}  # one per operator, not per pod
        for target in present:
            if target.operator not in parts:
                part = map_for(self.full, target.operator, inputs)
                parts[target.operator] = (part, fingerprint(part))
            part, digest = parts[target.operator]
            mine = (target.incarnation, _digest(target, digest))
            held = self.held.get(target.pod)
            if held == mine:
                continue
            if not part and target.promote is None and (held is None or held[0] != mine[0]):
                continue  # nothing to say to a process that holds no map
            failing = self.failing.get(target.pod)
            if failing is not None and failing[:2] == mine and now < failing[3]:
                continue  # backing off
            out.append((target, part))
        return out

    def retry_due(self, now: float) -> bool:
        """Whether a pod that did not take its map is to be tried again by ``now``."""
        return any(f[3] <= now for f in self.failing.values())

    def failed(self, target: Target, part: Mapping[str, str], now: float) -> float:
        """``target`` did not take ``part``; when it is tried again (``now`` + backoff).

        >>> s, t = PeerState(), Target("p", "http://10.0.0.1:9090/peers", "a", ("10.0.0.1", 0))
        >>> [s.failed(t, {}, 100.0) for _ in range(7)]
        [101.0, 102.0, 104.0, 108.0, 116.0, 130.0, 130.0]
        """
        mine = (target.incarnation, _digest(target, fingerprint(part)))
        before = self.failing.get(target.pod)
        n = before[2] + 1 if before is not None and before[:2] == mine else 1
        again = now + min(BACKOFF_MAX, BACKOFF * float(2 ** min(n - 1, 16)))
        self.failing[target.pod] = (*mine, n, again)
        return again

    def delivered(self, target: Target, part: Mapping[str, str]) -> None:
        """``target`` acknowledged ``part``."""
        self.held[target.pod] = (target.incarnation, _digest(target, fingerprint(part)))
        self.failing.pop(target.pod, None)
