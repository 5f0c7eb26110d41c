"""Backstop: a Kopf operator for stream topologies with a guaranteed recovery latency.

The package holds the domain layer (the StreamTopology model and its expansion
into a task DAG), the CLI, the node simulator, the Kopf handlers and the Spark
re-optimization job. Pure algorithms live in the separate ``planners`` package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("backstop")
    """The installed package's version: pyproject.toml's ``version``, which the chart's
    ``version`` and ``appVersion`` and every image tag follow (tests/unit/test_version.py)."""
except PackageNotFoundError:  # the source tree on sys.path, not installed
    __version__ = "0+unknown"
