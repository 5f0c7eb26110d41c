"""What the controller's modules share: the one API gateway and Event posting.

The handlers (:mod:`backstop.controller.handlers`) and the modules doing their work
import this module (and not each other's internals), so there is no import cycle.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from backstop.controller import faults
from backstop.controller import settings as config
from backstop.domain.constants import EVENT_REASONS, EventReason
from backstop.domain.events import EventFilter
from backstop.domain.incidents import NodeInfo
from backstop.k8s.cluster import api_client
from backstop.k8s.kubeio import Kube

log = logging.getLogger(__name__)
_kube: Kube | None = None
_events = EventFilter()
"""Process-wide like the API client; keyed by the object's uid, so nothing leaks from one
topology to another or to a re-created one of the same name."""


def kube() -> Kube:
    """The process-wide API client (created at startup, lazily in tests)."""
    global _kube
    if _kube is None:
        _kube = Kube(
            api_client(),
            fault=faults.hook(),
            recoveryplan_history=config.settings().recoveryplan_history,
        )
    return _kube


def gone(
    index: kopf.Index[tuple[str | None, str], str], namespace: str | None, name: str, uid: str
) -> bool:
    """Whether the object a worker serves was deleted (it left the ``topologies`` index).

    Besides the stop flag (:class:`backstop.controller.workers.Stopped`), set when the
    deletion's event comes, each worker's loop asks this and returns.
    """
    return uid not in (index.get((namespace, name)) or ())


def post_event(
    body: kopf.Body, reason: EventReason, message: str, *, warning: bool = False
) -> None:
    """Post an Event on the topology; reasons come from the fixed set ``EventReason``.

    The same reason and message on one object is posted once per
    :data:`~backstop.domain.events.EVENT_WINDOW_SECONDS`; repeats are counted and the
    count is added to the next one posted (:class:`~backstop.domain.events.EventFilter`).
    These are the only Events the operator posts: Kopf's log lines are not Events
    (``settings.posting.loggers`` is off).
    """
    if reason not in EVENT_REASONS:  # mypy refuses it; never raise inside a daemon for it
        log.error("event reason %r is not one of EventReason; posted anyway", reason)
    uid = str((body.get("metadata") or {}).get("uid") or "")
    text = _events.admit((uid, reason, message), time.monotonic())
    if text is not None:
        (kopf.warn if warning else kopf.info)(body, reason=reason, message=text)


def node_snapshot(index: Any) -> dict[str, NodeInfo]:
    """A snapshot of Kopf's node index (``{name: NodeInfo}``), for one handler run or tick."""
    return {n: info for n, infos in list(index.items()) for info in infos}
