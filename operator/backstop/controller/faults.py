"""Fault injection, a test tool: the operator dies at a named write point.

The status is a write-ahead log, and every supervision tick must re-derive
from it whatever should exist (the step's RecoveryPlan, the session ConfigMap, the
re-plan, the pods). The only honest test of that claim is to kill the process
between two writes and watch a fresh one converge
(``tests/cluster/test_fault_injection.py``).

With ``BACKSTOP_FAULT_POINT=<point>`` (one of :data:`POINTS`, see
:data:`backstop.controller.settings.FaultPoint`) the operator exits the
``BACKSTOP_FAULT_AFTER``-th time (default 1) it reaches that point: one line on
stderr names the point, then ``os._exit(EXIT_CODE)``, with no cleanup, no
``finally`` blocks, no Kopf shutdown, as if the node had died under it. Unset (the
default), :func:`point` costs one comparison and the API layer takes no extra step
(:func:`hook` returns ``None``).

The points, in the order a write-ahead step reaches them:

``after-status``
    a status write that records a decision: a reconcile's plan, a recovery step,
    a drain batch, ``appliedStep``, fencing epochs, lost pods;
``after-recoveryplan``
    a RecoveryPlan created or its phase set (recovery and restore steps);
``after-configmap``
    the recovery session's ConfigMap written (by a recovery step, or with the fencing
    epochs of tasks about to be recreated off a lost node);
``mid-pod-batch``
    inside :meth:`backstop.k8s.kubeio.Kube.apply_pod_diff`, after the first half of
    a diff's pod creations (or deletions, when it creates fewer than two);
``after-replan``
    the restore's status write: a re-plan of a broken bound, or its next step.

Examples
--------
>>> point("after-status")  # no point configured: nothing happens
>>> hook() is None
True
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import get_args

from backstop.controller import settings as config

EXIT_CODE = 86
"""The exit status of an operator killed by fault injection (no other path uses it)."""
POINTS: tuple[str, ...] = get_args(config.FaultPoint)
"""Every named write point."""

_hits: Counter[str] = Counter()
_lock = threading.Lock()


def point(name: config.FaultPoint) -> None:
    """Reached write point ``name``: die here if it is the configured one (module docstring)."""
    cfg = config.settings()
    if cfg.fault_point != name:
        return
    with _lock:
        _hits[name] += 1
        if _hits[name] < cfg.fault_after:
            return
        # one line, flushed, then gone: no handler, daemon or atexit runs after this
        sys.stderr.write(
            f"backstop fault injection: exiting at point {name} (hit {_hits[name]}),"
            f" exit code {EXIT_CODE}\n"
        )
        sys.stderr.flush()
        os._exit(EXIT_CODE)


def hook() -> Callable[[config.FaultPoint], None] | None:
    """What the API layer calls at its own points: :func:`point` if one is armed, else ``None``.

    :mod:`backstop.k8s` may not import the controller; it takes this as a callback.
    """
    return point if config.settings().fault_point is not None else None
