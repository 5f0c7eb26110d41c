"""A standby that takes the Lease over serves the handlers and the webhook at once.

Why: every replica serves the admission webhook (a Kopf with the validating handler alone),
the standbys too. A takeover that stops the standby's Kopf and waits for it (up to 30 s)
before the leader's Kopf starts and binds the webhook's port again leaves admission
unserved, and the handlers late, for as long as that Kopf takes to stop (its hung tasks, its
API calls in threads). Here the election is a fake that grants the Lease once the standby
serves; the webhook is a real HTTP server on a local port whose stop takes
:data:`SLOW_STOP` seconds; the time from "Lease acquired" to ``lead()`` and every probe of
the port are measured.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kubernetes import client

from backstop.k8s import leader

SLOW_STOP = 8.0
"""Seconds the standby's webhook server takes to stop once asked (a Kopf that stops slowly)."""
BOUND = 3.0
"""Seconds a takeover may take, from the Lease acquired to the leader's handlers running."""


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _answers(port: int) -> bool:
    """Whether the webhook's port answers a request now."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _slow_webhook(port: int, up: threading.Event) -> Callable[[threading.Event], None]:
    """``serve(stop)``: a webhook server on ``port`` that takes :data:`SLOW_STOP` s to stop."""

    def serve(stop: threading.Event) -> None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Ok)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        up.set()
        stop.wait()
        time.sleep(SLOW_STOP)  # hung tasks, an API call in a worker thread...
        server.shutdown()
        server.server_close()

    return serve


class _Election:
    """The kubernetes client's LeaderElection, faked: the Lease is granted once the standby's
    webhook serves, then "renewed" until the leader stops."""

    granted = 0.0

    def __init__(self, config: Any, up: threading.Event) -> None:
        self.config, self.up = config, up

    def run(self) -> None:
        self.up.wait(10)
        time.sleep(0.3)  # a standby that has served a while
        lock = self.config.lock
        lock.renewed = time.monotonic()
        _Election.granted = time.monotonic()
        self.config.onstarted_leading()
        while not lock.stopped:
            lock.renewed = time.monotonic()
            time.sleep(0.1)


def test_a_takeover_runs_the_handlers_at_once_and_never_leaves_the_webhook_unserved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port, up = _free_port(), threading.Event()
    lost: list[str] = []
    monkeypatch.setattr(
        leader,
        "leaderelection",
        SimpleNamespace(LeaderElection=lambda config: _Election(config, up)),
    )
    monkeypatch.setattr(leader, "warm", lambda api: None)
    monkeypatch.setattr(leader, "release", lambda api, e: None)
    monkeypatch.setattr(leader, "_lost", lost.append)  # never os._exit in a test
    monkeypatch.setattr(leader, "SERVE_STOP_SECONDS", 0.5)
    probes: list[tuple[float, bool]] = []
    done = threading.Event()

    def probe() -> None:  # the API server calling the webhook, every 20 ms
        up.wait(10)
        while not done.is_set():
            probes.append((time.monotonic(), _answers(port)))
            time.sleep(0.02)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    started: list[float] = []

    def lead() -> None:  # the leader's Kopf: its handlers run from here
        started.append(time.monotonic())
        time.sleep(0.5)  # leads a while, the webhook answering
        done.set()

    e = leader.Election("ns", identity="me")
    leader.run_elected(client.ApiClient(), e, lead, serve=_slow_webhook(port, up))
    returned = time.monotonic()
    prober.join(5)
    gap = started[0] - _Election.granted
    # a stopping leader waits for the webhook a bounded while, not for its whole stop
    assert returned - started[0] < SLOW_STOP / 2
    assert gap < BOUND, f"the leader's handlers started {gap:.1f} s after the Lease was acquired"
    refused = [t - _Election.granted for t, ok in probes if not ok]
    assert refused == [], f"the webhook did not answer at {refused[:3]} s after the takeover"
    assert any(t > started[0] for t, ok in probes if ok), "no probe while leading"
    assert lost == []


def test_an_elected_leaders_kopf_leaves_the_webhook_to_the_server_that_stays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``backstop operator --leader-elect --webhook-port P``: the admission Kopf that serves
    while standing by runs on while leading, and the leader's own Kopf neither has the
    validating handler nor a server (it would bind the port that Kopf holds)."""
    import logging

    from typer.testing import CliRunner

    from backstop.cli import app
    from backstop.controller import admission
    from backstop.k8s import cluster

    registry = kopf.OperatorRegistry()
    monkeypatch.setattr(kopf, "get_default_registry", lambda: registry)
    monkeypatch.setattr(kopf, "configure", lambda **_: None)
    monkeypatch.setattr(cluster, "api_client", lambda *_: client.ApiClient())
    monkeypatch.setattr(admission, "scope", lambda webhook: None)
    ran: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: ran.update(kwargs))

    def elected(api: Any, e: Any, lead: Callable[[], None], **kwargs: Any) -> None:
        ran["elected"] = kwargs
        lead()

    monkeypatch.setattr(leader, "run_elected", elected)
    level = logging.getLogger().level
    try:
        result = CliRunner().invoke(
            app,
            ["operator", "-n", "ns", "--liveness", "", "--leader-elect",
             "--webhook-port", str(_free_port()), "--webhook-cert-dir", str(tmp_path)],
        )  # fmt: skip
    finally:
        logging.getLogger().setLevel(level)
    assert result.exit_code == 0, result.output
    serve = ran["elected"]["serve"]
    assert callable(serve), "the webhook's own Kopf runs beside the election"
    assert ran["settings"].admission.server is None
    assert registry._webhooks.get_all_handlers() == []
