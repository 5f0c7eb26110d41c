"""The operator's poll and probe against real task endpoints on 127.0.0.1.

The reporter is the task runtime's own HTTP endpoint (``httpmetrics.serve``) with a
suspicion in its process; a suspected pod is a port that accepts and never answers (a
stopped process, a vanished machine behind a kernel that still accepts) or a closed port;
an answering pod is another runtime endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from backstop.controller import dataplane
from backstop.controller import memo as topology_memo
from backstop.domain.dataplane import PollBackoff, Verdict, task_pods
from backstop.domain.incidents import NodeInfo
from backstop_runtime import httpmetrics, suspects
from backstop_testkit.support.kubetools import free_port


def _pod(task: str, node: str, port: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"topo--{task}", "labels": {"streams.backstop.dev/task": task}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "task", "ports": [{"name": "metrics", "containerPort": port}]}],
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


NODES = {n: NodeInfo(n, True, 0.0, 4, True, False) for n in ("n1", "n2")}


@asynccontextmanager
async def _endpoints() -> AsyncIterator[Callable[[str], int]]:
    """``port("reporter" | "answering" | "silent" | "closed")``, served meanwhile."""
    servers: list[asyncio.Server] = []
    hung: list[asyncio.StreamWriter] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)  # accepted, never answered

    async def port_of(kind: str) -> int:
        if kind == "closed":
            return free_port()
        if kind == "silent":
            server = await asyncio.start_server(hang, "127.0.0.1", 0)
        else:
            server = await httpmetrics.serve(0, kind, lambda: {"unanswered": {}}, token="t")
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    ports = {k: await port_of(k) for k in ("reporter", "answering", "silent", "closed")}
    try:
        yield ports.__getitem__
    finally:
        for w in hung:
            w.close()
        for s in servers:
            s.close()


def _round(layout: dict[str, tuple[str, str]], nodes: dict[str, NodeInfo] = NODES) -> Any:
    """Run one confirmation round over pods ``{task: (node, endpoint kind)}``; the
    verdicts and the seconds it took."""

    async def go() -> tuple[list[Verdict], float]:
        async with _endpoints() as port:
            pods = [_pod(t, n, port(kind)) for t, (n, kind) in layout.items()]
            began = time.monotonic()
            backoff = PollBackoff()
            for p in task_pods(pods).values():
                backoff.answered(p)  # each answered a poll before this round
            verdicts = await dataplane.confirm_round(pods, nodes, {}, backoff)
            return verdicts, time.monotonic() - began

    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _suspicion() -> Any:
    suspects.SUSPECTS.clear()
    suspects.suspect("src-0", "silent for 1.2s")
    yield
    suspects.SUSPECTS.clear()


def test_a_node_whose_pods_do_not_answer_is_confirmed_lost_within_about_a_second() -> None:
    verdicts, took = _round(
        {"sink-0": ("n2", "reporter"), "src-0": ("n1", "silent"), "count-0": ("n1", "closed")}
    )
    assert [(v.node, v.lost) for v in verdicts] == [("n1", True)]
    assert "src-0 suspected by operator, sink-0" in verdicts[0].message
    assert "(no answer to the operator's poll; silent for 1.2s)" in verdicts[0].message
    assert took < 1.3, took  # the poll (0.5 s at most) and one probe of 0.5 s


def _alone(kubelet: str, silent_for: float = 0.0) -> list[Verdict]:
    """One round over a topology whose every pod runs on ``n1`` and is silent, so that no
    peer reports anything; ``n1``'s kubelet endpoint ``kubelet`` ("", "silent": accepts,
    "closed"); its pods silent since ``silent_for`` seconds before the round."""

    async def go() -> list[Verdict]:
        suspects.SUSPECTS.clear()
        async with _endpoints() as port:
            pods = [_pod("src-0", "n1", port("silent")), _pod("sink-0", "n1", port("closed"))]
            endpoint = f"127.0.0.1:{port(kubelet)}" if kubelet else ""
            nodes = {**NODES, "n1": NodeInfo("n1", True, 0.0, 4, True, False, kubelet=endpoint)}
            backoff = PollBackoff()
            for p in task_pods(pods).values():
                backoff.answered(p)
            silence = {"n1": time.monotonic() - silent_for} if silent_for else {}
            return await dataplane.confirm_round(pods, nodes, {}, backoff, silence=silence)

    return asyncio.run(go())


def test_a_node_that_ran_every_task_is_suspected_by_the_operator_itself() -> None:
    """No peer is left to suspect it: the operator's own poll goes unanswered."""
    verdicts = _alone(kubelet="")
    assert [(v.node, v.lost) for v in verdicts] == [("n1", True)]
    assert "suspected by operator (no answer to the operator's poll)" in verdicts[0].message


def test_a_node_whose_kubelet_does_not_answer_is_lost() -> None:
    verdicts = _alone(kubelet="closed")
    assert [(v.node, v.lost) for v in verdicts] == [("n1", True)]
    assert "its kubelet does not answer either" in verdicts[0].message


def test_silent_pods_on_a_node_whose_kubelet_answers_are_not_a_loss_at_first() -> None:
    """A crashed container the kubelet has not reported yet, or a short cut in the pods'
    network: the machine runs."""
    verdicts = _alone(kubelet="silent")
    assert [(v.node, v.lost) for v in verdicts] == [("n1", False)]
    assert "but its kubelet answers: a false suspicion" in verdicts[0].message


def test_pods_silent_for_long_on_a_live_kubelet_are_a_lost_node() -> None:
    """Their network is cut off: the node-monitor would never notice it."""
    verdicts = _alone(kubelet="silent", silent_for=11.0)
    assert [(v.node, v.lost) for v in verdicts] == [("n1", True)]
    assert "although its kubelet answers" in verdicts[0].message


