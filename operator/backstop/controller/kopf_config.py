"""How the operator configures Kopf: its settings, and daemons that need no finalizer.

Separate from the handlers so that the choices (no log line posted as an Event, no
finalizer) are in one place and unit-testable without a cluster.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import kopf

from backstop.domain.constants import GROUP


def apply_kopf_settings(settings: kopf.OperatorSettings) -> None:
    """Kopf's bookkeeping under our own domain; no log line becomes an Event (only
    :func:`~backstop.controller.context.post_event`'s deliberate, deduplicated ones)."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


def daemons_without_finalizer(registry: Any) -> None:
    """Register the daemons as needing no finalizer (Kopf's ``kopf.daemon`` always asks one).

    Kopf adds its finalizer only for daemons here (there is no ``on.delete`` handler), and
    a finalizer makes ``kubectl delete`` hang while the operator is down. Everything a
    topology owns (pods, the session ConfigMap, RecoveryPlans, its PDB) carries an owner
    reference, so the garbage collector removes it without the operator; the daemons
    return once their object leaves the ``topologies`` index (:func:`context.gone`).
    Kopf then also removes the finalizer it put on objects earlier. Kopf has no public
    switch for this (its maintainer declined one), so the frozen handlers are replaced in
    the registry; ``tests/unit/test_events.py`` fails if a Kopf upgrade breaks it.
    """
    spawning = registry._spawning
    spawning._handlers = [
        dataclasses.replace(h, requires_finalizer=False)
        if getattr(h, "requires_finalizer", False)
        else h
        for h in spawning._handlers
    ]
