"""When capacity returns, the bound is restored with the fewest moves, step by step.

Against the real control plane with simulated nodes (as in ``test_node_loss``):
one of two nodes is lost, every task is recovered onto the survivor (which
cannot keep the bound alone), then a node is added. The operator must restore
the bound within one supervision period plus the time the moves take, moving
exactly as many pods as the fewest any valid placement needs (found here by
brute force over every assignment, through the failure-effect evaluator), and
every restore step (one RecoveryPlan each) must leave the worst single-node
recovery no worse than the step before.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from typing import Any

import pytest

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    ROOT,
    Env,
    Pool,
    condition,
    env_fixture,
    node_ready,
    plans,
    pool_fixture,
    recovery,
    wait_for,
)
from planners import TaskGraph
from planners.evaluate import check_plan, worst_node_failure

pytestmark = pytest.mark.cluster

SUPERVISION_PERIOD = 1.0
"""The supervisor's tick (``daemon._supervise``): a capacity change is seen within it."""
PLANNING_ALLOWANCE = 10.0
"""Generous wall-clock room for one restore plan on a loaded 2-core machine (its budget is work)."""
MOVE_ALLOWANCE = 15.0
"""Per restore step: delete, the simulator finishing it, create, schedule, Running (~3-5 s)."""


env = env_fixture("restore", node_cpu="1", nodes=1)
pool = pool_fixture(cleanup=True)


def chains_topology(name: str, pool: str, *, parallelism: int = 3) -> dict[str, Any]:
    """``parallelism`` forward chains src → parse → score → sink of 250m tasks, bound 2.5 s.

    One node holding everything recovers in 4 s (no chain keeps a backup on
    another node), so the bound needs two nodes; 12 x 250m fit one 4-CPU node
    under the 0.8 utilisation cap, so a lost node's tasks all come back.
    """
    op = {"resources": {"cpu": "250m", "memory": "32Mi"}}
    stages = [("src", 0.5), ("parse", 1.0), ("score", 1.5), ("sink", 1.0)]
    operators: list[dict[str, Any]] = []
    for k, (stage, latency) in enumerate(stages):
        operators.append(
            {
                "name": stage,
                "parallelism": parallelism,
                "reprocessingLatency": latency,
                **op,
                **(
                    {"inputs": [{"operator": stages[k - 1][0], "grouping": "forward"}]} if k else {}
                ),
            }
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/chains:1",
            "recoveryLatencyBound": 2.5,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1, "mode": "auto"},
            "operators": operators,
        },
    }


def brute_force_min_moves(
    graph: TaskGraph,
    current: dict[str, str],
    capacity: dict[str, float],
    bound: float,
    backups: list[str],
) -> int:
    """The fewest tasks any valid placement on ``capacity``'s nodes moves from ``current``."""
    best = len(graph) + 1
    names = sorted(capacity)
    for combo in itertools.product(names, repeat=len(graph)):
        assignment = dict(zip(graph.tasks, combo, strict=True))
        moved = sum(1 for t in graph.tasks if current[t] != assignment[t])
        if moved >= best:
            continue
        if not check_plan(
            graph, bound=bound, backups=backups, assignment=assignment, capacity=capacity
        ):
            best = moved
    return best


def restore_plans(env: Env, name: str) -> list[dict[str, Any]]:
    return [p for p in plans(env, name) if p["spec"]["trigger"] == "Restore"]


def reasons(env: Env, name: str) -> list[str]:
    events = env.core.list_namespaced_event(env.namespace).items
    return [
        e.reason
        for e in sorted(events, key=lambda e: e.metadata.creation_timestamp)
        if e.involved_object.name == name
    ]


