"""Backstop: a Kopf operator for stream topologies with a guaranteed recovery latency.

The package holds the domain layer (the StreamTopology model and its expansion
into a task DAG), the CLI, the node simulator, the Kopf handlers and the Spark
re-optimization job. Pure algorithms live in the separate ``planners`` package.
"""

__version__ = "0.1.0"
