"""``backstop backups``: preview which tasks keep upstream backups, before deploying.

Why a separate command: choosing backups is the first planning step and the
cheapest to reason about alone. Users (and CI) can check that a manifest's
recovery-latency bound is achievable, how many backups it costs, and how the
algorithms compare, without a cluster. The plan printed is the one the
failure-effect evaluator has already checked.

"The seed" in the help is "Minimum Backups for Stream Processing With Recovery Latency
Guarantees" (Li, Wu, Jiang, Li, Wei). ``line`` and ``dag`` are Backstop's variants of its
algorithms, and the help says what differs (docs/seeds.md says how): ``line`` is its
Algorithm 2 without the backup that algorithm adds every round, ``dag`` its Algorithm FTC
with candidates ranked by b-cover share, not Algorithm 4's backup workload, and with the
final elimination of redundant backups; ``share-based`` is the baseline of its experiments
(section V.A).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from backstop.cli._output import guarded, load_manifest, planners_bound, print_json
from planners.backups import BACKUP_ALGORITHMS, plan_backups
from planners.budget import wall_limit
from planners.evaluate import recovery_latencies

if TYPE_CHECKING:
    from planners import TaskGraph
    from planners.backups import BackupPlan

HELP = (
    "Choose the fewest tasks that keep upstream backups so that every single-task failure "
    "recovers within the bound.\n\n"
    "A task that keeps an upstream backup buffers its output, so a failed consumer replays "
    "from it at once; without one, the consumer waits for the task's own recovery. The bound "
    "is the manifest's spec.recoveryLatencyBound unless --bound overrides it.\n\n"
    "Algorithms: auto (default: the exact linear algorithm for line(s) and trees; otherwise "
    "the greedy plan where it meets a lower bound of disjoint paths, else the DAG heuristic "
    "with local search, proven minimum by that bound or by trying every plan of one backup "
    "fewer where there are few, else CP-SAT within --time-limit starting from it, where "
    "the budget left pays for the graph's size (5,000 tasks and edges per second left)), "
    "line (Backstop's variant of the seed's Algorithm 2: no backup added every round), "
    "tree, dag (Backstop's variant of the seed's DAG heuristic: candidates ranked by b-cover "
    "share instead of backup workload, then the final redundancy elimination), dag-no-elim "
    "(without it), share-based (the seed's baseline), exhaustive (tiny "
    "graphs), exact (CP-SAT, proven optimal when it finishes in time).\n\n"
    "Exit codes: 0 ok, 2 invalid manifest or option, 3 infeasible bound (the message gives "
    "the smallest feasible bound)."
)


def register(app: typer.Typer) -> None:
    """Add the ``backups`` command to the ``backstop`` app."""
    app.command("backups", help=HELP)(backups)


TopologyArg = Annotated[
    Path, typer.Argument(help="StreamTopology manifest (YAML).", show_default=False)
]
AlgorithmOpt = Annotated[
    str,
    typer.Option("--algorithm", "-a", help="One of: " + ", ".join(BACKUP_ALGORITHMS) + "."),
]
BoundOpt = Annotated[
    float | None,
    typer.Option("--bound", help="Recovery-latency bound in seconds; overrides the manifest."),
]
TimeLimitOpt = Annotated[
    float,
    typer.Option(
        "--time-limit",
        min=0.0,
        help="Budget of the searching algorithms in seconds on this machine: they stop at "
        "a deterministic work limit (the same input and budget give the same plan on any "
        "machine fast enough to do that work in time) or after that many seconds, "
        "whichever comes first.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")]


@guarded
def backups(
    topology: TopologyArg,
    algorithm: AlgorithmOpt = "auto",
    bound: BoundOpt = None,
    time_limit: TimeLimitOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    from backstop.domain.spec import expand  # see backstop.cli: lazy imports

    topo = load_manifest(topology)
    graph = expand(topo.spec)
    r = planners_bound(topo.spec, bound)  # the planners keep H(F) + restart within R
    with wall_limit(time_limit):  # a user waits: the budget is seconds on this machine
        plan = plan_backups(graph, r, algorithm=algorithm, time_limit=time_limit)
    if as_json:
        print_json(
            {
                "algorithm": plan.algorithm,
                "bound": plan.bound,
                "backups": list(plan.backups),
                "worstRecoveryLatency": plan.worst,
                "optimal": plan.optimal,
                "tasks": len(graph),
            }
        )
        return
    _print_backups(topo.metadata.name, graph, plan)


def _print_backups(name: str, graph: TaskGraph, plan: BackupPlan) -> None:
    """The backup plan as a table of tasks and their recovery latencies, then a summary."""
    latency = recovery_latencies(graph, plan.backups)
    chosen = set(plan.backups)
    table = Table(title=f"{name}: backups ({plan.algorithm})")
    table.add_column("task")
    table.add_column("operator")
    table.add_column("t_v (s)", justify="right")
    table.add_column("backup", justify="center")
    table.add_column("recovery L(v) (s)", justify="right")
    for i, task in enumerate(graph.tasks):
        table.add_row(
            task,
            graph.operator[i],
            f"{graph.latency[i]:g}",
            "yes" if task in chosen else "",
            f"{latency[task]:g}",
        )
    console = Console()
    console.print(table)
    optimal = {True: "proven minimum", False: "not proven minimum", None: "optimality unknown"}
    console.print(
        f"{len(plan.backups)} of {len(graph)} tasks keep backups ({optimal[plan.optimal]}); "
        f"worst recovery {plan.worst:g}s <= bound {plan.bound:g}s"
    )
