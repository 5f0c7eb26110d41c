"""Node loss on the data plane and on the node monitor, with the word count on REAL nodes.

The shared environment (``wordcount_env.py``: three real nodes, SeaweedFS outside them, the
operator as a host process) runs the word count with a fault mid-stream, and each time the
sink's output must be the reference run's, line for line, and the counts this test
computes from the input (``exact_output``).

1. A node is cut off the network for 3 s (iptables on this host: its pods reach neither
   the other nodes' pods nor this host, where the operator and the store run), then
   healed. Its kubelet goes on, so the node stays Ready. The tasks on the other nodes
   suspect its tasks within about a second (``runtime/backstop_runtime/suspects.py``) and
   the operator's own poll goes unanswered; the operator asks the node's pods itself
   (``backstop.k8s.suspectpoll``: 2 tries of 0.5 s), none answers, and it tries the
   node's kubelet, which accepts: a machine that runs, so a false suspicion (unless the
   pods stayed silent for ``PARTITION`` seconds). It says so in its log, recovers nothing,
   and the stream goes on where it was once the network is back. Consumers notice a silent
   producer and producers a silent consumer, so the node cut is the one with the most
   tasks among those talking to another node (:func:`watched_busiest`).
2. Every task runs on one node (a node selector only it carries, 100m CPU per task), and
   that node is killed: no peer is left to suspect anything, but the operator's own poll
   goes unanswered and so does the node's kubelet: the recovery starts within about a
   second with the trigger ``DataPlane``.
3. The same with the operator's poll turned off (``BACKSTOP_SUSPECT_POLL_SECONDS=0``), as
   when the operator cannot reach the pods: the recovery comes from the node monitor
   (NotReady, then the grace period), its RecoveryPlans carry the trigger ``NodeLost``.

Each test prints its timeline, measured by this test: the operator's plain log has no
timestamps, so a thread stamps each new line as it appears (:class:`LogClock`).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, METRICS_PORT
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import node_ready, wait_for
from backstop_testkit.support.realnodes import (
    containerd_socket,
    cut_node_network,
    process_gone,
    tagged_rules,
    task_pids,
)
from backstop_testkit.support.runtime_data import WORDCOUNT
from tests.realnodes.wordcount_env import (
    KILL_RATE,
    POOL,
    Env,
    Placement,
    exact_output,
    recovery_plans,
    under_way,
    wait_recreated,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

CUT_SECONDS = 3.0
SOLO = "test.backstop.dev/solo"  # the node selector of the run on one node


class LogClock:
    """The operator log's lines from now on, each with the time (monotonic) at which this
    test first saw it, read every ``every`` seconds by a thread while in a ``with``."""

    def __init__(self, path: Path, every: float = 0.05) -> None:
        self.path, self.every = path, every
        self.offset = path.stat().st_size
        self.lines: list[tuple[float, str]] = []
        self._rest = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LogClock:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(5)
        self._read()

    def _read(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        now = time.monotonic()
        *done, self._rest = (self._rest + data).split(b"\n")
        with self._lock:
            self.lines.extend((now, line.decode(errors="replace")) for line in done)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._read()

    def first(self, pred: Callable[[str], bool]) -> tuple[float, str] | None:
        """The first line for which ``pred`` holds, with when it was seen."""
        with self._lock:
            return next(((t, line) for t, line in self.lines if pred(line)), None)

    def wait(self, pred: Callable[[str], bool], timeout: float, what: str) -> tuple[float, str]:
        """The first line for which ``pred`` holds, waiting up to ``timeout`` seconds."""
        found = wait_for(lambda: self.first(pred), timeout, what, 0.05)
        assert found is not None
        return found


def answers(ip: str, timeout: float = 0.5) -> bool:
    """Whether this host reaches the task's metrics port at ``ip`` (a TCP connection)."""
    try:
        socket.create_connection((ip, METRICS_PORT), timeout=timeout).close()
    except OSError:
        return False
    return True


def timeline(origin: float, marks: Sequence[tuple[str, float | None]]) -> str:
    """``what +s`` for each mark, in seconds from ``origin`` (``-`` for a mark not seen)."""
    return ", ".join(f"{what} {'-' if t is None else f'+{t - origin:.1f}s'}" for what, t in marks)


def ready_since(env: Env, node: str) -> float | None:
    """Since when (epoch seconds) ``node`` is Ready, or ``None`` when it is not."""
    for c in env.core.read_node(node).status.conditions or []:
        if c.type == "Ready" and c.status == "True":
            return float(c.last_transition_time.timestamp())
    return None


def consumers() -> dict[str, set[str]]:
    """Each task of the word count (``examples/wordcount.yaml``) and its consumers: the
    instance of the same index over a ``forward`` input, every instance over the others."""
    ops = yaml.safe_load(WORDCOUNT.read_text())["spec"]["operators"]
    width = {op["name"]: int(op.get("parallelism", 1)) for op in ops}
    out: dict[str, set[str]] = {f"{op}-{i}": set() for op, n in width.items() for i in range(n)}
    for op in ops:
        for edge in op.get("inputs") or []:
            up, forward = edge["operator"], edge["grouping"] == "forward"
            for i in range(width[up]):
                out[f"{up}-{i}"] |= {
                    f"{op['name']}-{j}" for j in range(width[op["name"]]) if not forward or i == j
                }
    return out


