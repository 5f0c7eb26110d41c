"""The ``backstop`` command line: planning previews, the node simulator, the operator.

Every command reads manifests through :mod:`backstop.spec`, calls the pure
planners, and checks their result with the failure-effect evaluator before
printing it. Errors the user can fix (bad manifest, infeasible bound) are
printed as one clear message with a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

import typer

from planners import Infeasible, InvalidTopology, PlannerError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_INVALID = 2
EXIT_INFEASIBLE = 3

app = typer.Typer(
    name="backstop",
    help="Backstop: stream topologies on Kubernetes with a guaranteed recovery latency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn planner errors into a clear message and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except Infeasible as err:
            fail(f"infeasible: {err}", EXIT_INFEASIBLE)
        except InvalidTopology as err:
            fail(f"invalid topology: {err}")
        except PlannerError as err:
            fail(str(err))

    return wrapper


def print_json(obj: Any) -> None:
    """Print exactly one JSON object on stdout."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


# ---- command registration: each command module adds itself here ----------
# (one import per module; keep them alphabetical)
from backstop import cli_backups  # noqa: E402

cli_backups.register(app)
from backstop import cli_nodes  # noqa: E402

cli_nodes.register(app)
from backstop import cli_operator  # noqa: E402

cli_operator.register(app)
from backstop import cli_place  # noqa: E402

cli_place.register(app)
from backstop import cli_recover  # noqa: E402

cli_recover.register(app)
from backstop import cli_reoptimize  # noqa: E402

cli_reoptimize.register(app)
# ---- end of command registration ------------------------------------------


@app.callback()
def _main() -> None:
    """Backstop: plan backups and placement, simulate nodes, run the operator."""