def test_bound_broken_by_a_node_loss_is_restored_with_minimal_safe_moves(
    env: Env, pool: Pool
) -> None:
    first, second = pool.add("4"), pool.add("4")
    pool.wait_ready()
    name = "restore"
    env.create(chains_topology(name, pool.name))
    obj = env.wait_condition(name, "Ready", "True")
    graph = expand(parse_spec(obj["spec"]))
    bound = float(obj["spec"]["recoveryLatencyBound"])
    assert obj["status"]["plan"]["boundSatisfied"]
    before = dict(obj["status"]["plan"]["assignment"])
    assert set(before.values()) == {first, second}, "the bound needs both nodes"

    # 1. lose one node: every task comes back on the survivor, which breaks the bound
    victim = first
    pool.sim.kill(victim)
    wait_for(lambda: recovery(env, name).get("session"), 60, "a recovery session")
    obj = env.wait_condition(name, "BoundSatisfied", "False", timeout=90)
    wait_for(
        lambda: not recovery(env, name).get("active") and not recovery(env, name).get("failed"),
        60,
        "every task recovered",
    )
    obj = env.get(name)
    crowded = dict(obj["status"]["plan"]["assignment"])
    backups = list(obj["status"]["plan"]["backups"])
    assert set(crowded.values()) == {second}
    assert worst_node_failure(graph, backups, crowded)[0] > bound
    time.sleep(3)  # nothing to restore onto yet: the bound stays broken, nothing moves
    assert dict(env.get(name)["status"]["plan"]["assignment"]) == crowded
    assert restore_plans(env, name) == []

    # 2. a node is added: the bound holds again within one period plus the move time
    added = pool.add("4")
    pool.wait_ready([added])
    ready_at = time.monotonic()
    obj = env.wait_condition(name, "BoundSatisfied", "True", timeout=120)
    took = time.monotonic() - ready_at
    steps = restore_plans(env, name)
    assert steps, "the restoring moves are recorded as RecoveryPlans"
    limit = SUPERVISION_PERIOD + PLANNING_ALLOWANCE + MOVE_ALLOWANCE * len(steps)
    assert took <= limit, (took, limit)
    obj = env.wait_condition(name, "Ready", "True", timeout=60)

    # 3. the moves are as few as the exact minimum (brute force over every assignment)
    final = dict(obj["status"]["plan"]["assignment"])
    alloc = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"])
        for n in env.core.list_node(label_selector=f"{POOL_LABEL}={pool.name}").items
        if node_ready(env.core, n.metadata.name)
    }
    assert set(alloc) == {second, added}
    assert not check_plan(graph, bound=bound, backups=backups, assignment=final, capacity=alloc)
    moved = {t for t in graph.tasks if crowded[t] != final[t]}
    assert len(moved) == brute_force_min_moves(graph, crowded, alloc, bound, backups)
    assert len(moved) < len(graph) // 2

    # 4. step by step: each RecoveryPlan's state no worse than the one before, within capacity
    state = dict(crowded)
    prev = worst_node_failure(graph, backups, state)[0]
    for rp in steps:
        state.update({a["task"]: a["node"] for a in rp["spec"]["assignments"]})
        worst = worst_node_failure(graph, backups, state)[0]
        assert worst <= prev + 1e-9, (rp["spec"]["step"], worst, prev)
        over = check_plan(
            graph, bound=float("inf"), backups=backups, assignment=state, capacity=alloc
        )
        assert not over, over[0].message
        prev = worst
    assert state == final
    assert prev <= bound + 1e-9
    assert [s["spec"]["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) >= 2, "moved a few at a time, not all at once"
    assert all(s["status"]["phase"] == "Applied" for s in steps)

    # 5. status and Events say what happened
    restore = obj["status"]["restore"]
    assert restore["phase"] == "Restored" and restore["moved"] == len(moved)
    bound_ok = condition(obj, "BoundSatisfied")
    assert bound_ok is not None and bound_ok["reason"] == "WithinBound"
    seen = reasons(env, name)
    assert {"BoundViolated", "RestorePlanned", "RestoreStep", "BoundRestored"} <= set(seen)
    assert seen.index("RestorePlanned") < seen.index("BoundRestored")
    pods = {
        p.metadata.labels[f"{GROUP}/task"]: p.spec.node_name
        for p in env.pods(name)
        if p.metadata.deletion_timestamp is None
    }
    assert pods == final
    _transcript(env, name, took, len(moved), len(steps))


def _transcript(env: Env, name: str, took: float, moved: int, steps: int) -> None:
    """What a user sees (``pytest -s`` shows it; the README quotes it)."""
    kubectl = ROOT / ".tools" / "bin" / "kubectl"
    print(f"\nbound restored {took:.1f}s after the node turned Ready: {moved} pods, {steps} steps")
    if not kubectl.exists():
        return
    for args in (
        ["get", "st,recoveryplans"],
        ["get", "events", "--field-selector", "involvedObject.kind=StreamTopology",
         "--sort-by=.lastTimestamp", "-o", "custom-columns=REASON:.reason,MESSAGE:.message"],
    ):  # fmt: skip
        out = subprocess.run(
            [str(kubectl), "--kubeconfig", env.kubeconfig, "-n", env.namespace, *args],
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"$ kubectl {' '.join(args)}\n{out.stdout}")


def test_consolidation_onto_fewer_nodes_keeps_the_bound_at_every_step(env: Env, pool: Pool) -> None:
    """Scale-down with ``apply: auto``: a larger node arrives, fewer nodes suffice, and the
    tasks move there a few at a time, every intermediate placement keeping the bound."""
    small = [pool.add("750m") for _ in range(3)]
    pool.wait_ready()
    name = "consolidate"
    doc = chains_topology(name, pool.name, parallelism=2)
    doc["spec"]["reoptimization"] = {"apply": "auto"}
    env.create(doc)
    obj = env.wait_condition(name, "Ready", "True")
    graph = expand(parse_spec(obj["spec"]))
    bound = float(obj["spec"]["recoveryLatencyBound"])
    before = dict(obj["status"]["plan"]["assignment"])
    backups = list(obj["status"]["plan"]["backups"])
    assert set(before.values()) == set(small), "eight 250m tasks need three 750m nodes"
    time.sleep(3)
    assert consolidation_plans(env, name) == [], "no capacity change: nothing moves"

    big = pool.add("4")
    pool.wait_ready([big])
    wait_for(
        lambda: (env.get(name)["status"].get("restore") or {}).get("phase") == "Consolidated",
        120,
        "the consolidation to finish",
    )
    obj = env.wait_condition(name, "Ready", "True", timeout=60)
    final = dict(obj["status"]["plan"]["assignment"])
    alloc = {n: 0.75 for n in small} | {big: 4.0}
    steps = consolidation_plans(env, name)
    assert steps
    state = dict(before)
    for rp in steps:  # every intermediate placement keeps the bound and fits
        state.update({a["task"]: a["node"] for a in rp["spec"]["assignments"]})
        violations = check_plan(
            graph, bound=bound, backups=backups, assignment=state, capacity=alloc
        )
        assert not violations, (rp["spec"]["step"], violations[0].message)
    assert state == final
    used = len(set(final.values()))
    assert used < len(set(before.values()))
    moved = sum(1 for t in graph.tasks if before[t] != final[t])
    best = len(graph) + 1
    for combo in itertools.product(sorted(alloc), repeat=len(graph)):
        if len(set(combo)) > used:
            continue
        assignment = dict(zip(graph.tasks, combo, strict=True))
        n_moved = sum(1 for t in graph.tasks if before[t] != assignment[t])
        if n_moved < best and not check_plan(
            graph, bound=bound, backups=backups, assignment=assignment, capacity=alloc
        ):
            best = n_moved
    assert moved == best
    seen = reasons(env, name)
    assert "Consolidated" in seen and "BoundViolated" not in seen
    bound_ok = condition(obj, "BoundSatisfied")
    assert bound_ok is not None and bound_ok["status"] == "True"


def consolidation_plans(env: Env, name: str) -> list[dict[str, Any]]:
    return [p for p in plans(env, name) if p["spec"]["trigger"] == "Consolidate"]
