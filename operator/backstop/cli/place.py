"""``backstop place`` and ``backstop plan``: placement previews before ``kubectl apply``.

A user must be able to see, without a cluster, which node each task would
land on, which tasks keep backups, and what losing each node would cost — and
whether the recovery-latency bound holds — before trusting the operator with
it. Both commands call the same pure planners the operator calls and print
what the failure-effect evaluator says about the result, never the planner's
own claim.

"The seeds" of the ``--backups`` help are "Task Allocation for Stream Processing with
Recovery Latency Guarantee" and its journal version "A Task Allocation Method for Stream
Processing with Recovery Latency Constraint" (Li, Wu, Jiang, Li, Wei), which assume that
every task keeps an upstream backup (conference paper, section II.B).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from backstop.cli._output import guarded, load_manifest, planners_bound, print_json
from backstop.domain.constants import DEFAULT_TIME_LIMIT
from planners import PlannerError, TaskGraph
from planners.evaluate import node_failure_latency, worst_correlated_failure
from planners.placement import PLACEMENT_ALGORITHMS, NodePool, Placement, place, plan_joint

if TYPE_CHECKING:  # the models are imported by the commands (see backstop.cli)
    from backstop.domain.spec import StreamTopology

__all__ = ["BackupsOption", "bound_terms", "compute_plan", "placement_json", "register"]


class BackupsOption(StrEnum):
    """Which tasks keep upstream backups."""

    all = "all"
    planned = "planned"


TopologyArg = Annotated[
    Path, typer.Argument(help="A StreamTopology manifest (YAML).", show_default=False)
]
NodeCpuOpt = Annotated[
    float | None,
    typer.Option(
        "--node-cpu",
        help="Use as many identical nodes of this many cores as needed (node-0, node-1, …).",
    ),
]
NodesOpt = Annotated[
    Path | None,
    typer.Option("--nodes", help="Kubernetes Node objects (a List or multi-document YAML)."),
]
AlgorithmOpt = Annotated[
    str | None,
    typer.Option(
        "--algorithm",
        help="Placement algorithm: "
        + ", ".join(PLACEMENT_ALGORITHMS)
        + " (default: the spec's). rtap-bf/-ff/-nf are Backstop's variants of the RTAP "
        "journal's Algorithm 1: tasks grouped by adjacent pairs, not by its Section 5.3.3 "
        "rule (rtap-*-literal), and the fit checked by the failure-effect model.",
    ),
]
BackupsOpt = Annotated[
    BackupsOption | None,
    typer.Option(
        "--backups",
        help="all: every task keeps backups (the seeds); planned: chosen with the placement "
        "(default: the spec's).",
    ),
]
BoundOpt = Annotated[
    float | None,
    typer.Option("--bound", help="Recovery-latency bound in seconds (default: the spec's)."),
]
TopologyKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--topology-key",
        help="Node label of a failure domain, e.g. topology.kubernetes.io/zone "
        "(default: the spec's).",
    ),
]
TimeLimitOpt = Annotated[
    float,
    typer.Option(
        "--time-limit",
        min=0.1,
        help="Planner budget in nominal seconds: a deterministic work limit, so the same "
        "input and budget give the same plan on any machine (default: the operator's).",
    ),
]


def _pool(
    node_cpu: float | None, nodes: Path | None, topology_key: str | None, topo: StreamTopology
) -> NodePool:
    from backstop.domain.incidents import topology_tolerations
    from backstop.k8s.nodes import load_nodes

    if (node_cpu is None) == (nodes is None):
        raise PlannerError("give exactly one of --node-cpu CPU or --nodes NODES.yaml")
    if node_cpu is not None:
        if topology_key:
            raise PlannerError("--topology-key needs --nodes (identical nodes have no labels)")
        return NodePool.uniform(node_cpu)
    assert nodes is not None
    # tainted nodes as the operator sees them: usable only if every operator's pods tolerate
    return NodePool.of(load_nodes(nodes, topology_key, topology_tolerations(topo.spec)))


def compute_plan(
    topo: StreamTopology,
    pool: NodePool,
    *,
    algorithm: str | None = None,
    backups: BackupsOption | None = None,
    bound: float | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> tuple[TaskGraph, Placement]:
    """Expand a topology and plan it; options left ``None`` come from its spec."""
    from backstop.domain.spec import expand

    spec = topo.spec
    graph = expand(spec)
    r = planners_bound(spec, bound)
    name = algorithm or spec.placement_algorithm
    mode = backups or BackupsOption(spec.backups.value)
    if mode is BackupsOption.all:
        result = place(graph, pool, bound=r, algorithm=name, time_limit=time_limit)
    else:
        result = plan_joint(graph, pool, bound=r, algorithm=name, time_limit=time_limit)
    return graph, result


def placement_json(graph: TaskGraph, plan: Placement) -> dict[str, object]:
    """The ``--json`` object of ``backstop place`` (``backups`` lists every backup task)."""
    backups = list(graph.tasks) if plan.backups is None else list(plan.backups)
    return {
        "algorithm": plan.algorithm,
        "bound": plan.bound,
        "assignment": dict(plan.assignment),
        "backups": backups,
        "nodesUsed": plan.nodes_used,
        "worstRecoveryLatency": plan.worst,
        "violations": list(plan.violations),
    }


def bound_terms(topo: StreamTopology, plan: Placement) -> dict[str, float]:
    """The terms of ``d + c + H <= R`` for ``plan``: ``bound`` (what ``H``, the
    ``worstRecoveryLatency``, is kept within) is ``R − d − c``, so ``R`` is the manifest's
    bound or ``--bound``."""
    rec = topo.spec.recovery
    d, c = rec.detection_seconds, rec.restart_seconds
    return {
        "recoveryLatencyBound": plan.bound + d + c,
        "detectionSeconds": d,
        "restartSeconds": c,
    }


def _recorded(kube: Any, namespace: str, name: str) -> tuple[dict[str, str], list[str]] | None:
    """The plan in force (``status.plan``) of the topology, if it exists."""
    from kubernetes.client.exceptions import ApiException

    from backstop.domain.constants import GROUP, VERSION
    from backstop.domain.status import plain_status

    try:
        obj = kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "streamtopologies", name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    plan = plain_status(obj.get("status")).get("plan") or {}  # large maps are compact
    if not plan.get("assignment"):
        return None
    return dict(plan["assignment"]), list(plan.get("backups") or [])


def _plan_from_cluster(
    topo: StreamTopology, namespace: str, bound: float | None, time_limit: float
) -> tuple[TaskGraph, Placement, NodePool]:
    """What the operator would plan for ``topo`` on the live cluster right now.

    The same function the operator calls (:func:`backstop.domain.planning.plan_topology`),
    on the same view of the nodes, the topology's own pods and its plan in force;
    the planners are deterministic, so this is the plan the operator will bind.
    """
    from backstop.domain.incidents import topology_tolerations
    from backstop.domain.planning import current_assignment, plan_topology
    from backstop.domain.spec import expand
    from backstop.k8s.cluster import ClusterUnavailable, api_client
    from backstop.k8s.kubeio import Kube

    spec = topo.spec
    if bound is not None:
        spec = spec.model_copy(update={"recovery_latency_bound": bound})
    try:
        kube = Kube(api_client())
        view = kube.view(
            namespace,
            topo.metadata.name,
            spec.topology_key,
            spec.node_selector,
            topology_tolerations(spec),
        )
        recorded = _recorded(kube, namespace, topo.metadata.name)
    except ClusterUnavailable as err:
        raise PlannerError(str(err)) from None
    except Exception as err:  # connection refused, 401, ...: say so, no traceback
        raise PlannerError(f"cannot read nodes from the cluster: {err}") from None
    if not view.nodes:
        raise PlannerError("the cluster has no Ready, schedulable node with CPU left")
    graph = expand(spec)
    plan = plan_topology(
        spec,
        graph,
        view.nodes,
        current=current_assignment(view.own_pods),
        recorded=recorded,
        time_limit=time_limit,
    )
    return graph, plan.placement, NodePool.of(view.nodes)


def _key(topology_key: str | None, topo: StreamTopology) -> str | None:
    return topology_key if topology_key is not None else topo.spec.topology_key


@guarded
def place_command(
    topology: TopologyArg,
    node_cpu: NodeCpuOpt = None,
    nodes: NodesOpt = None,
    algorithm: AlgorithmOpt = None,
    backups: BackupsOpt = None,
    bound: BoundOpt = None,
    topology_key: TopologyKeyOpt = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    time_limit: TimeLimitOpt = DEFAULT_TIME_LIMIT,
) -> None:
    """Place every task on a node so that any node failure recovers within the bound."""
    topo = load_manifest(topology)
    pool = _pool(node_cpu, nodes, _key(topology_key, topo) if nodes else topology_key, topo)
    graph, plan = compute_plan(
        topo, pool, algorithm=algorithm, backups=backups, bound=bound, time_limit=time_limit
    )
    if json_output:
        print_json(placement_json(graph, plan))
    else:
        n_backups = len(graph) if plan.backups is None else len(plan.backups)
        typer.echo(
            f"{plan.algorithm}: {len(graph)} tasks on {plan.nodes_used} nodes, {n_backups} "
            f"backups, worst node failure {plan.worst:g}s (bound {plan.bound:g}s)"
        )
        for node, tasks in plan.by_node().items():
            typer.echo(f"  {node}: {', '.join(tasks)}")
        # only the *-2sp baselines get here ("Task Allocation for Stream Processing with
        # Recovery Latency Guarantee", section III.A: the 2SP approaches extended)
        for problem in plan.violations:
            typer.echo(f"bound BROKEN: {problem}")
    if plan.violations:
        raise typer.Exit(1)


PlanJsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (as `backstop place --json`).")
]
FromClusterOpt = Annotated[
    bool,
    typer.Option(
        "--from-cluster",
        help="Plan against the live cluster's Ready nodes (KUBECONFIG), exactly as the "
        "operator would: other pods' requests subtracted, the topology's own pods kept "
        "where an equivalent plan allows.",
    ),
]
NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-n", help="Namespace of the topology (--from-cluster).")
]


@guarded
def plan_command(
    topology: TopologyArg,
    nodes: NodesOpt = None,
    node_cpu: NodeCpuOpt = None,
    algorithm: AlgorithmOpt = None,
    backups: BackupsOpt = None,
    bound: BoundOpt = None,
    topology_key: TopologyKeyOpt = None,
    time_limit: TimeLimitOpt = DEFAULT_TIME_LIMIT,
    json_output: PlanJsonOpt = False,
    from_cluster: FromClusterOpt = False,
    namespace: NamespaceOpt = "default",
) -> None:
    """Dry run: backups, task → node table, recovery latency per node failure, bound check."""
    topo = load_manifest(topology)
    if from_cluster:
        if nodes is not None or node_cpu is not None:
            raise PlannerError("--from-cluster plans on the live nodes: drop --nodes/--node-cpu")
        graph, plan, pool = _plan_from_cluster(topo, namespace, bound, time_limit)
    else:
        if nodes is None and node_cpu is None:
            raise PlannerError("give --nodes NODES.yaml, --node-cpu CPU or --from-cluster")
        pool = _pool(node_cpu, nodes, _key(topology_key, topo) if nodes else topology_key, topo)
        graph, plan = compute_plan(
            topo, pool, algorithm=algorithm, backups=backups, bound=bound, time_limit=time_limit
        )
    if json_output:
        print_json({**placement_json(graph, plan), **bound_terms(topo, plan)})
        return
    if not _print_plan(topo, graph, plan, pool):
        raise typer.Exit(1)


def _print_plan(topo: StreamTopology, graph: TaskGraph, plan: Placement, pool: NodePool) -> bool:
    """Print the dry run's tables and verdict; whether the bound holds."""
    console = Console(highlight=False, soft_wrap=True)
    mode = "all" if plan.backups is None else "planned"
    terms = bound_terms(topo, plan)
    d, c, r = terms["detectionSeconds"], terms["restartSeconds"], terms["recoveryLatencyBound"]
    console.print(
        f"[bold]{topo.metadata.name}[/]: {len(graph)} tasks, bound {r:g}s from the failure: "
        f"detection d {d:g}s + restart c {c:g}s + recovery H <= {plan.bound:g}s; "
        f"placement {plan.algorithm}, backups {mode}"
    )
    kept = list(graph.tasks) if plan.backups is None else list(plan.backups)
    console.print(f"Backups ({len(kept)}/{len(graph)}): {', '.join(kept) or 'none'}")
    console.print(_placement_table(graph, plan, set(kept)))
    failures, ok = _failure_table(graph, plan, pool)
    console.print(failures)
    domains = pool.domains()
    if domains:
        h, label = worst_correlated_failure(graph, plan.backups, plan.assignment, domains=domains)
        ok &= h <= plan.bound + 1e-9
        console.print(f"Worst failure-domain loss: {label} recovers in {h:g}s")
    verdict = "holds" if ok else "is BROKEN"
    total, within = d + c + plan.worst, plan.worst <= plan.bound + 1e-9
    console.print(
        f"Worst node failure: d {d:g} + c {c:g} + H {plan.worst:g} = {total:g}s "
        f"{'<=' if within else '>'} R {r:g}s; the bound {verdict} on {plan.nodes_used} nodes."
    )
    return ok


