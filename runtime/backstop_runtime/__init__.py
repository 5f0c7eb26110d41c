"""Backstop's task runtime: one process per task, run as ``python -m backstop_runtime``.

It is configured only by what the operator gives the pod (``BACKSTOP_*`` env, the
``<topology>-recovery`` session file, ``spec.operators[].config`` as ``BACKSTOP_CONFIG``),
and it imports nothing of the operator: an import-linter contract keeps it that way, so
the runtime image ships the standard library and the user's code only.
"""

from backstop_runtime.api import Columns, Combiner, Context, Operator, Record, Sink, Source

__all__ = ["Columns", "Combiner", "Context", "Operator", "Record", "Sink", "Source"]
__version__ = "0.2.0"  # pyproject.toml's version (tests/unit/test_version.py)
