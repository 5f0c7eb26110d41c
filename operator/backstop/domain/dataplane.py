"""Node loss noticed on the data plane and confirmed by the operator: the pure decisions.

Tasks notice a silent or broken producer within about a second (heartbeats on idle
connections, see ``runtime/backstop_runtime/suspects.py``) and list it at ``GET /suspects``.
The operator reads those lists (:mod:`backstop.controller.dataplane`) and groups the
suspected tasks by the node their pod runs on (:func:`suspected_nodes`). A suspicion is no
verdict: the operator then asks every task pod of the topology on that node itself, and
:func:`confirm` calls the node lost only when none of them answers. A node with one pod
that answers is alive (only some of its tasks are in trouble, which the pod-level paths
handle), and a node whose pods were not all asked is not judged.

The operator is a watcher too (:func:`own_suspicions`): a node none of whose known pods
answers the operator's own poll is suspected as if a peer had said so. That is what
notices a lost node that ran every task of a topology, where no peer is left to suspect
it. Before it calls a node lost, the operator tries the node's kubelet: a kubelet that
accepts a connection is a machine that runs, so silent pods on it are the pods' own
trouble (a crashed container, which the kubelet reports and restarts) or a cut in the
pods' network only; the node is lost only if they stay silent for :data:`PARTITION`
seconds all the same.

A wrong verdict is safe, not free: the node's tasks are fenced with new epochs and
recreated elsewhere, so the worst case is one extra copy and a replay (the old copy is
fenced out by the store, see :mod:`backstop.domain.fencing`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from backstop.domain.constants import LABEL_ROLE, LABEL_TASK, METRICS_PORT
from backstop.domain.incidents import NodeInfo
from backstop.domain.peers import address

MAX_LISTED = 8
"""Tasks named in a verdict's message before it says ``…``."""
HOLD = 300.0
"""Seconds a confirmed loss stands while the node's Ready condition stays True: long past
the node-monitor's grace (a lost node turns NotReady within about 40 s), so a node the
operator alone could not reach (a partition between the two) comes back afterwards."""
PARTITION = 10.0
"""Seconds a node's task pods may stay silent while its kubelet answers before the node
counts as lost: long enough for the kubelet to report a crashed container (a new
incarnation, or one no longer running, is not asked), short against the node-monitor's
40 s, which never notices a node whose pods alone are cut off."""
OPERATOR = "operator"
"""The reporter of the operator's own suspicions."""


@dataclass(frozen=True)
class Suspicion:
    """One task's report that a producer does not answer."""

    reporter: str
    task: str
    since: float
    """Epoch seconds since when the reporter has heard nothing (or the break)."""
    reason: str


@dataclass(frozen=True)
class TaskPod:
    """A running primary task pod: where it runs and where its metrics port is."""

    task: str
    pod: str
    node: str
    endpoint: str
    """``ip:port`` of the pod's metrics port (``/suspects``, ``/ready``)."""
    restarts: int = 0
    """The task container's restarts: with the pod and endpoint, its incarnation."""


def _metrics_port(pod: Mapping[str, Any]) -> int:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or [] if c.get("name") == "task" else []:
            if p.get("name") == "metrics" and p.get("containerPort"):
                return int(p["containerPort"])
    return METRICS_PORT


