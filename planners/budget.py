"""Deterministic budgets: the same input and budget give the same plan on any machine.

A planner that stops when the wall clock runs out answers the same question
differently on a busy laptop, an idle CI runner and the operator's pod, and even twice
in a row on one machine. Then ``backstop plan`` (the dry run) shows something the
operator will not do, and a re-plan of an unchanged topology moves pods for nothing. So
every planner measures its budget in *work*, never in seconds:

- the Python searches (greedy passes, local search, the recovery DP) count
  steps in a :class:`WorkBudget`; a ``time_limit`` of ``s`` seconds buys
  ``s * STEPS_PER_SECOND`` steps (the 2-core CI machine runs 0.2-1.2 million steps
  a second, so a nominal second of search takes at most about one);
- CP-SAT runs with a fixed seed, one worker (its sequential search is
  deterministic; on 2 cores it is also the fastest to the same plans,
  see ``docs/benchmarks/index.md``), and ``max_deterministic_time`` (CP-SAT's own work
  measure) instead of ``max_time_in_seconds`` (:func:`deterministic_cp_sat`).

On a slower machine a plan takes longer, but it is the same plan. Only a
wall-clock safety net (:data:`SAFETY_FACTOR` times the budget) remains, so that a
pathological instance on a starved machine still returns: if that net is ever
hit, the result may depend on the machine again.

Where the budget is also a promise in wall seconds to a user waiting at a terminal
(``backstop backups --time-limit``), the caller plans inside :func:`wall_limit`: the
searches stop at the work limit or at that many wall seconds, whichever comes first. On
a machine fast enough for the work, the plan is still the same as anywhere; on one too
slow for it, the user gets the best plan found in the seconds asked for. The operator
and the dry runs that must agree with it (``backstop plan``) never set a wall limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "CP_SAT_WORKERS",
    "CP_SAT_WORK_PER_SECOND",
    "SAFETY_FACTOR",
    "STEPS_PER_SECOND",
    "WorkBudget",
    "deterministic_cp_sat",
    "wall_limit",
    "wall_seconds_left",
]

STEPS_PER_SECOND = 200_000
"""Work steps per nominal second (one step is about one task touched by a recovery check
or a state copy); the slowest rate measured on the 2-core CI machine."""

CP_SAT_WORKERS = 1
"""CP-SAT's workers: a constant, never ``os.cpu_count()``, so the plan is the same on
every machine. One worker searches sequentially, which is deterministic; several
would need ``interleave_search``, which is 1.5-2x slower on the CI machine to the same plans."""

CP_SAT_WORK_PER_SECOND = 0.3
"""CP-SAT deterministic time bought by one nominal second. On the 2-core CI machine,
CP-SAT's deterministic second takes 3-6 wall seconds (presolve included)."""

CP_SAT_SEED = 20_240_518
"""CP-SAT's ``random_seed`` (any fixed value; fixed so it is stated, not a default)."""

SAFETY_FACTOR = 5.0
"""Wall-clock safety net for CP-SAT, as a multiple of its deterministic budget."""


_DEADLINE: ContextVar[float | None] = ContextVar("planner_wall_deadline", default=None)
"""The :func:`time.monotonic` instant the innermost :func:`wall_limit` ends, if any."""


class WorkBudget:
    """A budget of work steps that a planner spends and checks, instead of a deadline.

    Parameters
    ----------
    seconds:
        The nominal budget; it buys ``seconds * STEPS_PER_SECOND`` steps.

    Examples
    --------
    >>> b = WorkBudget(1e-5)
    >>> b.limit, b.exhausted
    (2, False)
    >>> half = b.mark(0.5)
    >>> b.spend(2)
    >>> b.exhausted, b.past(half), b.seconds_left()
    (True, True, 0.0)
    """

    def __init__(self, seconds: float) -> None:
        self.limit = max(1, math.ceil(max(0.0, seconds) * STEPS_PER_SECOND))
        self.spent = 0

    def spend(self, steps: int = 1) -> None:
        """Count ``steps`` units of work."""
        self.spent += steps

    def spend_seconds(self, seconds: float) -> None:
        """Count work measured in nominal seconds."""
        self.spent += math.ceil(max(0.0, seconds) * STEPS_PER_SECOND)

    def spend_cp_sat(self, deterministic_time: float) -> None:
        """Count what a CP-SAT solve used (its deterministic time, in nominal seconds)."""
        self.spend_seconds(deterministic_time / CP_SAT_WORK_PER_SECOND)

    @property
    def exhausted(self) -> bool:
        """Whether the budget is used up (or the wall seconds of a :func:`wall_limit`)."""
        if self.spent >= self.limit:
            return True
        deadline = _DEADLINE.get()
        return deadline is not None and time.monotonic() >= deadline

    def seconds_left(self) -> float:
        """The nominal seconds still unspent (never negative)."""
        return max(0, self.limit - self.spent) / STEPS_PER_SECOND

    def mark(self, fraction: float = 1.0) -> int:
        """A step count ``fraction`` of the way from now to the end: a deterministic deadline."""
        return self.spent + math.ceil(max(0, self.limit - self.spent) * fraction)

    def past(self, mark: int) -> bool:
        """Whether the work spent has reached ``mark`` (see :meth:`mark`)."""
        return self.spent >= mark

    def seconds_until(self, mark: int) -> float:
        """The nominal seconds of work left before ``mark`` (never negative)."""
        return max(0, mark - self.spent) / STEPS_PER_SECOND


@contextmanager
def wall_limit(seconds: float) -> Iterator[None]:
    """Within the block, no search runs past ``seconds`` wall seconds from now.

    CP-SAT solves (:func:`deterministic_cp_sat`) and :attr:`WorkBudget.exhausted`
    both stop there, besides their work limits.

    Examples
    --------
    >>> with wall_limit(60):
    ...     0 < wall_seconds_left() <= 60
    True
    >>> wall_seconds_left() is None
    True
    """
    token = _DEADLINE.set(time.monotonic() + max(0.0, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def wall_seconds_left() -> float | None:
    """Wall seconds left in the innermost :func:`wall_limit` (never negative), else ``None``."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def deterministic_cp_sat(parameters: Any, seconds: float) -> None:
    """Set CP-SAT's parameters so the result depends only on the model and ``seconds``.

    Parameters
    ----------
    parameters:
        ``CpSolver().parameters``.
    seconds:
        The nominal budget; CP-SAT gets ``seconds * CP_SAT_WORK_PER_SECOND`` of
        deterministic time.

    Notes
    -----
    ``random_seed`` fixed, ``num_workers`` a constant (one: sequential search),
    ``max_deterministic_time`` as the limit. ``max_time_in_seconds`` is only a
    safety net (:data:`SAFETY_FACTOR` times the nominal budget), or the wall seconds
    left in a :func:`wall_limit` when those are fewer.
    """
    budget = max(0.01, float(seconds))
    parameters.random_seed = CP_SAT_SEED
    parameters.num_workers = CP_SAT_WORKERS
    parameters.max_deterministic_time = budget * CP_SAT_WORK_PER_SECOND
    net = SAFETY_FACTOR * budget + 1.0
    left = wall_seconds_left()
    parameters.max_time_in_seconds = net if left is None else max(0.01, min(net, left))
