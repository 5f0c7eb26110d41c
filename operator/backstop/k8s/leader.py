"""Leader election on a ``coordination.k8s.io/v1`` Lease, so several operator replicas can run.

With one replica, losing the operator's node stops every recovery until Kubernetes
evicts the pod (300 s by default) and a new one pulls its image and starts; and two
copies can run at once (a kubelet-only failure leaves the old process running while a
new pod starts). So every replica runs :func:`run_elected`:
it waits as a standby (serving ``/healthz`` and the admission webhook, running no
handler) until it holds the Lease, then runs the operator at once: the webhook's
server runs on from the standby into the leader, never stopped nor bound again, so
a takeover leaves admission unserved for no time and the handlers start as soon as
the Lease is held. The election is the kubernetes client's
own (:mod:`kubernetes.leaderelection` with its ``LeaseLock``: create, then
``replace`` carrying the read ``resourceVersion``, so two candidates never both
win a round). A leader that cannot renew within ``renew_deadline`` (shorter than
``lease_duration``, so no standby can have taken over yet) ends the process at
once with exit status :data:`LOST_EXIT`: a stale leader never writes again, and
its pod restarts as a standby. A leader that stops normally gives the Lease up,
so a rolling update fails over without waiting for it to expire.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("backstop.leader")

LOST_EXIT = 75
"""Exit status of a leader that lost its Lease (the pod restarts as a standby)."""
POD_NAME_ENV = "POD_NAME"
"""The pod's name (the chart sets it from the downward API): the candidate's identity."""
SERVE_STOP_SECONDS = 5.0
"""Seconds a stopping process waits for ``serve`` (requests in flight) once ``lead()`` returned."""


def default_identity() -> str:
    """This candidate's name in the Lease: the pod name (hostname), the pid and a nonce."""
    host = os.environ.get(POD_NAME_ENV) or socket.gethostname()
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Election:
    """Where the Lease lives and its timing (client-go's defaults: 15 s, 10 s, 2 s)."""

    namespace: str
    name: str = "backstop-operator"
    identity: str = field(default_factory=default_identity)
    lease_duration: int = 15
    """Seconds a standby waits after the last renewal it saw before taking over."""
    renew_deadline: int = 10
    """Seconds a leader keeps retrying a failed renewal before it gives up and exits."""
    retry_period: int = 2
    """Seconds between renewals (leader) and attempts (standby)."""

    def problem(self) -> str | None:
        """Why these timings are unsafe, or ``None``.

        Examples
        --------
        >>> Election("ns").problem() is None
        True
        >>> Election("ns", lease_duration=10, renew_deadline=10).problem()
        '--renew-deadline (10 s) must be shorter than --lease-duration (10 s)'
        """
        if self.retry_period < 1:
            return f"--retry-period must be at least 1 s, got {self.retry_period}"
        if self.renew_deadline <= 1.2 * self.retry_period:
            return (
                f"--renew-deadline ({self.renew_deadline} s) must exceed 1.2 x --retry-period "
                f"({self.retry_period} s)"
            )
        if self.lease_duration <= self.renew_deadline:
            return (
                f"--renew-deadline ({self.renew_deadline} s) must be shorter than "
                f"--lease-duration ({self.lease_duration} s)"
            )
        return None


class _Lock(LeaseLock):  # type: ignore[misc]
    """The client's LeaseLock on our API client, remembering when it last wrote the Lease."""

    def __init__(self, api: client.ApiClient, e: Election) -> None:
        super().__init__(e.name, e.namespace, e.identity)
        self.api_instance = client.CoordinationV1Api(api)
        self.renewed = 0.0
        self.stopped = False
        """Set when the leader stops normally: no more renewals, the Lease is released."""

    def create(self, *args: Any, **kwargs: Any) -> bool:
        if self.stopped:
            return False
        ok = bool(super().create(*args, **kwargs))
        if ok:
            self.renewed = time.monotonic()
        return ok

    def update(self, *args: Any, **kwargs: Any) -> bool:
        if self.stopped:
            return False
        ok = bool(super().update(*args, **kwargs))
        if ok:
            self.renewed = time.monotonic()
        return ok


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path.rstrip("/").endswith("healthz")
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"standby": true}' if ok else b"")

    def log_message(self, *args: Any) -> None:
        pass


def _standby_health(url: str | None) -> http.server.ThreadingHTTPServer | None:
    """Answer the liveness probe while waiting (Kopf serves it once leading)."""
    if not url:
        return None
    parsed = urlparse(url)
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    server = http.server.ThreadingHTTPServer(
        (parsed.hostname or "0.0.0.0", parsed.port or 8080), _Health
    )
    threading.Thread(
        target=server.serve_forever, name="backstop-standby-health", daemon=True
    ).start()
    return server


