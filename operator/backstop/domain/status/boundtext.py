"""How a worst recovery is said next to the bound, in the user's terms.

The planners work with ``H`` (replay after the restart) against the planning bound
``recoveryLatencyBound - recovery.detectionSeconds - recovery.restartSeconds``; the user
set, and ``kubectl get st`` shows, ``recoveryLatencyBound``, counted from the failure. A
message "worst recovery 4.5s (bound 4s)" under a BOUND column of 9 read as a contradiction,
so every Event and message that compares the two says the total against the user's bound,
and how much of it is detection (``d``) and restart (``c``).
"""

from __future__ import annotations

from backstop.domain.spec import StreamTopologySpec


def worst_vs_bound(worst: float, spec: StreamTopologySpec) -> str:
    """``worst`` (``H``, seconds after the restart) said against the bound the user set.

    Examples
    --------
    >>> from backstop.domain.spec import parse_spec
    >>> ops = [{"name": "a", "reprocessingLatency": 1}]
    >>> spec = parse_spec({"image": "i", "recoveryLatencyBound": 9, "operators": ops,
    ...                    "recovery": {"restartSeconds": 5}})
    >>> worst_vs_bound(4.5, spec)
    '9.5s (5s restart + 4.5s after it; bound 9s)'
    >>> worst_vs_bound(2, parse_spec({"image": "i", "recoveryLatencyBound": 3, "operators": ops}))
    '2s (bound 3s)'
    """
    rec = spec.recovery
    return said(
        worst,
        detection=rec.detection_seconds,
        restart=rec.restart_seconds,
        bound=spec.recovery_latency_bound,
    )


def said(worst: float, *, restart: float, bound: float, detection: float = 0.0) -> str:
    """:func:`worst_vs_bound` from the numbers: ``worst`` after a ``detection`` and a
    ``restart`` of that many seconds, against the whole ``bound`` (``recoveryLatencyBound``).
    A term of 0 is left out.

    Examples
    --------
    >>> said(1.25, restart=0.5, bound=2)
    '1.75s (0.5s restart + 1.25s after it; bound 2s)'
    >>> said(2.1, detection=1, restart=5, bound=9)
    '8.1s (1s detection + 5s restart + 2.1s after it; bound 9s)'
    """
    terms = [f"{v:g}s {name}" for v, name in ((detection, "detection"), (restart, "restart")) if v]
    if not terms:
        return f"{worst:g}s (bound {bound:g}s)"
    total = detection + restart + worst
    return f"{total:g}s ({' + '.join(terms)} + {worst:g}s after it; bound {bound:g}s)"
