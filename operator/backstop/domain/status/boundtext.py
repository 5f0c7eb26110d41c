"""How a worst recovery is said next to the bound, in the user's terms.

The planners work with ``H`` (replay after the restart) against the planning bound
``recoveryLatencyBound - recovery.restartSeconds``; the user set, and ``kubectl get st``
shows, ``recoveryLatencyBound``. A message "worst recovery 4.5s (bound 4s)" under a BOUND
column of 9 read as a contradiction, so every Event and message that compares the two says
the total against the user's bound, and how much of it is the restart.
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
    return said(worst, restart=spec.recovery.restart_seconds, bound=spec.recovery_latency_bound)


def said(worst: float, *, restart: float, bound: float) -> str:
    """:func:`worst_vs_bound` from the numbers: ``worst`` after a ``restart`` of that many
    seconds, against the whole ``bound`` (``recoveryLatencyBound``).

    Examples
    --------
    >>> said(1.25, restart=0.5, bound=2)
    '1.75s (0.5s restart + 1.25s after it; bound 2s)'
    """
    if not restart:
        return f"{worst:g}s (bound {bound:g}s)"
    return f"{restart + worst:g}s ({restart:g}s restart + {worst:g}s after it; bound {bound:g}s)"
