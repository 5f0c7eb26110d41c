"""``backstop replicate``: which tasks get an active replica on the spare CPU, and what it buys.

Active replicas cost CPU; how much of the queries' availability a given spare budget buys
is the question of "Adaptive Selective Replication for Complex Event Processing Systems"
(Grüneberger, Heinze, Felber), "the seed" of the help texts: its importance heuristics
and operator selection (sections 3.1 and 3.2) choose the replicas. This previews the
operator's choice for a topology (its placement, then the replicas) and, with
``--host-failure-prob``, rates it under that paper's failure model (section 2.3: every
node crashing independently with that probability over a day). The plan is checked by
:func:`planners.replication.check_replication` before it is printed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from backstop.cli._output import fail, guarded, load_manifest, print_json
from backstop.cli.place import (
    AlgorithmOpt,
    NodeCpuOpt,
    NodesOpt,
    TimeLimitOpt,
    TopologyArg,
    _pool,
    compute_plan,
)
from backstop.domain.constants import DEFAULT_TIME_LIMIT
from planners.replication import SELECTIONS, STRATEGIES, check_replication, select_replicas

if TYPE_CHECKING:
    from planners import TaskGraph
    from planners.placement import NodePool, Placement
    from planners.replication import ReplicationPlan

__all__ = ["register", "replicate_command"]


SpareCpuOpt = Annotated[
    str | None,
    typer.Option(
        "--spare-cpu",
        help="CPU budget for replicas, a Kubernetes quantity (default: the spec's "
        "replication.spareCpu, else all spare CPU).",
    ),
]
StrategyOpt = Annotated[
    str | None,
    typer.Option(
        "--strategy",
        help="Importance: " + ", ".join(STRATEGIES) + " (default: the spec's, else qod-lu).",
    ),
]
SelectionOpt = Annotated[
    str | None,
    typer.Option(
        "--selection",
        help="One of: " + ", ".join(SELECTIONS) + " (default: best with "
        "--host-failure-prob, else knapsack).",
    ),
]
LevelOpt = Annotated[
    int, typer.Option("--level", min=1, help="Most replicas per task (default 1).")
]
HostFailureProbOpt = Annotated[
    float | None,
    typer.Option(
        "--host-failure-prob",
        min=0.0,
        max=1.0,
        help="Probability that a node crashes within the period (the seed's p, e.g. 0.02); "
        "reports the expected share of queries still running (default: the spec's).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


@guarded
def replicate_command(
    topology: TopologyArg,
    node_cpu: NodeCpuOpt = None,
    nodes: NodesOpt = None,
    algorithm: AlgorithmOpt = None,
    spare_cpu: SpareCpuOpt = None,
    strategy: StrategyOpt = None,
    selection: SelectionOpt = None,
    level: LevelOpt = 1,
    host_failure_prob: HostFailureProbOpt = None,
    json_output: JsonOpt = False,
    time_limit: TimeLimitOpt = DEFAULT_TIME_LIMIT,
) -> None:
    """Choose active replicas for a topology's spare CPU and rate the availability they buy."""
    topo = load_manifest(topology)
    pool = _pool(node_cpu, nodes, None, topo)
    graph, plan = compute_plan(topo, pool, algorithm=algorithm, time_limit=time_limit)
    policy = topo.spec.replication
    p = host_failure_prob
    if p is None and policy is not None:
        p = policy.host_failure_prob
    sel = selection or ("best" if p is not None else "knapsack")
    if sel not in SELECTIONS:
        fail(f"--selection: unknown {sel!r}; choose one of: {', '.join(SELECTIONS)}")
    spare = _spare_cpu(graph, plan, pool, identical=node_cpu is not None)
    quantity = spare_cpu if spare_cpu is not None else (policy.spare_cpu if policy else None)
    budget = _budget(quantity, spare)
    rep = select_replicas(
        graph,
        plan.assignment,
        spare,
        budget=budget,
        strategy=strategy or (policy.strategy if policy else "qod-lu"),
        selection=sel,
        level=level,
        host_failure_prob=p,
    )
    problems = check_replication(graph, plan.assignment, spare, rep, budget=budget)
    if problems:  # a planner bug: never print a plan the validator rejects
        fail("replication plan failed its check: " + "; ".join(problems), 1)
    if json_output:
        print_json(_replication_json(rep, budget, p))
    else:
        _print_replication(rep, plan, len(graph), budget, p)


def _spare_cpu(
    graph: TaskGraph, plan: Placement, pool: NodePool, *, identical: bool
) -> dict[str, float]:
    """CPU left on each node a replica may use, once the plan's tasks are placed.

    Identical nodes (``--node-cpu``): the plan's nodes and as many fresh ones (room for a
    full copy); listed nodes (``--nodes``): all of them.
    """
    used: dict[str, float] = {}
    for t, n in plan.assignment.items():
        used[n] = used.get(n, 0.0) + graph.weight[graph.index(t)]
    slots = pool.slots(2 * len(graph))
    if identical:
        fresh = [s for s in slots if s.name not in used][: len(used)]
        hosts = [s for s in slots if s.name in used] + fresh
    else:
        hosts = list(slots)
    return {s.name: max(0.0, s.cpu - used.get(s.name, 0.0)) for s in hosts}


def _budget(quantity: str | None, spare: dict[str, float]) -> float:
    """Cores replicas may use: ``quantity`` (a Kubernetes quantity), else all spare CPU."""
    from backstop.domain.spec import cpu_cores  # see backstop.cli

    try:
        budget = cpu_cores(quantity) if quantity is not None else sum(spare.values())
    except ValueError as err:
        fail(f"--spare-cpu: {err}")
    if budget < 0:
        fail(f"--spare-cpu: {quantity} is negative")
    return budget


def _replication_json(rep: ReplicationPlan, budget: float, p: float | None) -> dict[str, object]:
    """The ``--json`` object of ``backstop replicate``."""
    return {
        "strategy": rep.strategy,
        "selection": rep.selection,
        "budget": budget,
        "cpu": rep.cpu,
        "replicas": {t: list(ns) for t, ns in rep.replicas.items()},
        "unplaced": list(rep.unplaced),
        "availability": rep.availability,
        "baselineAvailability": rep.baseline_availability,
        "hostFailureProb": p,
        "crashAvailability": rep.crash_availability,
        "baselineCrashAvailability": rep.baseline_crash_availability,
    }


def _print_replication(
    rep: ReplicationPlan, plan: Placement, tasks: int, budget: float, p: float | None
) -> None:
    """The replicas chosen and the availability with and without them, as text."""
    typer.echo(
        f"{rep.selection}/{rep.strategy}: {len(rep.replicas)} of {tasks} tasks replicated, "
        f"{rep.cpu:g} of {budget:g} cores"
    )
    for t, ns in rep.replicas.items():
        typer.echo(f"  {t} (primary {plan.assignment[t]}) -> {', '.join(ns)}")
    if rep.unplaced:
        typer.echo(f"selected but no room: {', '.join(rep.unplaced)}")
    typer.echo(
        f"one node lost (uniform): {100 * rep.availability:.2f}% of queries keep running "
        f"(without replicas {100 * rep.baseline_availability:.2f}%)"
    )
    if rep.crash_availability is not None and rep.baseline_crash_availability is not None:
        typer.echo(
            f"every node crashing with p = {p:g}: {100 * rep.crash_availability:.2f}% of "
            f"queries keep running (without replicas {100 * rep.baseline_crash_availability:.2f}%)"
        )


def register(app: typer.Typer) -> None:
    """Add ``replicate`` to the ``backstop`` app."""
    app.command("replicate")(replicate_command)
