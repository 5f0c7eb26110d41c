"""``backstop recover``: preview the first recovery plan after losing some nodes.

Before an incident, an operator wants to know what losing a rack would
cost, and which queries would come back first with the capacity left; after
one, the same answer explains what the operator is doing. The command takes
the topology, the current placement (``backstop place --json`` output or a
plain task → node map) and the Node objects, treats the ``--lost`` nodes'
tasks as failed, and runs the same recovery scheduler the operator runs on
every other node's free CPU (allocatable × utilisation cap − what the
placement already puts there). The plan printed is checked by
:func:`planners.recovery.check_recovery` first. An exact algorithm (``dp``, ``exact``) whose
budget (``--time-limit``) runs out before it proves its plan optimal still prints the plan,
says so on stderr and exits with status 4, so a script never takes it for the optimum.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from backstop.cli._output import EXIT_UNPROVEN, fail, guarded, load_manifest, print_json
from backstop.domain.yamlio import load_all
from planners import TaskGraph
from planners.recovery import (
    RECOVERY_ALGORITHMS,
    RecoveryStep,
    check_recovery,
    free_capacity,
    node_load,
    schedule_recovery,
)

__all__ = ["load_assignment", "recover_command", "register"]


def load_assignment(path: Path, graph: TaskGraph) -> dict[str, str]:
    """Task → node from a JSON file: a plain map, or ``backstop place --json`` output.

    Every task of the topology must be assigned, and nothing else.
    """
    try:
        doc: Any = json.loads(path.read_text())
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror}")
    except json.JSONDecodeError as err:
        fail(f"{path} is not valid JSON: {err}")
    if isinstance(doc, dict) and isinstance(doc.get("assignment"), dict):
        doc = doc["assignment"]
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in doc.items()
    ):
        fail(f"{path} must map task ids to node names (or hold such an 'assignment')")
    known = set(graph.tasks)
    unknown = sorted(set(doc) - known)
    if unknown:
        fail(f"{path} assigns unknown task(s): {', '.join(unknown)}")
    missing = [t for t in graph.tasks if t not in doc]
    if missing:
        fail(f"{path} leaves task(s) unassigned: {', '.join(missing)}")
    return dict(doc)


def _node_names(docs: Iterable[Any]) -> Iterator[str]:
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        if isinstance(doc.get("items"), list):
            yield from _node_names(doc["items"])
        elif doc.get("kind") == "Node":
            name = (doc.get("metadata") or {}).get("name")
            if name:
                yield str(name)


def load_node_cpu(path: Path) -> tuple[dict[str, float], set[str]]:
    """Allocatable CPU of the usable (Ready, schedulable) nodes, and every node name listed."""
    try:
        docs = load_all(path.read_text())
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror}")
    except yaml.YAMLError as err:
        fail(f"{path} is not valid YAML: {err}")
    names = set(_node_names(docs))
    if not names:
        fail(f"{path} holds no Node objects")
    from backstop.k8s.nodes import nodes_from_manifests  # see backstop.cli: lazy imports

    usable = {n.name: n.cpu for n in nodes_from_manifests(docs)}
    return usable, names


def _print_table(step: RecoveryStep, lost: list[str], capacity: Mapping[str, float]) -> None:
    console = Console()
    table = Table(title=f"Recovery after losing {', '.join(lost)} ({step.algorithm})")
    table.add_column("task")
    table.add_column("recover on")
    for task, node in step.recover.items():
        table.add_row(task, node)
    for task in step.pending:
        table.add_row(task, "[yellow]pending[/yellow]")
    console.print(table)
    free = ", ".join(f"{n} {c:g}" for n, c in sorted(capacity.items())) or "none"
    console.print(f"free CPU before the plan (cores): {free}")
    queries = ", ".join(step.recovered_queries) or "none"
    console.print(
        f"recovered queries: {queries}  "
        f"(priority {step.recovered_priority:g} of {step.failed_priority:g} failed)"
    )
    if step.optimal:
        console.print("the plan is proven optimal")
    else:
        console.print("the plan is not proven optimal")
        if step.upper_bound is not None:
            console.print(f"no plan recovers more than priority {step.upper_bound:g}")


TopologyArg = Annotated[
    Path, typer.Argument(help="A StreamTopology manifest (YAML).", show_default=False)
]
AssignmentOpt = Annotated[
    Path,
    typer.Option(
        "--assignment",
        help="Task id → node JSON, or the object `backstop place --json` prints.",
        show_default=False,
    ),
]
NodesOpt = Annotated[
    Path,
    typer.Option(
        "--nodes",
        help="Kubernetes Node objects (a List or multi-document YAML).",
        show_default=False,
    ),
]
LostOpt = Annotated[
    str,
    typer.Option("--lost", help="Lost node(s), comma-separated.", show_default=False),
]
AlgorithmOpt = Annotated[
    str | None,
    typer.Option(
        "--algorithm",
        help="Recovery algorithm: "
        + ", ".join(RECOVERY_ALGORITHMS)
        + " (default: the spec's, normally auto).",
    ),
]
UtilizationOpt = Annotated[
    float | None,
    typer.Option(
        "--utilization",
        help="Usable share of each node's allocatable CPU (default: the spec's, 0.8).",
    ),
]
TimeLimitOpt = Annotated[
    float,
    typer.Option(
        "--time-limit",
        help="Budget of the exact solver in nominal seconds: a deterministic work limit, "
        "so the same input and budget give the same plan on any machine. If dp or exact "
        "has not proven its plan optimal within it, the plan is printed with a note on "
        "stderr and the exit status is 4.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


@guarded
def recover_command(
    topology: TopologyArg,
    assignment: AssignmentOpt,
    nodes: NodesOpt,
    lost: LostOpt,
    algorithm: AlgorithmOpt = None,
    utilization: UtilizationOpt = None,
    time_limit: TimeLimitOpt = 5.0,
    as_json: JsonOpt = False,
) -> None:
    """Plan the recovery of the tasks on the --lost nodes, onto the other nodes' free CPU."""
    from backstop.domain.incidents import recovery_json
    from backstop.domain.spec import expand

    topo = load_manifest(topology)
    graph = expand(topo.spec)
    placed = load_assignment(assignment, graph)
    usable, names = load_node_cpu(nodes)
    lost_nodes = _lost_nodes(lost, names, placed, nodes)
    cap = topo.spec.recovery.utilization_cap if utilization is None else utilization
    if not 0 < cap <= 1:
        fail(f"--utilization {cap} must be in (0, 1]")
    name = algorithm or topo.spec.recovery.algorithm
    gone = set(lost_nodes)
    failed = [t for t in graph.tasks if placed[t] in gone]
    available = {n: c for n, c in usable.items() if n not in gone}
    running = {t: n for t, n in placed.items() if n not in gone}
    capacity = free_capacity(available, node_load(graph, running), cap)
    step = schedule_recovery(graph, failed, capacity, algorithm=name, time_limit=time_limit)
    problems = check_recovery(graph, failed, capacity, step)
    if problems:  # a planner bug: refuse to print a wrong plan
        fail("the recovery plan failed validation: " + "; ".join(problems), 1)
    if as_json:
        print_json({**recovery_json(step), "optimal": step.optimal})
    else:
        _print_table(step, lost_nodes, capacity)
    if name in EXACT and not step.optimal:
        typer.echo(
            f"note: {name} ran out of its budget (--time-limit {time_limit:g}) before proving "
            "its plan optimal; the plan is valid, and a larger --time-limit may prove it or "
            "find a better one",
            err=True,
        )
        raise typer.Exit(EXIT_UNPROVEN)


EXACT = ("dp", "exact")
"""The algorithms that promise the optimum: an unproven plan of theirs exits with
:data:`~backstop.cli._output.EXIT_UNPROVEN`."""


def _lost_nodes(lost: str, names: set[str], placed: Mapping[str, str], nodes: Path) -> list[str]:
    """The ``--lost`` nodes, each listed in ``nodes``, as is every node the assignment uses."""
    lost_nodes = [n.strip() for n in lost.split(",") if n.strip()]
    if not lost_nodes:
        fail("--lost names no node")
    unknown = [n for n in lost_nodes if n not in names]
    if unknown:
        fail(f"--lost names node(s) not in {nodes}: {', '.join(unknown)}")
    stray = sorted({n for n in placed.values() if n not in names})
    if stray:
        fail(f"the assignment uses node(s) not in {nodes}: {', '.join(stray)}")
    return lost_nodes


def register(app: typer.Typer) -> None:
    """Add ``recover`` to the ``backstop`` app."""
    app.command("recover")(recover_command)