def _placement_table(graph: TaskGraph, plan: Placement, backed: set[str]) -> Table:
    """Task → node, with each task's CPU and whether it keeps a backup."""
    placed = Table(title="Placement", title_justify="left")
    for col in ("task", "node", "cpu", "backup"):
        placed.add_column(col)
    for task in graph.tasks:
        placed.add_row(
            task,
            plan.assignment[task],
            f"{graph.weight[graph.index(task)]:g}",
            "yes" if task in backed else "no",
        )
    return placed


def _failure_table(graph: TaskGraph, plan: Placement, pool: NodePool) -> tuple[Table, bool]:
    """What losing each used node costs, and whether every such loss keeps the bound."""
    slots = {n.name: n for n in pool.slots(len(graph))}
    failures = Table(title="If a node fails", title_justify="left")
    for col in ("node", "domain", "cpu used/free", "tasks", "recovery (s)", "within bound"):
        failures.add_column(col)
    ok = True
    for node, tasks in plan.by_node().items():
        h = node_failure_latency(graph, plan.backups, tasks)
        used = sum(graph.weight[graph.index(t)] for t in tasks)
        slot = slots.get(node)
        within = h <= plan.bound + 1e-9
        ok &= within
        failures.add_row(
            node,
            (slot.domain if slot else None) or "-",
            f"{used:g}/{slot.cpu:g}" if slot else f"{used:g}",
            str(len(tasks)),
            f"{h:g}",
            "yes" if within else "NO",
        )
    return failures, ok


def register(app: typer.Typer) -> None:
    """Add ``place`` and ``plan`` to the ``backstop`` app."""
    app.command("place")(place_command)
    app.command("plan")(plan_command)
