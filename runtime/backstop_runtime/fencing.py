"""Fencing: the store's epoch claims, ranked by the operator's epochs.

Every start of a task claims the next store epoch (``tasks/<task>/epochs/<n>``, created
exclusively), and a copy whose claim is no longer the newest stops writing. Each claim
records the claimant's operator epoch (``BACKSTOP_EPOCH``, its *rank*): a claim made
with a lower rank fences nobody, and a copy never claims while a claim of a higher rank
exists, nor while the operator publishes a higher epoch for its task. So a superseded
copy that the kubelet restarts with its old environment finds itself fenced before it
claims, instead of fencing the copy that replaced it (which would then restart and fence
it back, each takeover truncating and replaying the output).

The operator fences too, for copies that may not share the store: when it recreates a
task off a lost node while the old copy may still run (a partition), it gives the new pod
a higher ``BACKSTOP_EPOCH`` and publishes it in the session ConfigMap (``session.json``,
``"epochTasks": {"<n>": <task list>}``, :mod:`backstop_runtime.tasksets`; an older
operator wrote ``"epochs": {task: n}``) before the new pod exists. A copy whose own
epoch is older than the one published for its task stops writing:
:meth:`backstop_runtime.store.Store.check_fence` raises
:class:`~backstop_runtime.config.Fenced` (before every checkpoint, sink write and address
publication, and every 200 ms). A fenced copy then writes nothing more and stands by
until it is stopped (:func:`backstop_runtime.main.main`). The kubelet refreshes a
mounted ConfigMap within about a minute of the change, or as soon as a partitioned node
reaches the API server again.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from backstop_runtime import tasksets
from backstop_runtime.blobs import Blobs


def published_epoch(doc: object, task: str) -> int:
    """The epoch ``session.json`` publishes for ``task`` (0 when none or malformed).

    >>> published_epoch({"epochs": {"sink-0": 2}}, "sink-0"), published_epoch({}, "sink-0")
    (2, 0)
    >>> published_epoch({"epochs": {"sink-0": "x"}}, "sink-0")
    0
    >>> published_epoch({"epochTasks": {"1": "sink:0-3", "2": "sink:1"}}, "sink-1")
    2
    """
    if not isinstance(doc, dict):
        return 0
    by_value = doc.get("epochTasks")
    if isinstance(by_value, dict):
        found = [
            int(n)
            for n, text in by_value.items()
            if str(n).isdigit() and isinstance(text, str) and tasksets.contains(text, task)
        ]
        return max(found, default=0)
    epochs = doc.get("epochs")
    value = epochs.get(task) if isinstance(epochs, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class OperatorFence:
    """Reads the published epoch of one task, again only when the file changed."""

    def __init__(self, recovery_dir: Path | None, task: str, own: int) -> None:
        self.path = recovery_dir / "session.json" if recovery_dir else None
        self.task = task
        self.own = own
        self._seen: tuple[int, int] | None = None
        self._published = 0

    def published(self) -> int:
        """The epoch the operator publishes for this task now (0 without a session)."""
        if self.path is None:
            return 0
        try:
            st = os.stat(self.path)
        except OSError:
            return self._published
        key = (st.st_mtime_ns, st.st_size)
        if key != self._seen:
            try:
                doc = json.loads(self.path.read_text())
            except (OSError, ValueError):
                return self._published  # mid-update: keep what was read last
            self._seen, self._published = key, published_epoch(doc, self.task)
        return self._published

    def superseded_by(self) -> int | None:
        """The newer published epoch, if this copy's own epoch is older; else ``None``."""
        newer = self.published()
        return newer if newer > self.own else None


def claim_rank(blobs: Blobs, key: str) -> int:
    """The operator epoch a store epoch claim was made with (0: none recorded, or gone).

    A claim is written whole before it appears (:func:`create_claim`), so an unreadable
    one is an object of a runtime that recorded no rank: it ranks 0.
    """
    try:
        doc = json.loads(blobs.get(key) or b"{}")
    except ValueError:
        return 0
    rank = doc.get("operatorEpoch") if isinstance(doc, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else 0


def create_claim(blobs: Blobs, key: str, rank: int) -> bool:
    """Create the claim ``key`` recording ``rank``, unless it exists (then ``False``).

    :meth:`Blobs.create <backstop_runtime.blobs.Blobs.create>` writes it whole and only if
    absent, so a reader never sees a claim without its rank, and of two copies racing for
    one epoch exactly one gets it. The claim holds a token of this call's own, so a
    retried conditional write tells its own claim from an equal one of another copy.
    """
    body = json.dumps({"operatorEpoch": rank, "token": uuid.uuid4().hex})
    return blobs.create(key, body.encode())