def placement(pods: list[Any]) -> dict[str, list[str]]:
    """``{node: its tasks}`` of the run's pods."""
    out: dict[str, list[str]] = {}
    for p in pods:
        out.setdefault(p.spec.node_name, []).append(p.metadata.labels[f"{GROUP}/task"])
    return {n: sorted(ts) for n, ts in sorted(out.items())}


def watched_busiest(pods: list[Any]) -> tuple[str, list[str], list[str]]:
    """The node with the most tasks among those with a data connection to another node, its
    tasks, and the tasks elsewhere at the other end (the witnesses): a consumer notices a
    silent producer and a producer a silent consumer, so a node none of whose tasks talks
    to another node's goes unnoticed by the data plane while its kubelet answers (the node
    monitor's path sees no loss either: the node is Ready)."""
    where = {t: n for n, ts in placement(pods).items() for t in ts}
    feeds = consumers()
    links = {(t, c) for t in feeds for c in feeds[t]} | {(c, t) for t in feeds for c in feeds[t]}
    watched = {
        n: sorted({b for a, b in links if where.get(a) == n and where.get(b) not in (None, n)})
        for n in placement(pods)
    }
    candidates = [n for n, ws in watched.items() if ws]
    assert candidates, f"no task talks to another node: {placement(pods)}"
    victim = max(candidates, key=lambda n: len(placement(pods)[n]))
    return victim, placement(pods)[victim], watched[victim]


def verdict_on(node: str) -> Callable[[str], bool]:
    """The data-plane daemon's verdict lines on ``node`` (``domain/dataplane.confirm``)."""
    lost, false = f"node {node} lost (data plane)", f"node {node}: "
    return lambda line: lost in line or (false in line and "a false suspicion" in line)


def test_a_node_cut_off_the_network_for_3_s_is_a_false_suspicion_and_changes_nothing(
    reference: list[str], env: Env
) -> None:
    try:
        cut_run(reference, env, "wc-cut")
    finally:  # a failed run must not hold the nodes' CPU for the runs after it
        env.delete("wc-cut")


def cut_run(reference: list[str], env: Env, name: str) -> None:
    """The cut test's run. 300m per task: the planner packs five on one node and two on a
    second."""
    t0 = time.monotonic()
    env.create(name, KILL_RATE, placement=Placement({POOL: env.nodes[0]}, cpu="300m"))
    pods = under_way(env, name)
    victim, lost, witnesses = watched_busiest(pods)
    print(f"\n{victim} runs {lost}, watched by {witnesses}; placement: {placement(pods)}")
    ips = [p.status.pod_ip for p in pods if p.spec.node_name == victim]
    assert answers(ips[0]), f"{victim}'s pod does not answer even before the cut"
    epochs = {t: env.status(name, t).get("epoch", 0) for t in placement(pods)[victim]}
    with LogClock(env.operator_log) as clock:
        with cut_node_network(env.cluster, victim) as cut:
            cut_at, cut_wall = time.monotonic(), time.time()
            assert not answers(ips[0]), f"the cut of {cut.subnet} lets this host reach {ips[0]}"
            time.sleep(max(0.0, cut_at + CUT_SECONDS - time.monotonic()))
        healed_at = time.monotonic()
        assert tagged_rules(cut.tag) == [], "the cut's rules outlived it"
        verdict = clock.wait(verdict_on(victim), 30, f"a verdict on {victim}")
        env.wait_end(name, 300)
    end_at = time.monotonic()
    print(f"\n{victim} ({cut.subnet}) cut with {lost}: ", end="")
    print(timeline(cut_at, [("verdict", verdict[0]), ("healed", healed_at), ("end", end_at)]))
    print(f"  verdict: {verdict[1]}")
    plans = recovery_plans(env, name)
    since = ready_since(env, victim)
    n = exact_output(env, name, reference)
    after = {t: env.status(name, t).get("epoch", 0) for t in epochs}
    print(f"  run {end_at - t0:.0f}s, {n} lines; plans: {[p['trigger'] for p in plans]}")
    # none of the victim's pods answered, its kubelet did: it said so, and did nothing
    assert "but its kubelet answers: a false suspicion" in verdict[1], verdict[1]
    assert "none of its" in verdict[1] and "task pods answered" in verdict[1], verdict[1]
    assert any(t in verdict[1] for t in lost), f"the verdict names none of {lost}"
    # the operator's own poll may go unanswered before the witnesses' suspicions come in
    reporters = [*witnesses, "operator"]
    assert any(w in verdict[1] for w in reporters), f"no reporter among {reporters}"
    assert verdict[0] < healed_at, "the verdict came only after the network was back"
    assert clock.first(lambda x: f"node {victim} lost (data plane)" in x) is None
    assert plans == [], [p["trigger"] for p in plans]
    assert after == epochs, f"a task of {victim} was restarted: {epochs} -> {after}"
    # the kubelet went on: the node never left Ready (its condition did not change since)
    assert since is not None and since <= cut_wall + 1, f"{victim} was NotReady meanwhile"


