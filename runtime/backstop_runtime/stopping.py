"""A graceful stop: the final checkpoint a suspend or a rollout step asks for.

The operator removes a task pod on purpose (``spec.suspend``, a rollout step) by deleting
it gracefully: the kubelet sends SIGTERM and waits up to the pod's grace period
(``spec.lifecycle.checkpointTimeoutSeconds``). The task then checkpoints the last round
it processed (published or not: a consumer that lacks it asks for it again, and it is
regenerated from the checkpoints before it), writes ``backstop-checkpoint round=<r>
at=<t>`` as its termination message and exits 0. The kubelet posts that message in the
pod's status before the pod goes, which is how the operator learns the checkpoint came.
The next copy restores its newest checkpoint: this one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from backstop_runtime.config import Fenced

log = logging.getLogger("backstop_runtime.stopping")
PREFIX = "backstop-checkpoint"


def final_checkpoint(task: Any) -> str | None:
    """Checkpoint ``task`` (a :class:`backstop_runtime.task.Task`) on its way out and
    report it; ``None`` for a fenced copy (it must not write). A source's batch log is
    its checkpoint and is on disk already."""
    try:
        if task.cfg.is_source:
            r = task.log.last
        else:
            r = task.stepped
            if r > 0 and r not in task.store.checkpoint_rounds():
                task._checkpoint(r)
    except Fenced:
        return None
    report = f"{PREFIX} round={r} at={time.time():.3f}"
    log.info("%s: stopping: %s", task.cfg.task, report)
    path = Path(os.environ.get("BACKSTOP_TERMINATION_LOG", "/dev/termination-log"))
    if path.exists():  # the kubelet's file; absent outside a pod
        with contextlib.suppress(OSError):
            path.write_text(report)
    return report
