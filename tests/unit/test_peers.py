"""The operator tells task pods where their producers are: the peer map built from the
topology's pods, and its push (``PUT /peers``) to real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from backstop.controller import peers as peers_daemon
from backstop.controller.memo import TopologyMemo
from backstop.domain.peers import PeerState, map_for, operator_inputs, peer_map, targets
from backstop.domain.spec import expand, parse_spec
from backstop.k8s import peerpush
from backstop.k8s.manifests import Owner, build_task_pod, task_roles
from backstop_runtime import httpmetrics
from backstop_runtime.peermap import PushedPeers
from backstop_testkit.support.kubetools import free_port

LOG = logging.getLogger("test_peers")
SPEC = {
    "operators": [
        {"name": "src"},
        {"name": "count", "inputs": [{"operator": "src"}]},
        {"name": "sink", "inputs": [{"operator": "count"}]},
    ]
}


def pod(
    task: str,
    ip: str | None = "10.0.0.1",
    *,
    phase: str = "Running",
    role: str = "primary",
    epoch: int = 0,
    deleting: bool = False,
    data_port: int | None = None,
    metrics_port: int | None = None,
    restarts: int = 0,
) -> dict[str, Any]:
    """A task pod as the pod index keeps it (``slim_pod``'s shape)."""
    ports = []
    if data_port is not None:
        ports.append({"name": "data", "containerPort": data_port})
    if metrics_port is not None:
        ports.append({"name": "metrics", "containerPort": metrics_port})
    meta: dict[str, Any] = {
        "name": f"wc--{task}" + ("" if role == "primary" else "--r0"),
        "namespace": "ns",
        "labels": {
            "streams.backstop.dev/topology": "wc",
            "streams.backstop.dev/operator": task.rsplit("-", 1)[0],
            "streams.backstop.dev/task": task,
            "streams.backstop.dev/role": role,
        },
        "annotations": {"streams.backstop.dev/epoch": str(epoch)},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "task", "restartCount": restarts}],
    }
    if ip is not None:
        status["podIP"] = ip
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "task", "ports": ports}]},
        "status": status,
    }


# ---- the map, from the pods ------------------------------------------------------------


def daemon_kwargs(memo: Any, stopped: Any, index: Any, key: Any) -> dict[str, Any]:
    """What Kopf passes the peers daemon of topology ``ns/wc`` (uid ``u1``)."""
    return {
        "name": "wc",
        "namespace": "ns",
        "meta": {"uid": "u1"},
        "spec": SPEC,
        "stopped": stopped,
        "logger": LOG,
        "memo": memo,
        "pods_by_topology": index,
        "topologies": {key: ["u1"]},
    }


def test_the_map_names_running_copies_with_an_ip_that_are_not_being_deleted() -> None:
    pods = [
        pod("src-0", "10.0.0.1"),
        pod("src-1", "10.0.0.2", phase="Pending"),
        pod("count-0", None),
        pod("count-1", "10.0.0.4", deleting=True),
        pod("sink-0", "10.0.0.5", role="replica"),
        pod("sink-1", "fd00::6", data_port=7100),
        pod("count-2", "10.0.0.7", phase="Failed"),
        pod("count-3", "10.0.0.8", role="replica", phase="Pending"),
    ]
    assert peer_map(pods) == {
        "src-0": "10.0.0.1:7077",
        "sink-0#r0": "10.0.0.5:7077",  # an active replica, beside its primary
        "sink-1": "[fd00::6]:7100",
    }


def test_a_consumer_is_sent_the_replicas_of_its_producers() -> None:
    full = peer_map([pod("work-0", "10.0.0.1"), pod("work-0", "10.0.0.2", role="replica")])
    inputs = {"src": frozenset(), "work": frozenset({"src"}), "count": frozenset({"work"})}
    assert map_for(full, "count", inputs) == {
        "work-0": "10.0.0.1:7077",
        "work-0#r0": "10.0.0.2:7077",
    }


def test_a_sources_replica_stands_by_and_is_sent_to_nobody() -> None:
    """It serves no batch: a consumer told of it would count it as a producer that does
    not answer, and say so in its readiness."""
    full = peer_map([pod("src-0", "10.0.0.1"), pod("src-0", "10.0.0.2", role="replica")])
    inputs = {"src": frozenset(), "work": frozenset({"src"})}
    assert map_for(full, "work", inputs) == {"src-0": "10.0.0.1:7077"}


