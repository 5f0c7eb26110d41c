"""Exceptions raised by the planners, typed by what the caller should do.

``InvalidTopology`` means the input itself is wrong (fix the manifest; retrying
cannot help). ``Infeasible`` means the input is well formed but no plan can keep
the requested bound or fit the capacity; the message says what would make it
feasible (e.g. the smallest feasible bound). The operator maps both to permanent
errors; the CLI maps them to a clear message and a non-zero exit.
"""

from __future__ import annotations


class PlannerError(Exception):
    """Base class for every error a planner raises on purpose."""


class InvalidTopology(PlannerError):
    """The topology is malformed: a cycle, an unknown task, a bad latency."""


class Infeasible(PlannerError):
    """No plan satisfies the constraints.

    Parameters
    ----------
    message:
        What cannot be satisfied, naming the task/node and what would help.
    smallest_bound:
        The smallest recovery-latency bound that would be feasible, when known.
    """

    def __init__(self, message: str, *, smallest_bound: float | None = None) -> None:
        super().__init__(message)
        self.smallest_bound = smallest_bound


class UnknownAlgorithm(PlannerError, ValueError):
    """The algorithm name is not one of the family's registered names."""
