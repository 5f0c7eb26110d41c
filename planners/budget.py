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
hit, the result may depend on the machine again. A planner whose budget is also a
promise in wall seconds to the user (``backstop backups --time-limit``) passes a
``deadline`` (:func:`wall_deadline`) that replaces the net: the work limit decides
where the machine is fast enough for it, the deadline where it is not.
"""

from __future__ import annotations

import math
import time
from typing import Any

__all__ = [
    "CP_SAT_WORKERS",
    "CP_SAT_WORK_PER_SECOND",
    "SAFETY_FACTOR",
    "STEPS_PER_SECOND",
    "WorkBudget",
    "deterministic_cp_sat",
    "wall_deadline",
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
        """Whether the budget is used up."""
        return self.spent >= self.limit

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


def wall_deadline(seconds: float) -> float:
    """The :func:`time.monotonic` instant ``seconds`` of wall time from now."""
    return time.monotonic() + max(0.0, seconds)


def deterministic_cp_sat(parameters: Any, seconds: float, deadline: float | None = None) -> None:
    """Set CP-SAT's parameters so the result depends only on the model and ``seconds``.

    Parameters
    ----------
    parameters:
        ``CpSolver().parameters``.
    seconds:
        The nominal budget; CP-SAT gets ``seconds * CP_SAT_WORK_PER_SECOND`` of
        deterministic time.
    deadline:
        A :func:`wall_deadline` the solve must not pass, or ``None``.

    Notes
    -----
    ``random_seed`` fixed, ``num_workers`` a constant (one: sequential search),
    ``max_deterministic_time`` as the limit. ``max_time_in_seconds`` is only a
    safety net (:data:`SAFETY_FACTOR` times the nominal budget), or the wall time left
    before ``deadline`` when one is given.
    """
    budget = max(0.01, float(seconds))
    parameters.random_seed = CP_SAT_SEED
    parameters.num_workers = CP_SAT_WORKERS
    parameters.max_deterministic_time = budget * CP_SAT_WORK_PER_SECOND
    if deadline is None:
        parameters.max_time_in_seconds = SAFETY_FACTOR * budget + 1.0
    else:
        parameters.max_time_in_seconds = max(0.01, deadline - time.monotonic())