def test_a_node_with_a_pod_that_answers_is_a_false_suspicion() -> None:
    verdicts, _ = _round(
        {"sink-0": ("n2", "reporter"), "src-0": ("n1", "silent"), "count-0": ("n1", "answering")}
    )
    assert [(v.node, v.lost) for v in verdicts] == [("n1", False)]
    assert "false suspicion" in verdicts[0].message and "count-0" in verdicts[0].message


def test_a_suspected_pod_that_answers_itself_is_not_lost() -> None:
    verdicts, _ = _round({"sink-0": ("n2", "reporter"), "src-0": ("n1", "answering")})
    assert [(v.node, v.lost) for v in verdicts] == [("n1", False)]


def test_a_not_ready_node_is_left_to_the_node_monitor() -> None:
    down = {**NODES, "n1": NodeInfo("n1", False, 0.0, 4, False, False)}
    verdicts, _ = _round({"sink-0": ("n2", "reporter"), "src-0": ("n1", "silent")}, down)
    assert verdicts == []


def test_a_confirmed_loss_is_recorded_and_wakes_the_supervisor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        dataplane,
        "post_event",
        lambda body, reason, msg, warning=False: posted.append((reason, msg)),
    )
    verdicts, _ = _round({"sink-0": ("n2", "reporter"), "src-0": ("n1", "closed")})
    mem = topology_memo.TopologyMemo()
    watch = topology_memo.NodeWatch()
    seen = watch.changes
    import logging

    assert dataplane.act(verdicts, mem, {}, logging.getLogger("t"), now=100.0)  # type: ignore[arg-type]
    watch.poke()
    assert mem.dataplane_lost == {"n1": 100.0} and watch.wait(seen, 0.01)
    assert [r for r, _ in posted] == ["NodeLost"] and "src-0" in posted[0][1]
    # a later round forgets it after the hold, the node-monitor's view takes over
    assert not dataplane.act([], mem, {}, logging.getLogger("t"), now=100.0 + 301)  # type: ignore[arg-type]
    assert mem.dataplane_lost == {}


def test_a_pod_that_does_not_answer_is_polled_less_but_still_probed() -> None:
    async def go() -> tuple[list[Verdict], list[Verdict], PollBackoff]:
        backoff = PollBackoff()
        async with _endpoints() as port:
            pods = [_pod("sink-0", "n2", port("reporter")), _pod("src-0", "n1", port("silent"))]
            for p in task_pods(pods).values():
                backoff.answered(p)
            first = await dataplane.confirm_round(pods, NODES, {}, backoff)
            asked_again = [p.task for p in backoff.due(task_pods(pods).values(), time.monotonic())]
            assert asked_again == ["sink-0"], "the silent pod backs off"
            second = await dataplane.confirm_round(pods, NODES, {}, backoff)
            return first, second, backoff

    first, second, backoff = asyncio.run(go())
    assert [(v.node, v.lost) for v in first] == [("n1", True)]
    assert [(v.node, v.lost) for v in second] == [("n1", True)], "its probes alone confirm it"
    assert [key[0] for key in backoff.waits] == ["topo--src-0"]


def test_a_pod_that_never_answered_is_starting_and_not_judged() -> None:
    """A new pod restores its checkpoint before it serves: its silence says nothing."""

    async def go() -> list[Verdict]:
        async with _endpoints() as port:
            pods = [_pod("sink-0", "n2", port("reporter")), _pod("src-0", "n1", port("closed"))]
            return await dataplane.confirm_round(pods, NODES, {}, PollBackoff())

    assert asyncio.run(go()) == []


def test_a_container_its_kubelet_saw_stop_is_not_a_node_loss() -> None:
    pod = _pod("src-0", "n1", 9090)
    pod["status"]["containerStatuses"] = [
        {"name": "task", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]
    assert task_pods([pod]) == {}
    pod["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert task_pods([pod])["src-0"].restarts == 3


class _Once:
    """A daemon's ``stopped`` flag that turns true once the daemon has slept once."""

    def __init__(self) -> None:
        self.rounds = 0

    def __bool__(self) -> bool:
        self.rounds += 1
        return self.rounds > 1


def test_the_daemon_records_a_loss_and_wakes_the_supervisor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon's wiring: the topology's pods from the index, the node index, the memo
    the supervisor reads (:func:`backstop.domain.dataplane.with_confirmed`), its wake-up."""
    posted: list[str] = []

    def post(body: Any, reason: str, message: str, warning: bool = False) -> None:
        posted.append(reason)

    monkeypatch.setattr(dataplane, "post_event", post)
    monkeypatch.setattr(dataplane, "PollBackoff", _Knowing)
    memo: dict[str, Any] = {"node_watch": topology_memo.NodeWatch()}
    seen = memo["node_watch"].changes

    async def go() -> None:
        async with _endpoints() as port:
            pods = [_pod("sink-0", "n2", port("reporter")), _pod("src-0", "n1", port("silent"))]
            kwargs: dict[str, Any] = dict(
                meta={"uid": "u1"},
                body={},
                stopped=_Once(),
                memo=memo,
                pods_by_topology={("ns", "topo"): pods},
                topologies={("ns", "topo"): ["u1"]},
                node_index={n: [info] for n, info in NODES.items()},
            )
            await dataplane.run("topo", "ns", logger=logging.getLogger("t"), **kwargs)

    asyncio.run(go())
    assert list(topology_memo.of(memo).dataplane_lost) == ["n1"]
    assert posted == ["NodeLost"] and memo["node_watch"].changes > seen


class _Knowing(PollBackoff):
    """A backoff that has seen every pod answer before (earlier rounds)."""

    def known(self, pod: Any) -> bool:
        return True