def test_of_two_running_pods_of_one_task_the_newer_copy_is_named() -> None:
    old, new = pod("src-0", "10.0.0.1", epoch=1), pod("src-0", "10.0.0.9", epoch=2)
    assert peer_map([old, new]) == peer_map([new, old]) == {"src-0": "10.0.0.9:7077"}


def test_the_data_port_is_the_one_the_operator_declares_on_its_pods() -> None:
    """The map's port is the pod's own ``data`` containerPort, and the manifests declare
    it: the runtime listens on ``BACKSTOP_PORT``, which is that port."""
    spec = parse_spec(
        {
            "image": "img",
            "recoveryLatencyBound": 2,
            "operators": [
                {"name": "src", "reprocessingLatency": 1, "config": {"function": "m:f"}},
                {
                    "name": "sink",
                    "reprocessingLatency": 1,
                    "inputs": [{"operator": "src"}],
                    "config": {"function": "m:g"},
                },
            ],
        }
    )
    graph = expand(spec)
    role = task_roles(graph, frozenset(), {t: "n1" for t in graph.tasks})[0]
    manifest = build_task_pod(Owner("wc", "ns", "u1"), spec, role)
    container = manifest["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e for e in container["env"]}
    assert env["BACKSTOP_PORT"]["value"] == str(ports["data"])
    assert env["BACKSTOP_PEERS_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "wc-peers", "key": "token"}
    }
    running = {**manifest, "status": {"phase": "Running", "podIP": "10.1.2.3"}}
    assert peer_map([running]) == {role.task: f"10.1.2.3:{ports['data']}"}


def test_each_pod_gets_the_tasks_of_its_input_operators() -> None:
    full = {"src-0": "a:1", "src-1": "b:1", "count-0": "c:1", "sink-0": "d:1"}
    inputs = operator_inputs(SPEC)
    assert map_for(full, "count", inputs) == {"src-0": "a:1", "src-1": "b:1"}
    assert map_for(full, "sink", inputs) == {"count-0": "c:1"}
    assert map_for(full, "src", inputs) == {}
    assert map_for(full, "renamed", inputs) == full


def test_a_pod_is_pushed_again_only_when_its_part_or_its_incarnation_changes() -> None:
    state, inputs = PeerState(), operator_inputs(SPEC)
    pods = [pod("src-0", "10.0.0.1"), pod("count-0", "10.0.0.2")]
    assert state.advance(peer_map(pods), 1_000)
    due = state.due(targets(pods), inputs)
    assert [(t.pod, part) for t, part in due] == [("wc--count-0", {"src-0": "10.0.0.1:7077"})]
    for t, part in due:
        state.delivered(t, part)
    assert state.due(targets(pods), inputs) == []
    # the consumer's container restarts in place: the new process holds no map
    restarted = [pods[0], pod("count-0", "10.0.0.2", restarts=1)]
    assert [t.pod for t, _ in state.due(targets(restarted), inputs)] == ["wc--count-0"]
    # the producer moves: a new version, and the consumer is told
    moved = [pod("src-0", "10.0.0.7"), pods[1]]
    assert state.advance(peer_map(moved), 900)
    assert state.version == 1_001
    assert [(t.pod, part) for t, part in state.due(targets(moved), inputs)] == [
        ("wc--count-0", {"src-0": "10.0.0.7:7077"})
    ]


def test_a_pod_that_does_not_answer_is_tried_again_after_a_growing_wait() -> None:
    state, inputs = PeerState(), operator_inputs(SPEC)
    pods = [pod("src-0", "10.0.0.1"), pod("count-0", "10.0.0.2")]
    state.advance(peer_map(pods), 1_000)
    [(target, part)] = state.due(targets(pods), inputs, now=50.0)
    assert state.failed(target, part, 50.0) == 51.0
    assert state.due(targets(pods), inputs, now=50.5) == []
    assert len(state.due(targets(pods), inputs, now=51.0)) == 1
    assert state.failed(target, part, 51.0) == 53.0
    # a new pod (another IP) is tried at once
    again = [pods[0], pod("count-0", "10.0.0.3")]
    assert len(state.due(targets(again), inputs, now=51.5)) == 1


# ---- the push, to real servers -----------------------------------------------------------


class Recorder(BaseHTTPRequestHandler):
    """Records each PUT (path, headers, JSON body); answers ``server.code``."""

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        server: Any = self.server
        server.seen.append((self.path, dict(self.headers), body, time.monotonic()))
        self.send_response(server.code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for s in started:
        s.shutdown()
        s.server_close()


def serve(started: list[Any], port: int = 0, code: int = 200) -> Any:
    server: Any = ThreadingHTTPServer(("127.0.0.1", port), Recorder)
    server.seen, server.code = [], code
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started.append(server)
    return server


def test_the_push_reaches_each_pod_with_its_part_and_the_token(servers: list[Any]) -> None:
    count, sink = serve(servers), serve(servers)
    pods = [
        pod("src-0", "127.0.0.1", metrics_port=free_port()),  # a source: nothing to say
        pod("count-0", "127.0.0.1", metrics_port=count.server_port, data_port=7001),
        pod("sink-0", "127.0.0.1", metrics_port=sink.server_port, data_port=7002),
    ]
    state = PeerState()
    answers = asyncio.run(peers_daemon.push_round(state, pods, SPEC, "tok", LOG))
    assert answers == {"wc--count-0": None, "wc--sink-0": None}
    [(path, headers, body, _)] = count.seen
    assert path == "/peers" and headers["Authorization"] == "Bearer tok"
    assert body == {"version": state.version, "peers": {"src-0": "127.0.0.1:7077"}}
    assert sink.seen[0][2]["peers"] == {"count-0": "127.0.0.1:7001"}
    # nothing changed: nothing is sent
    assert asyncio.run(peers_daemon.push_round(state, pods, SPEC, "tok", LOG)) == {}
    assert len(count.seen) == 1 and len(sink.seen) == 1


def test_a_refused_or_silent_pod_is_reported_and_retried(servers: list[Any]) -> None:
    refusing = serve(servers, code=401)
    closed = free_port()
    pods = [
        pod("src-0", "127.0.0.1"),
        pod("count-0", "127.0.0.1", metrics_port=refusing.server_port),
        pod("sink-0", "127.0.0.1", metrics_port=closed),
    ]
    state = PeerState()
    answers = asyncio.run(peers_daemon.push_round(state, pods, SPEC, "tok", LOG, timeout=0.5))
    assert answers["wc--count-0"] is not None and "401" in answers["wc--count-0"]
    assert answers["wc--sink-0"] is not None
    assert state.held == {} and set(state.failing) == {"wc--count-0", "wc--sink-0"}
    # the task's endpoint comes up: the pod takes the map once its backoff ended
    late = serve(servers, port=closed)
    for t in list(state.failing):
        state.failing[t] = (*state.failing[t][:3], 0.0)
    answers = asyncio.run(peers_daemon.push_round(state, pods, SPEC, "tok", LOG))
    assert answers["wc--sink-0"] is None
    assert late.seen[0][2]["peers"] == {"count-0": "127.0.0.1:7077"}


def test_the_runtime_takes_what_the_operator_pushes() -> None:
    """Both ends for real: the operator's push into the runtime's own endpoint."""
    held = PushedPeers()

    async def run() -> dict[str, str | None]:
        server = await httpmetrics.serve(0, "count-0", dict, peers=held, token="tok")
        port = server.sockets[0].getsockname()[1]
        pods = [pod("src-0", "10.0.0.1"), pod("count-0", "127.0.0.1", metrics_port=port)]
        try:
            wrong = await peerpush.put_all(
                [("x", f"http://127.0.0.1:{port}/peers", peerpush.body(1, {}))], "nope"
            )
            assert wrong["x"] is not None and "401" in wrong["x"]
            return await peers_daemon.push_round(PeerState(), pods, SPEC, "tok", LOG)
        finally:
            server.close()

    assert asyncio.run(run()) == {"wc--count-0": None}
    assert held.address("src-0") == ("10.0.0.1", 7077)


class Flag:
    """Stands for a worker's ``Stopped`` flag: false until set."""

    def __init__(self) -> None:
        self.set = False

    def __bool__(self) -> bool:
        return self.set


def test_the_daemon_pushes_a_move_as_soon_as_the_pod_index_sees_it(servers: list[Any]) -> None:
    consumer = serve(servers)
    key = ("ns", "wc")
    before = [
        pod("src-0", "10.0.0.1"),
        pod("count-0", "127.0.0.1", metrics_port=consumer.server_port),
    ]
    after = [pod("src-0", "10.0.0.8"), before[1]]
    index: dict[Any, list[dict[str, Any]]] = {key: before}
    memo = kopf.Memo()
    memo.peer_wake = peers_daemon.PeerWake()
    mem = TopologyMemo()
    mem.peers_token = "tok"  # read from its Secret once, before
    memo["backstop"] = mem
    stopped = Flag()

    async def run() -> float:
        daemon = asyncio.ensure_future(peers_daemon.run(**daemon_kwargs(memo, stopped, index, key)))
        while not consumer.seen:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        index[key] = after  # the pod index stores the moved pod, then wakes the daemon
        moved_at = time.monotonic()
        memo.peer_wake.saw(key)
        while len(consumer.seen) < 2:
            await asyncio.sleep(0.005)
            assert time.monotonic() - moved_at < 2.0, "the move was not pushed"
        stopped.set = True
        memo.peer_wake.saw(key)
        await asyncio.wait_for(daemon, 5)
        took: float = consumer.seen[1][3] - moved_at
        return took

    took = asyncio.run(run())
    first, second = consumer.seen[0][2], consumer.seen[1][2]
    assert first["peers"] == {"src-0": "10.0.0.1:7077"}
    assert second["peers"] == {"src-0": "10.0.0.8:7077"}
    assert second["version"] > first["version"]
    assert took < peers_daemon.RETRY / 2  # woken by the index, not by the round timer


# ---- the token's Secret ----------------------------------------------------------------


class FakeCore:
    """The two calls of ``CoreV1Api`` that ``peers_token`` makes, on a dict of Secrets."""

    def __init__(self, lose_race: bool = False) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.lose_race = lose_race

    def read_namespaced_secret(self, name: str, namespace: str) -> dict[str, Any]:
        try:
            return self.secrets[(namespace, name)]
        except KeyError:
            raise ApiException(status=404) from None

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if self.lose_race:  # another caller created it first, with its own token
            self.lose_race = False
            self.secrets[(namespace, name)] = {"data": {"token": base64.b64encode(b"won")}}
            raise ApiException(status=409)
        data = {k: base64.b64encode(v.encode()) for k, v in body["stringData"].items()}
        self.secrets[(namespace, name)] = {"data": data, "metadata": body["metadata"]}


def test_the_token_is_made_once_and_read_back() -> None:
    core, owner = FakeCore(), Owner("wc", "ns", "u1")
    token = peerpush.peers_token(core, owner)
    assert len(token) >= 32
    assert peerpush.peers_token(core, owner) == token
    secret = core.secrets[("ns", "wc-peers")]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u1"
    raced = FakeCore(lose_race=True)
    assert peerpush.peers_token(raced, owner) == "won"


def test_a_steady_topology_is_not_rebuilt_until_its_pods_change(
    servers: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = serve(servers)
    key = ("ns", "wc")
    pods = [
        pod("src-0", "10.0.0.1"),
        pod("src-1", "10.0.0.2"),
        pod("count-0", "127.0.0.1", metrics_port=consumer.server_port),
    ]
    index: dict[Any, list[dict[str, Any]]] = {key: list(pods)}
    memo = kopf.Memo()
    memo.peer_wake = peers_daemon.PeerWake()
    mem = TopologyMemo()
    mem.peers_token = "tok"
    memo["backstop"] = mem
    stopped = Flag()
    rounds: list[float] = []
    plan = peers_daemon.plan_round

    def counted(*args: Any) -> Any:
        rounds.append(time.monotonic())
        return plan(*args)

    monkeypatch.setattr(peers_daemon, "plan_round", counted)
    monkeypatch.setattr(peers_daemon, "RETRY", 0.05)

    async def run() -> None:
        daemon = asyncio.ensure_future(peers_daemon.run(**daemon_kwargs(memo, stopped, index, key)))
        await asyncio.sleep(0.5)  # ten timer rounds
        assert len(rounds) == 1 and len(consumer.seen) == 1
        index[key] = [pods[0], pods[2]]  # src-1 deleted without an event the index reports
        await asyncio.sleep(0.3)
        stopped.set = True
        await asyncio.wait_for(daemon, 5)

    asyncio.run(run())
    assert len(rounds) == 2
    assert consumer.seen[1][2]["peers"] == {"src-0": "10.0.0.1:7077"}
