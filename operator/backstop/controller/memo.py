"""Per-topology state the controller keeps between handler calls, in Kopf's ``memo``.

Kopf gives every object its own ``memo`` (keyed by the object's uid, shared by its
handlers and daemons, dropped when the object is forgotten), so state kept here never
leaks from one topology to another or from a deleted object to a re-created one of the
same name. :func:`of` returns the topology's :class:`TopologyMemo`, creating it on first
use.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from backstop.domain.spec import StreamTopologySpec
from planners import TaskGraph

KEY = "backstop"
"""The key of the :class:`TopologyMemo` inside Kopf's per-object memo."""


@dataclass
class TopologyMemo:
    """What one topology's handlers remember between calls."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    """The reconcile handler and the supervisor never interleave on one topology."""
    parsed: dict[int, tuple[StreamTopologySpec, TaskGraph]] = field(default_factory=dict)
    """The parsed spec and its task graph, by generation (``None``-free: invalid specs
    are parsed again on every call)."""
    written: tuple[int, dict[str, Any]] = (0, {})
    """The status we last wrote and its resourceVersion (the watch may lag behind it)."""
    ensured: dict[str, str] = field(default_factory=dict)
    """Fingerprints of the RecoveryPlans and ConfigMap this process wrote as the status
    asked (empty after a restart, so a new operator writes them once again)."""
    restore_looked: tuple[str, float] | None = None
    """The restore's last look at usable capacity: ``(node key, time)``."""
    restore_no_gain: str | None = None
    """The capacity key at which consolidation last found nothing to gain."""
    probes: dict[str, tuple[str, float, str | None]] = field(default_factory=dict)
    """Unready pods' own reasons (``k8s.taskprobe``): pod name → (resourceVersion, when
    asked, reason), so a tick asks a task again only when its pod changed or every
    :data:`~backstop.controller.tick.PROBE_EVERY` seconds."""
    desired: tuple[Any, dict[str, dict[str, Any]]] | None = None
    """The pods of the plan in force and their key (uid, generation, plan): built again
    only when one of these changes (:func:`~backstop.controller.tick.planned_pods`)."""


def of(memo: MutableMapping[str, Any]) -> TopologyMemo:
    """The topology's memory inside Kopf's per-object ``memo`` (created on first use).

    Examples
    --------
    >>> memo: dict[str, Any] = {}
    >>> of(memo) is of(memo), of({}) is of(memo)
    (True, False)
    """
    found = memo.get(KEY)
    if not isinstance(found, TopologyMemo):
        found = memo.setdefault(KEY, TopologyMemo())
    return found
