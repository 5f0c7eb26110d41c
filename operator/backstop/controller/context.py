"""What the controller's handler modules share: the one API gateway and Event posting.

:mod:`backstop.controller.handlers` and :mod:`backstop.controller.handlers_reopt` both
import this module (and not each other's internals), so there is no import cycle.
"""

from __future__ import annotations

import kopf

from backstop.controller import faults
from backstop.domain.constants import EVENT_REASONS
from backstop.k8s.cluster import api_client
from backstop.k8s.kubeio import Kube

_kube: Kube | None = None


def kube() -> Kube:
    """The process-wide API client (created at startup, lazily in tests)."""
    global _kube
    if _kube is None:
        _kube = Kube(api_client(), fault=faults.hook())
    return _kube


def post_event(body: kopf.Body, reason: str, message: str, *, warning: bool = False) -> None:
    """Post an Event on the topology; reasons come from the fixed set ``EVENT_REASONS``."""
    if reason not in EVENT_REASONS:
        raise ValueError(f"event reason {reason!r} is not one of {sorted(EVENT_REASONS)}")
    (kopf.warn if warning else kopf.info)(body, reason=reason, message=message)
