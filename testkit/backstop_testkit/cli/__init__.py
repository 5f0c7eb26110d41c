"""``python -m backstop_testkit``: the development commands that drive a local cluster.

They serve demos, tests and benchmarks, never a production cluster, so they live in the
test kit and not in the ``backstop`` command the operator image ships: ``nodes`` creates,
runs, kills, revives and adds the local cluster's nodes (simulated or real), ``metrics
generate`` writes synthetic metrics for the re-optimization job. Like ``backstop``, each
command module adds itself with ``register(app)`` and imports the Kubernetes client and the
simulators inside the commands that use them.
"""

from __future__ import annotations

import typer

from backstop_testkit.cli import metrics, nodes

__all__ = ["app"]

app = typer.Typer(
    name="python -m backstop_testkit",
    help="Backstop's development commands: the local cluster's nodes, synthetic metrics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# one register() per command module; keep them alphabetical
for _module in (metrics, nodes):
    _module.register(app)


@app.callback()
def _main() -> None:
    """Backstop's development commands: the local cluster's nodes, synthetic metrics."""