def _task_container(pod: Mapping[str, Any]) -> tuple[bool, int]:
    """Whether the task container runs as far as the kubelet said (a status without it
    says nothing against it), and its restarts."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == "task":
            running = (cs.get("state") or {}).get("running") is not None
            return running, int(cs.get("restartCount") or 0)
    return True, 0


def task_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, TaskPod]:
    """``{task: TaskPod}`` of the running primary pods (Running, with an IP and a node,
    not being deleted, the task container not reported stopped by its kubelet): the
    pods that can report and be asked. A container the kubelet saw end is not a node's
    loss: its kubelet is there (the pod-level paths handle it).

    >>> pod = {"metadata": {"name": "t--a-0", "labels": {"streams.backstop.dev/task": "a-0"}},
    ...        "spec": {"nodeName": "n1"}, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    >>> task_pods([pod])["a-0"]
    TaskPod(task='a-0', pod='t--a-0', node='n1', endpoint='10.0.0.1:9090', restarts=0)
    >>> task_pods([{**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "x"}}])
    {}
    """
    out: dict[str, TaskPod] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        task, ip = labels.get(LABEL_TASK), status.get("podIP")
        node = (pod.get("spec") or {}).get("nodeName")
        if not task or not ip or not node or meta.get("deletionTimestamp"):
            continue
        if status.get("phase") != "Running" or labels.get(LABEL_ROLE, "primary") != "primary":
            continue
        running, restarts = _task_container(pod)
        if not running:
            continue
        endpoint = address(str(ip), _metrics_port(pod))
        name = str(meta.get("name", ""))
        out[str(task)] = TaskPod(str(task), name, str(node), endpoint, restarts)
    return out


@dataclass
class PollBackoff:
    """Which pods a round polls, and which have answered: a pod that did not answer is
    asked again after a delay that doubles up to :attr:`longest` (one that is starting,
    or an endpoint nobody serves, e.g. a simulated node's pod), so a round costs about
    one request per live pod. Only a pod that has answered once (:meth:`known`) counts
    in a verdict: the silence of one still starting (restoring its checkpoint before it
    serves) says nothing of its node. Both are kept per incarnation (pod, endpoint,
    restarts): a new pod, IP or container starts afresh.

    >>> b, p = PollBackoff(), TaskPod("a-0", "pa", "n1", "10.0.0.1:9090")
    >>> b.failed(p, now=0.0); [x.pod for x in b.due([p], now=0.5)], b.due([p], now=1.0) == [p]
    ([], True)
    >>> b.failed(p, now=1.0); b.due([p], now=2.5), b.due([p], now=3.0) == [p]
    ([], True)
    >>> b.known(p), b.answered(p), b.due([p], now=3.0) == [p], b.known(p)
    (False, None, True, True)
    """

    first: float = 1.0
    longest: float = 30.0
    waits: dict[tuple[str, str, int], tuple[float, float]] = field(default_factory=dict)
    """Incarnation → (when to ask again, the delay before that)."""
    seen: set[tuple[str, str, int]] = field(default_factory=set)
    """Incarnations that have answered a poll."""

    @staticmethod
    def _key(pod: TaskPod) -> tuple[str, str, int]:
        return pod.pod, pod.endpoint, pod.restarts

    def due(self, pods: Iterable[TaskPod], now: float) -> list[TaskPod]:
        """The pods to poll now."""
        return [p for p in pods if self.waits.get(self._key(p), (0.0, 0.0))[0] <= now]

    def failed(self, pod: TaskPod, now: float) -> None:
        key = self._key(pod)
        _, delay = self.waits.get(key, (0.0, 0.0))
        delay = min(self.longest, max(self.first, 2 * delay))
        self.waits[key] = (now + delay, delay)

    def answered(self, pod: TaskPod) -> None:
        self.waits.pop(self._key(pod), None)
        self.seen.add(self._key(pod))

    def known(self, pod: TaskPod) -> bool:
        """Whether this incarnation of ``pod`` has answered a poll."""
        return self._key(pod) in self.seen

    def forget_except(self, pods: Iterable[TaskPod]) -> None:
        """Drop what is kept of pods that are gone."""
        keep = {self._key(p) for p in pods}
        for key in [k for k in self.waits if k not in keep]:
            del self.waits[key]
        self.seen &= keep


def parse_suspects(reporter: str, doc: Any) -> list[Suspicion]:
    """The suspicions in a task's ``GET /suspects`` answer; what is malformed is dropped.

    >>> parse_suspects("b-0", [{"task": "a-0", "since": 5.0, "reason": "silent for 1.0s"},
    ...                        {"task": 3}, "x"])
    [Suspicion(reporter='b-0', task='a-0', since=5.0, reason='silent for 1.0s')]
    """
    out = []
    for item in doc if isinstance(doc, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("task"), str):
            continue
        try:
            since = float(item.get("since", 0.0))
        except (TypeError, ValueError):
            continue
        out.append(Suspicion(reporter, item["task"], since, str(item.get("reason", ""))))
    return out


def suspected_nodes(
    suspicions: Iterable[Suspicion],
    pods: Mapping[str, TaskPod],
    ready: Collection[str],
) -> dict[str, list[Suspicion]]:
    """The nodes to confirm: ``{node: its suspicions}``, for nodes that the node index
    still calls Ready (a NotReady node is the node-monitor's already). Suspicions of a
    task without a running pod are dropped (it is being recreated anyway).

    >>> pods = {t: TaskPod(t, "p-" + t, n, "") for t, n in [("a-0", "n1"), ("b-0", "n2")]}
    >>> s = [Suspicion("b-0", "a-0", 1.0, "silent"), Suspicion("b-0", "z-0", 1.0, "silent")]
    >>> {n: [x.task for x in found] for n, found in suspected_nodes(s, pods, {"n1"}).items()}
    {'n1': ['a-0']}
    >>> suspected_nodes(s, pods, ready={"n2"})  # n1 is NotReady: the node-monitor's
    {}
    """
    out: dict[str, list[Suspicion]] = {}
    for s in suspicions:
        pod = pods.get(s.task)
        if pod is not None and pod.node in ready:
            out.setdefault(pod.node, []).append(s)
    return out


def own_suspicions(
    known: Mapping[str, TaskPod], silent: Collection[str], now: float
) -> list[Suspicion]:
    """The operator's own suspicions: every known pod (``known``, task → pod) of each node
    on which all of them are ``silent`` (their last poll went unanswered).

    >>> known = {t: TaskPod(t, "p-" + t, n, "") for t, n in [("a-0", "n1"), ("b-0", "n1"),
    ...                                                       ("c-0", "n2")]}
    >>> [s.task for s in own_suspicions(known, {"a-0", "b-0", "c-0"}, 5.0)]
    ['a-0', 'b-0', 'c-0']
    >>> [s.task for s in own_suspicions(known, {"a-0"}, 5.0)]
    []
    """
    on: dict[str, list[TaskPod]] = {}
    for p in known.values():
        on.setdefault(p.node, []).append(p)
    out: list[Suspicion] = []
    for pods in on.values():
        if all(p.task in silent for p in pods):
            reason = "no answer to the operator's poll"
            out.extend(Suspicion(OPERATOR, p.task, now, reason) for p in pods)
    return out


@dataclass(frozen=True)
class Verdict:
    """What the operator concludes about one suspected node."""

    node: str
    lost: bool
    message: str


def _names(items: Iterable[str]) -> str:
    names = sorted(set(items))
    more = ", …" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


def confirm(
    node: str,
    suspicions: Sequence[Suspicion],
    on_node: Sequence[TaskPod],
    answered: Mapping[str, bool],
    tries: int,
    kubelet: bool | None = None,
    silent_for: float = 0.0,
) -> Verdict:
    """The verdict on ``node``: lost when it has suspicions and none of the topology's task
    pods on it (``on_node``) answered any of ``tries`` probes (``answered``: pod name →
    whether it answered; a pod missing from it was not asked, so nothing is concluded),
    unless its ``kubelet`` answered (``None``: not asked) and they have been silent for
    less than :data:`PARTITION` seconds (``silent_for``).

    >>> p = [TaskPod("a-0", "pa", "n1", ""), TaskPod("c-0", "pc", "n1", "")]
    >>> s = [Suspicion("b-0", "a-0", 1.0, "silent for 1.2s")]
    >>> confirm("n1", s, p, {"pa": False, "pc": False}, 2).lost
    True
    >>> confirm("n1", s, p, {"pa": False, "pc": True}, 2).lost
    False
    >>> confirm("n1", s, p, {"pa": False, "pc": False}, 2, kubelet=True).lost
    False
    >>> confirm("n1", s, p, {"pa": False, "pc": False}, 2, kubelet=True, silent_for=12.0).lost
    True
    """
    suspected = _names(s.task for s in suspicions)
    reporters = _names(s.reporter for s in suspicions)
    reasons = "; ".join(sorted({s.reason for s in suspicions})[:3])
    said = f"{suspected} suspected by {reporters} ({reasons})"
    if not suspicions or not on_node:
        return Verdict(node, False, f"node {node}: nothing to confirm")
    unasked = [p.pod for p in on_node if p.pod not in answered]
    if unasked:
        return Verdict(node, False, f"node {node}: {said}; {_names(unasked)} not asked yet")
    alive = [p.task for p in on_node if answered[p.pod]]
    if alive:
        return Verdict(
            node,
            False,
            f"node {node}: {said}, but {_names(alive)} on it answered: a false suspicion",
        )
    silent = f"none of its {len(on_node)} task pods answered {tries} requests"
    if kubelet and silent_for < PARTITION:
        return Verdict(
            node,
            False,
            f"node {node}: {said}; {silent}, but its kubelet answers: a false suspicion "
            f"unless they stay silent for {PARTITION:g}s",
        )
    if kubelet:
        return Verdict(
            node,
            True,
            f"node {node} lost (data plane): {said}; its {len(on_node)} task pods silent "
            f"for {silent_for:.1f}s although its kubelet answers (their network is cut off)",
        )
    why = "; its kubelet does not answer either" if kubelet is False else ""
    return Verdict(node, True, f"node {node} lost (data plane): {said}; {silent}{why}")


def with_confirmed(
    nodes: Mapping[str, NodeInfo], confirmed: Mapping[str, float], now: float, hold: float = HOLD
) -> dict[str, NodeInfo]:
    """The node index as recovery sees it: a node confirmed lost at ``confirmed[node]``
    (epoch seconds) is NotReady and unschedulable since then, and lost at once
    (:attr:`NodeInfo.confirmed_lost`), for ``hold`` seconds while the index still calls
    it Ready. Once its Ready condition turns False the index's own view is used: the
    node-monitor caught up, and the loss stays recorded in the recovery session. So it
    is too once the condition has turned since the confirmation (False, then True
    again): the node came back, and a recovery waiting for capacity may use it at once.

    >>> up = NodeInfo("n1", True, 10.0, 4, True, False)
    >>> seen = with_confirmed({"n1": up}, {"n1": 100.0}, now=101.0)["n1"]
    >>> seen.ready, seen.schedulable, seen.since, seen.confirmed_lost
    (False, False, 100.0, 100.0)
    >>> with_confirmed({"n1": up}, {"n1": 100.0}, now=500.0)["n1"] is up
    True
    >>> back = NodeInfo("n1", True, 130.0, 4, True, False)  # Ready again since 130
    >>> with_confirmed({"n1": back}, {"n1": 100.0}, now=140.0)["n1"] is back
    True
    """
    out = dict(nodes)
    for node, at in confirmed.items():
        info = out.get(node)
        if info is None or not info.ready or info.since > at or now - at >= hold:
            continue
        out[node] = replace(info, ready=False, schedulable=False, since=at, confirmed_lost=at)
    return out
