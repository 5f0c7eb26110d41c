"""How the operator configures Kopf: its settings.

Separate from the handlers so that the choices (no log line posted as an Event, the
handler executor's size, a quiet watching handler) are in one place and unit-testable
without a cluster.
"""

from __future__ import annotations

import logging

import kopf

from backstop.controller.diffbase import SpecDigestDiffBase
from backstop.domain.constants import GROUP

HANDLER_WORKERS = 16
"""Threads of Kopf's executor: its sync handlers (the reconciles, the start-up). The
topologies' workers run apart from it (:mod:`backstop.controller.workers`), so it needs
no thread per topology."""


def apply_kopf_settings(settings: kopf.OperatorSettings) -> None:
    """Kopf's bookkeeping under our own domain; no log line becomes an Event (only
    :func:`~backstop.controller.context.post_event`'s deliberate, deduplicated ones);
    :data:`HANDLER_WORKERS` threads for the sync handlers."""
    # no handler needs a finalizer; Kopf removes this one from objects that still carry it
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    # the spec as a digest, not a second copy (backstop.controller.diffbase)
    settings.persistence.diffbase_storage = SpecDigestDiffBase(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    settings.execution.max_workers = HANDLER_WORKERS


class QuietSuccess(logging.Filter):
    """Drops Kopf's "Handler 'ID' succeeded." line of the given handlers.

    The workers' watching handler runs on every event of every topology (a status write
    is one), so its success would be most of the log and says nothing; its failures and
    every other line stay.

    Examples
    --------
    >>> f = QuietSuccess({"watch"})
    >>> line = lambda msg: logging.LogRecord("kopf.objects", logging.INFO, "", 0, msg, (), None)
    >>> f.filter(line("Handler 'watch' succeeded.")), f.filter(line("Handler 'other' succeeded."))
    (False, True)
    """

    def __init__(self, handler_ids: set[str]) -> None:
        super().__init__()
        self.lines = {f"Handler {h!r} succeeded." for h in handler_ids}

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.lines


def quiet_success(*handler_ids: str) -> None:
    """Keep the given handlers' successes out of Kopf's per-object log (once per process)."""
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, QuietSuccess) for f in objects.filters):
        objects.addFilter(QuietSuccess(set(handler_ids)))
