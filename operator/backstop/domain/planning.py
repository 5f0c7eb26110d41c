"""From a parsed StreamTopology and the live nodes to the pods that should exist.

This is the domain layer between the pure planners and the Kopf handlers: it
calls the joint backup + placement planner, keeps pods where they already are
when an equivalent plan allows it (so a spec change moves only the pods whose
node or role changes), checks the result with the failure-effect evaluator,
and turns it into desired pod manifests and a diff against the pods that exist.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from backstop.domain.budget import fixed_terms_text
from backstop.domain.constants import ANN_HASH, ANN_NODE, DEFAULT_TIME_LIMIT, LABEL_ROLE, LABEL_TASK
from backstop.domain.podfaults import TERMINAL_PHASES
from backstop.domain.policy_spec import ReplicationPolicy
from backstop.domain.spec import BackupMode, StreamTopologySpec, cpu_cores
from planners import Infeasible, TaskGraph
from planners.evaluate import check_plan, node_failure_latency, tasks_by_node
from planners.migration import place_min_migration
from planners.placement import Node, NodePool, Placement
from planners.replication import check_replication, select_replicas


@dataclass(frozen=True)
class TopologyPlan:
    """A verified plan: which tasks keep backups and where every task runs."""

    placement: Placement
    backups: frozenset[str]
    worst_by_node: dict[str, float]
    moved: int
    detection: float = 0.0
    """``spec.recovery.detectionSeconds`` (``d``): ``placement.bound`` is ``R − d − c``."""
    restart: float = 0.0
    """``spec.recovery.restartSeconds`` (``c``)."""

    @property
    def worst(self) -> float:
        return self.placement.worst


def plan_topology(
    spec: StreamTopologySpec,
    graph: TaskGraph,
    nodes: Sequence[Node],
    *,
    current: Mapping[str, str] | None = None,
    recorded: tuple[Mapping[str, str], Sequence[str]] | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> TopologyPlan:
    """Plan backups and placement for ``spec`` on ``nodes`` and verify the result.

    The planners are deterministic (same spec, same nodes, same budget: same
    plan, whatever the order the API server lists the nodes in), so ``backstop
    plan --from-cluster``, which calls this very function, shows what the
    operator will do.

    Parameters
    ----------
    spec, graph:
        The parsed topology and its expanded task DAG.
    nodes:
        Ready, schedulable nodes with the CPU available to this topology.
    current:
        ``{task: node}`` of pods that run now; an equivalent plan keeps them.
    recorded:
        ``(assignment, backups)`` of the plan in force. When it still covers every
        task, fits and keeps the (possibly new) bound, it is kept unless the fresh
        plan needs fewer nodes (:func:`planners.migration.place_min_migration`),
        so a re-plan of an unchanged input, or a spec change that does not call
        for a move (a new grace period, say), moves nothing.
    time_limit:
        Planner budget in nominal seconds (a deterministic work limit).

    Raises
    ------
    planners.Infeasible
        No placement keeps the bound on these nodes (the message says why).
    """
    if spec.planning_bound <= 0:  # detection and restart alone break the bound
        raise Infeasible(
            f"{fixed_terms_text(spec)} must be below "
            f"recoveryLatencyBound ({spec.recovery_latency_bound:g})"
        )
    pool = NodePool.of(nodes)
    domains = pool.domains() if spec.topology_key else None
    bound = spec.planning_bound
    choose = spec.backups is BackupMode.planned
    if recorded is not None and set(recorded[0]) == set(graph.tasks):
        in_force: Mapping[str, str] | None = recorded[0]
        in_force_backups: list[str] | None = list(recorded[1]) if choose else None
    else:
        in_force = current
        in_force_backups = None
    plan = place_min_migration(
        graph,
        pool if domains else NodePool.of(replace(n, domain=None) for n in nodes),
        in_force,
        bound=bound,
        backups=in_force_backups,
        choose_backups=choose,
        algorithm=spec.placement_algorithm,
        time_limit=time_limit,
    )
    backups = None if plan.backups is None else list(plan.backups)
    violations = check_plan(
        graph,
        bound=bound,
        backups=backups,
        assignment=plan.assignment,
        capacity={n.name: n.cpu for n in nodes},
    )
    if violations:  # the planners promise this never happens; refuse to act on it
        raise RuntimeError("planner returned an invalid plan: " + violations[0].message)
    assignment = plan.assignment
    flags = frozenset(graph.tasks) if backups is None else frozenset(backups)
    moved = sum(1 for t, n in assignment.items() if current and t in current and current[t] != n)
    worst_by_node = per_node_worst(graph, backups, assignment)
    rec = spec.recovery
    return TopologyPlan(
        plan, flags, worst_by_node, moved, rec.detection_seconds, rec.restart_seconds
    )


def plan_replicas(
    model: StreamTopologySpec, graph: TaskGraph, assignment: Mapping[str, str], nodes: list[Node]
) -> tuple[dict[str, tuple[str, ...]] | None, Any]:
    """Active replicas in the CPU the primaries leave (``spec.replication``), if asked for."""
    if model.replication is None:
        return None, None
    used: dict[str, float] = {}
    for t, n in assignment.items():
        used[n] = used.get(n, 0.0) + graph.weight[graph.index(t)]
    spare = {n.name: max(0.0, n.cpu - used.get(n.name, 0.0)) for n in nodes}
    rep = _checked_replicas(
        model.replication, graph, assignment, spare, cpu_cores(model.replication.spare_cpu)
    )
    return dict(rep.replicas), rep.availability


def _checked_replicas(
    policy: ReplicationPolicy,
    graph: TaskGraph,
    assignment: Mapping[str, str],
    spare: Mapping[str, float],
    budget: float,
) -> Any:
    """The replica selection ``policy`` asks for on ``spare`` CPU within ``budget``, checked
    by :func:`planners.replication.check_replication` before anything acts on it."""
    rep = select_replicas(
        graph,
        assignment,
        spare,
        budget=budget,
        strategy=policy.strategy,
        # with a crash probability, pick the selection its availability model rates best
        selection="knapsack" if policy.host_failure_prob is None else "best",
        host_failure_prob=policy.host_failure_prob,
    )
    problems = check_replication(graph, assignment, spare, rep, budget=budget)
    if problems:  # the planners promise this never happens; refuse to act on it
        raise RuntimeError("replica planner returned an invalid plan: " + problems[0])
    return rep


def more_replicas(
    model: StreamTopologySpec,
    graph: TaskGraph,
    assignment: Mapping[str, str],
    replicas: Mapping[str, Sequence[str]],
    free: Mapping[str, float],
) -> dict[str, tuple[str, ...]]:
    """Replicas for the tasks that have none, on CPU free now (``free``: every pod counted,
    this topology's own too), within what ``spec.replication.spareCpu`` leaves after the
    replicas there are: the reconcile chose them on the spare CPU of its moment, which
    other pods (a deleted topology's, still terminating) may have held. The same selection
    as :func:`plan_replicas`, checked the same way.
    """
    if model.replication is None:
        return {}
    known = {t: ns for t, ns in replicas.items() if t in graph._index and ns}
    spent = sum(graph.weight[graph.index(t)] * len(ns) for t, ns in known.items())
    budget = cpu_cores(model.replication.spare_cpu) - spent
    bare = {t: n for t, n in assignment.items() if t in graph._index and t not in known}
    if budget <= 1e-9 or not bare:
        return {}
    spare = {n: max(0.0, c) for n, c in free.items()}
    return dict(_checked_replicas(model.replication, graph, bare, spare, budget).replicas)


def per_node_worst(
    graph: TaskGraph, backups: Iterable[str] | None, assignment: Mapping[str, str]
) -> dict[str, float]:
    """``{node: H(K_node)}``: the recovery latency if exactly that node fails."""
    blist = None if backups is None else list(backups)
    return {
        node: node_failure_latency(graph, blist, tasks)
        for node, tasks in sorted(tasks_by_node(assignment).items())
    }


@dataclass
class PodDiff:
    """What to change so the pods match the plan."""

    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)
    force: list[str] = field(default_factory=list)
    """Pods to remove at once: on a dead node no kubelet will ever confirm their end."""
    unchanged: int = 0

    @property
    def waiting(self) -> int:
        """Pods whose graceful termination must finish before their name is reused."""
        return len(self.delete) + len(self.terminating)


def diff_pods(
    desired: Mapping[str, Mapping[str, Any]],
    existing: Iterable[Mapping[str, Any]],
    dead_nodes: Collection[str] = (),
) -> PodDiff:
    """Compare desired manifests with existing pods (dicts, as the API sends them or as
    :func:`backstop.k8s.podrecord.slim_pod` keeps them).

    A pod is kept only if its ``spec-hash`` matches (same node and role) and it has
    not ended (a ``Failed`` pod, evicted say, is replaced: Kubernetes never restarts a
    bare pod that reached a terminal phase); pods being deleted are reported so the
    caller waits before recreating them. Pods to delete on ``dead_nodes`` (lost nodes)
    and pods that have ended (nothing of them runs) are force-removed instead, as no
    kubelet will ever confirm the termination or none is needed.
    """
    diff = PodDiff()
    seen: set[str] = set()
    dead = set(dead_nodes)
    for pod in existing:
        meta = pod.get("metadata") or {}
        name = meta["name"]
        seen.add(name)
        want = desired.get(name)
        have = (meta.get("annotations") or {}).get(ANN_HASH)
        keep = want is not None and want["metadata"]["annotations"][ANN_HASH] == have
        ended = (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
        deleting = meta.get("deletionTimestamp") is not None
        if not deleting and keep and not ended:
            diff.unchanged += 1
        elif (pod.get("spec") or {}).get("nodeName") in dead or ended:
            diff.force.append(name)
        elif deleting:
            diff.terminating.append(name)
        else:
            diff.delete.append(name)
    replaced = set(diff.delete) | set(diff.terminating) | set(diff.force)
    for name, manifest in desired.items():
        if name not in seen or name in replaced:
            diff.create.append(dict(manifest))
    return diff


def current_assignment(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{task: node}`` of live primary pods (bound or planned; pod dicts)."""
    out: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_ROLE) != "primary" or meta.get("deletionTimestamp") is not None:
            continue
        node = (pod.get("spec") or {}).get("nodeName") or (meta.get("annotations") or {}).get(
            ANN_NODE
        )
        if node and LABEL_TASK in labels:
            out[labels[LABEL_TASK]] = node
    return out
