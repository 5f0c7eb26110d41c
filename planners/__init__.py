"""Backstop's planners: pure algorithms over a task DAG.

Nothing here imports kopf, kubernetes, pyspark or the ``backstop`` package
(an import-linter contract enforces it), so every planner can be tested,
benchmarked and reused without a cluster.
"""

from planners.errors import Infeasible, InvalidTopology, PlannerError, UnknownAlgorithm
from planners.graph import TaskGraph

__all__ = ["Infeasible", "InvalidTopology", "PlannerError", "TaskGraph", "UnknownAlgorithm"]