@contextlib.contextmanager
def solo_node(env: Env, node: str) -> Iterator[Placement]:
    """Only ``node`` carries the ``SOLO`` label, for the ``with`` block: a run placed with
    the yielded placement has every task on it (7 × 100m fit, and the bound, far above
    the node monitor's detection, holds there, so nothing moves them off later)."""
    try:
        env.core.patch_node(node, {"metadata": {"labels": {SOLO: "on"}}})
        yield Placement({SOLO: "on"}, cpu="100m", bound=600.0)
    finally:
        for n in env.nodes:
            with contextlib.suppress(Exception):
                env.core.patch_node(n, {"metadata": {"labels": {SOLO: None}}})


def kill_node(env: Env, node: str, verb: str = "kill") -> None:
    result = CliRunner().invoke(app, ["nodes", verb, node, "--kubeconfig", env.cluster])
    assert result.exit_code == 0, result.output


def test_a_lost_node_that_ran_every_task_is_noticed_by_the_operator_within_2_s(
    reference: list[str], env: Env
) -> None:
    try:
        solo_run(reference, env, "wc-solo", "DataPlane")
    finally:  # a failed run must not hold the nodes' CPU for the runs after it
        env.delete("wc-solo")


def test_without_the_operator_poll_the_node_monitor_recovers_a_lost_node(
    reference: list[str], env: Env
) -> None:
    with env.operator_with({"BACKSTOP_SUSPECT_POLL_SECONDS": "0"}):
        try:
            solo_run(reference, env, "wc-mon", "NodeLost")
        finally:
            env.delete("wc-mon")


def solo_run(reference: list[str], env: Env, name: str, trigger: str) -> None:
    """A run with every task on one node, that node killed; the recovery's ``trigger``."""
    victim = env.nodes[-1]
    t0 = time.monotonic()
    with solo_node(env, victim) as where:
        env.create(name, KILL_RATE, placement=where)
        pods = under_way(env, name)
        assert {p.spec.node_name for p in pods} == {victim}, "the run is not on one node"
        tasks = sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods)
        epochs = {t: env.status(name, t).get("epoch", 0) for t in tasks}
        for node in env.nodes:  # the other nodes may take the tasks once it is lost
            env.core.patch_node(node, {"metadata": {"labels": {SOLO: "on"}}})
        pids = list(task_pids(containerd_socket(env.cluster, victim)).values())
        assert pids, f"no containers on {victim}"
        with LogClock(env.operator_log) as clock:
            kill_node(env, victim)
            killed_at = time.monotonic()
            try:
                wait_for(lambda: all(process_gone(p) for p in pids), 10, "the containers gone")
                assert not env.status(name, "sink-0").get("eos"), "killed after the end"
                wait_recreated(env, name, tasks, victim)
                recreated_at = time.monotonic()
                env.wait_end(name, 300)
                end_at = time.monotonic()
            finally:
                kill_node(env, victim, "revive")  # the runs after this one have three nodes
        plans = recovery_plans(env, name)
        step = clock.first(lambda x: f"({trigger}) of {env.namespace}/{name}" in x)
        said = clock.first(lambda x: f"node {victim} lost (data plane)" in x)
        restarted = {t: env.status(name, t).get("epoch", 0) for t in tasks}
        n = exact_output(env, name, reference)
    wait_for(lambda: node_ready(env.core, victim), 120, f"{victim} Ready again")
    marks: list[tuple[str, float | None]] = [("killed", killed_at), ("verdict", said and said[0])]
    marks += [("step", step[0] if step else None), ("recreated", recreated_at), ("end", end_at)]
    print(f"\n{victim} killed with all of {tasks}: {timeline(killed_at, marks)}")
    print(f"  verdict: {said[1] if said else '-'}\n  step: {step[1] if step else '-'}")
    print(f"  run {end_at - t0:.0f}s, {n} lines; plans: {[p['trigger'] for p in plans]}")
    # the loss's own plans: a NodeBack step plans for a node coming back (the revive at the
    # end, or the node settling after an earlier test revived it), not for this kill
    lost = [p for p in plans if p["trigger"] != "NodeBack"]
    assert lost and lost[0]["trigger"] == trigger, [p["trigger"] for p in plans]
    assert lost[0]["lostNodes"] == [victim], lost[0]
    assert step is not None, f"no recovery step ({trigger}) in the operator's log"
    assert all(restarted[t] > epochs[t] for t in tasks), (epochs, restarted)
    if trigger == "DataPlane":
        assert said is not None and "suspected by operator" in said[1], said
        assert "its kubelet does not answer either" in said[1], said[1]
        assert said[0] - killed_at < 2.0, f"noticed {said[0] - killed_at:.1f}s after the kill"
    else:
        assert said is None, f"the data plane confirmed a loss with its poll off: {said}"
        assert "DataPlane" not in [p["trigger"] for p in plans], plans
