"""What every ``backstop`` command shares: exit codes, :func:`fail`, :func:`guarded`,
:func:`print_json`.

They live apart from the app (``backstop.cli``) so the command modules import them
without importing the app that imports the command modules (no import cycle).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer

from planners import Infeasible, InvalidTopology, PlannerError

if TYPE_CHECKING:
    from pathlib import Path

    from backstop.domain.spec import StreamTopology, StreamTopologySpec

P = ParamSpec("P")
R = TypeVar("R")

EXIT_INVALID = 2
EXIT_INFEASIBLE = 3
EXIT_UNPROVEN = 4
"""An exact algorithm's plan, printed, whose optimality its budget ran out before proving."""


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


def load_manifest(path: str | Path) -> StreamTopology:
    """Read a manifest to plan it offline: any size, since no object is stored and none of a
    cluster's ceilings applies (``docs/scale.md``). A topology a cluster would refuse gets a
    note on stderr naming the field, and is planned all the same."""
    from backstop.domain.admission import cluster_problem  # see backstop.cli: lazy imports
    from backstop.domain.spec import load_topology

    topo = load_topology(path)
    problem = cluster_problem(topo.spec)
    if problem is not None:
        typer.echo(f"note: planned offline; a cluster refuses this topology: {problem}", err=True)
    return topo


def planners_bound(spec: StreamTopologySpec, bound: float | None) -> float:
    """The bound the planners keep: R (``--bound``, else the manifest's) minus the detection
    time ``spec.recovery.detectionSeconds`` and the pod restart time
    ``spec.recovery.restartSeconds``, since a loss is detected first, then a lost task
    restarts and recovers within H (:func:`backstop.domain.budget.budget`, the operator's too).
    Exits with a message naming them when R leaves no time."""
    from backstop.domain.budget import budget, fixed_terms_text  # see backstop.cli: lazy

    left = budget(spec, bound)
    if left <= 0:
        r = spec.recovery_latency_bound if bound is None else bound
        source = "--bound" if bound is not None else "spec.recoveryLatencyBound"
        fail(
            f"the bound {r:g}s ({source}) must exceed the spec's {fixed_terms_text(spec)}: "
            "detecting a loss and restarting a lost task's pod alone take that long",
            EXIT_INFEASIBLE,
        )
    return left