def _lost(reason: str) -> None:
    log.error("leader election: %s; exiting so that a stale leader never writes", reason)
    logging.shutdown()
    os._exit(LOST_EXIT)


def _stopped(lock: _Lock, e: Election) -> None:
    """The election's renew loop gave up: end the process unless we are stopping anyway."""
    if not lock.stopped:
        _lost(f"lost Lease {e.namespace}/{e.name}")


def _watchdog(lock: _Lock, e: Election) -> None:
    """End the process if no renewal succeeded for ``renew_deadline`` (even a hung request)."""
    while True:
        time.sleep(0.5)
        if not lock.stopped and time.monotonic() - lock.renewed > e.renew_deadline:
            _lost(f"no renewal of Lease {e.namespace}/{e.name} for {e.renew_deadline} s")


def warm(api: client.ApiClient) -> None:
    """Load the API client's model classes while still a standby.

    The kubernetes client imports its models on first use of an API group: for
    the core group, seconds of CPU on a busy machine, which would otherwise delay a
    takeover. A standby does that while it waits, not after it wins.
    """
    client.CoreV1Api(api)
    client.CustomObjectsApi(api)
    client.CoordinationV1Api(api)
    from kubernetes.client import models

    for name in ("V1Pod", "V1PodList", "V1Node", "V1NodeList", "V1ConfigMap", "CoreV1Event"):
        getattr(models, name)


def release(api: client.ApiClient, e: Election) -> None:
    """Give the Lease up if we still hold it (a normal stop): standbys take over at once."""
    coord = client.CoordinationV1Api(api)
    try:
        lease = coord.read_namespaced_lease(e.name, e.namespace)
        if lease.spec.holder_identity != e.identity:
            return
        lease.spec.holder_identity = None
        lease.spec.lease_duration_seconds = 1
        coord.replace_namespaced_lease(e.name, e.namespace, lease)  # resourceVersion checked
        log.info("leader election: released Lease %s/%s", e.namespace, e.name)
    except ApiException as err:
        log.warning("leader election: could not release the Lease: %s", err.reason)


def _serving(serve: Callable[[threading.Event], None], stop: threading.Event) -> None:
    """Run ``serve(stop)``; say so if it ends before it is asked to."""
    try:
        serve(stop)
    except Exception:
        log.exception("leader election: the server run beside the election failed")
        return
    if not stop.is_set():
        log.error("leader election: the server run beside the election stopped")


def run_elected(
    api: client.ApiClient,
    e: Election,
    lead: Callable[[], None],
    *,
    health: str | None = None,
    serve: Callable[[threading.Event], None] | None = None,
) -> None:
    """Wait for the Lease, then ``lead()`` in this thread; give the Lease up when it returns.

    ``lead`` runs in the calling (main) thread, as Kopf wants for its signal
    handlers; the election renews the Lease in a daemon thread and ends the
    process if it is lost. ``serve(stop)``, if given, runs in a thread from the
    start, standby and leader alike (the admission webhook every replica serves),
    until ``lead()`` returns: a takeover neither stops it nor waits for it, so
    ``lead()`` starts as soon as the Lease is held and ``serve`` never stops
    answering. Then ``stop`` is set and ``serve`` gets :data:`SERVE_STOP_SECONDS`.
    """
    # the client's election logs every renewal and every standby attempt at INFO
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
    lock = _Lock(api, e)
    leading = threading.Event()
    config = electionconfig.Config(
        lock,
        lease_duration=e.lease_duration,
        renew_deadline=e.renew_deadline,
        retry_period=e.retry_period,
        onstarted_leading=leading.set,
        onstopped_leading=lambda: _stopped(lock, e),
    )
    server = _standby_health(health)
    log.info("leader election: %s waits for Lease %s/%s", e.identity, e.namespace, e.name)
    elector = threading.Thread(
        target=leaderelection.LeaderElection(config).run, name="backstop-election", daemon=True
    )
    elector.start()
    stop = threading.Event()
    serving = None
    if serve is not None:
        serving = threading.Thread(
            target=_serving, args=(serve, stop), name="backstop-serve", daemon=True
        )
        serving.start()
    try:
        warm(api)
        leading.wait()
        log.info("leader election: %s leads (Lease %s/%s)", e.identity, e.namespace, e.name)
        threading.Thread(
            target=_watchdog, args=(lock, e), name="backstop-lease-watchdog", daemon=True
        ).start()
        if server is not None:
            server.shutdown()
            server.server_close()
        try:
            lead()
        finally:
            lock.stopped = True
            release(api, e)
    finally:  # the Lease is given up first: the webhook of the other replicas still answers
        stop.set()
        if serving is not None:
            serving.join(timeout=SERVE_STOP_SECONDS)
