"""The ``backstop`` command line: planning previews, recovery and re-optimization, the operator.

Every command reads manifests through :mod:`backstop.domain.spec`, calls the pure
planners, and checks their result with the failure-effect evaluator before
printing it. Errors the user can fix (bad manifest, infeasible bound) are
printed as one clear message with a non-zero exit, never a traceback
(:mod:`backstop.cli._output`). Each command module adds itself with ``register(app)``.
The development commands (the local cluster's nodes, synthetic metrics) are the test
kit's (``python -m backstop_testkit``), not part of this command.

Lazy imports: every command module is imported to build the app (its options and help),
so at module level they import only typer, rich, the constants and the pure planners'
registries (whose names the help lists). The manifest models (pydantic), the Kubernetes
client and the solvers (ortools, with pandas) take seconds to import, so
they are imported inside the commands that use them and ``backstop --help`` stays quick.
``tests/unit/test_cli_imports.py`` checks that ``backstop --help`` imports none of them.
"""

from __future__ import annotations

import typer

from backstop import __version__
from backstop.cli import backups, operator, place, recover, reoptimize, replicate, run
from backstop.cli._output import EXIT_INFEASIBLE, EXIT_INVALID, fail, guarded, print_json

__all__ = ["EXIT_INFEASIBLE", "EXIT_INVALID", "app", "fail", "guarded", "print_json"]

app = typer.Typer(
    name="backstop",
    help="Backstop: stream topologies on Kubernetes with a guaranteed recovery latency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# one register() per command module; keep them alphabetical
for _module in (backups, operator, place, recover, reoptimize, replicate, run):
    _module.register(app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"backstop {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version (of the package, the chart and the images) and exit.",
    ),
) -> None:
    """Backstop: plan backups and placement, recover and re-optimize, run the operator."""
