"""Node loss against the real control plane: detection, incremental recovery, restarts.

Each test gets its own simulated nodes, labelled with a pool name the test's
topology selects (``spec.nodeSelector``), so nodes of other tests never count
as capacity. Nodes are killed with the node simulator (heartbeats stop) and the
real node-lifecycle controller turns them NotReady.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    Env,
    Pool,
    cleanup_fixture,
    condition,
    env_fixture,
    node_ready,
    plans,
    pool_fixture,
    recovery,
    start_operator,
    stop_operator,
    wait_for,
)
from planners.evaluate import check_plan
from planners.recovery import failed_queries

pytestmark = pytest.mark.cluster
POOL = POOL_LABEL


# the module's own node stays unused: every test makes a labelled pool of its own
env = env_fixture("nodeloss", node_cpu="1", nodes=1, metrics=True)
_cleanup = cleanup_fixture()
pool = pool_fixture(cleanup=False)


def fan_topology(
    name: str, pool: str, *, grace: float = 1.0, mode: str = "auto", cap: float = 0.8
) -> dict[str, Any]:
    """8 tasks of 1 CPU: 2 sources -> 3 workers -> 3 queries of priority 9, 5 and 1."""
    op = {"resources": {"cpu": "1", "memory": "64Mi"}, "reprocessingLatency": 0.5}
    outs = [("gold", 9), ("silver", 5), ("bronze", 1)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/fan:1",
            "recoveryLatencyBound": 10,
            "nodeSelector": {POOL: pool},
            "recovery": {"gracePeriodSeconds": grace, "mode": mode, "utilizationCap": cap},
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "work", "parallelism": 3, "inputs": [{"operator": "src"}], **op},
                *[
                    {
                        "name": q,
                        "priority": prio,
                        "inputs": [{"operator": "work", "grouping": "global"}],
                        **op,
                    }
                    for q, prio in outs
                ],
            ],
        },
    }


def start_fan(env: Env, pool: Pool, name: str, **options: Any) -> None:
    """Four 2-CPU nodes, filled by the 8 one-CPU tasks of :func:`fan_topology`, Ready."""
    for _ in range(4):
        pool.add("2")
    pool.wait_ready()
    env.create(fan_topology(name, pool.name, **options))
    env.wait_condition(name, "Ready", "True")


def nodes_of(env: Env, name: str) -> dict[str, str]:
    return dict(env.get(name)["status"]["plan"]["assignment"])


def wait_recovered(env: Env, name: str, timeout: float = 90) -> dict[str, Any]:
    obj: dict[str, Any] = env.wait_condition(name, "Ready", "True", timeout=timeout)
    rec = obj["status"].get("recovery") or {}
    assert not rec.get("active") and not rec.get("failed")
    return obj


def check_final(env: Env, obj: dict[str, Any], lost: set[str]) -> None:
    """Every task runs exactly once, off the lost nodes, and the plan passes the evaluator."""
    name = obj["metadata"]["name"]
    graph = expand(parse_spec(obj["spec"]))
    plan = obj["status"]["plan"]
    assert set(plan["assignment"]) == set(graph.tasks)
    assert not set(plan["assignment"].values()) & lost
    pods = [p for p in env.pods(name) if p.metadata.deletion_timestamp is None]
    assert sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods) == sorted(graph.tasks)
    for p in pods:
        assert p.status.phase == "Running"
        assert p.spec.node_name == plan["assignment"][p.metadata.labels[f"{GROUP}/task"]]
    capacity = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"]) for n in env.core.list_node().items
    }
    violations = check_plan(
        graph, bound=10, backups=plan["backups"], assignment=plan["assignment"], capacity=capacity
    )
    assert [v for v in violations if v.kind != "bound"] == []
    bound_ok = condition(obj, "BoundSatisfied")
    assert bound_ok is not None and bound_ok["status"] == (
        "True" if plan["boundSatisfied"] else "False"
    )


def replay_steps(env: Env, name: str, before: dict[str, str], lost: set[str], cap: float) -> None:
    """Each RecoveryPlan fits node by node: topology load ≤ cap × allocatable after each step."""
    alloc = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"]) for n in env.core.list_node().items
    }
    assignment = {t: n for t, n in before.items() if n not in lost}
    for rp in plans(env, name):
        new = {a["task"]: a["node"] for a in rp["spec"]["assignments"]}
        for node in set(new.values()):
            load = sum(1.0 for t, n in new.items() if n == node)  # every task is 1 CPU
            already = sum(1.0 for t, n in assignment.items() if n == node)
            assert node not in lost
            assert load <= max(0.0, cap * alloc[node] - already) + 1e-9, (rp["spec"], node)
        assignment.update(new)


def test_single_node_loss_recovers_onto_spare_capacity(env: Env, pool: Pool) -> None:
    for _ in range(4):
        pool.add("2")
    for _ in range(2):
        pool.add("4")  # 8 x 1 CPU tasks leave at least 2 x 0.8 x 4 = 6.4 CPU free for recovery
    pool.wait_ready()
    name = "single"
    env.create(fan_topology(name, pool.name))
    obj = env.wait_condition(name, "Ready", "True")
    before = nodes_of(env, name)
    victim = before["gold-0"]
    failed = {t for t, n in before.items() if n == victim}
    scraped = wait_for(lambda: _series(env, name), 10, "the topology's metrics")
    assert scraped["backstop_topology_worst_recovery_seconds"] == pytest.approx(
        obj["status"]["plan"]["worstRecoveryLatency"]
    )
    assert scraped["backstop_recovery_session_active"] == 0.0
    assert scraped.get("backstop_recovery_first_plan_seconds_count{since=not_ready}") is None
    pool.sim.kill(victim)
    wait_for(lambda: recovery(env, name).get("session"), 60, "a recovery session")
    obj = wait_recovered(env, name)
    check_final(env, obj, {victim})
    rec = obj["status"]["recovery"]
    assert set(rec["sessionFailed"]) == failed
    assert set(rec["recovered"]) == failed
    assert plans(env, name), "a RecoveryPlan is written"
    replay_steps(env, name, before, {victim}, cap=0.8)
    reasons = {
        e.reason
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.involved_object.name == name
    }
    assert {"NodeLost", "RecoveryPlanIssued", "TaskRecovered", "Recovered"} <= reasons
    cm = env.core.read_namespaced_config_map(f"{name}-recovery", env.namespace)
    assert json.loads(cm.data["session.json"])["phase"] == "Completed"
    _check_recovery_metrics(env, name, obj, steps=rec["step"])


def _series(env: Env, name: str) -> dict[str, float]:
    """The operator's /metrics series of one topology, ``name{label=value}`` (other labels)."""
    out = {}
    for (sample, labels), value in env.scrape().items():
        have = dict(labels)
        if have.pop("namespace", None) != env.namespace or have.pop("topology", None) != name:
            continue
        extra = ",".join(f"{k}={v}" for k, v in sorted(have.items()))
        out[f"{sample}{{{extra}}}" if extra else sample] = value
    return out


def _check_recovery_metrics(env: Env, name: str, obj: dict[str, Any], steps: int) -> None:
    """After one node lost (grace 1 s) and recovered in ``steps`` RecoveryPlans: the
    operator's /metrics (over HTTP) moved; once the topology is deleted, its series go."""
    grace = obj["spec"]["recovery"]["gracePeriodSeconds"]

    def settled() -> dict[str, float]:
        s = _series(env, name)
        return s if s.get("backstop_recovery_session_active") == 0.0 else {}

    s = wait_for(settled, 10, "the session's end in /metrics")
    triggers = [k for k in s if k.startswith("backstop_recovery_steps_total{")]
    assert sum(s[k] for k in triggers) == steps >= 1
    assert s["backstop_recovery_steps_total{trigger=NodeLost}"] >= 1
    assert s["backstop_recovery_first_plan_seconds_count{since=not_ready}"] == 1.0
    from_not_ready = s["backstop_recovery_first_plan_seconds_sum{since=not_ready}"]
    from_grace = s["backstop_recovery_first_plan_seconds_sum{since=grace_expiry}"]
    assert from_not_ready == pytest.approx(from_grace + grace)
    assert 0.0 <= from_grace < 30.0
    assert s["backstop_recovery_tasks_lost"] == 0.0
    assert s["backstop_recovery_queries_down"] == 0.0
    assert s["backstop_topology_worst_recovery_seconds"] == pytest.approx(
        env.get(name)["status"]["plan"]["worstRecoveryLatency"]
    )
    env.custom.delete_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name
    )
    wait_for(lambda: _series(env, name) == {}, 15, "the deleted topology's series to go")


def test_two_nodes_lost_replacements_arrive_one_by_one(env: Env, pool: Pool) -> None:
    for _ in range(4):
        pool.add("2")  # 8 tasks x 1 CPU fill 4 nodes of 2: survivors have no room under the cap
    pool.wait_ready()
    name = "twofail"
    env.create(fan_topology(name, pool.name))
    env.wait_condition(name, "Ready", "True")
    graph = expand(parse_spec(env.get(name)["spec"]))
    before = nodes_of(env, name)
    victims = sorted(set(before.values()))[:2]
    for v in victims:
        pool.sim.kill(v)
    wait_for(lambda: recovery(env, name).get("active"), 60, "the session to start")
    wait_for(lambda: len(recovery(env, name).get("lost", {})) == 2, 30, "both nodes lost")
    time.sleep(2)
    assert plans(env, name) == [], "no capacity: nothing can be recovered yet"
    failed = set(recovery(env, name)["failed"])
    assert len(failed) == 4
    # replacement 1: 2 CPU x 0.8 = room for exactly one 1-CPU task
    pool.add("2")
    wait_for(lambda: len(plans(env, name)) >= 1, 30, "the first RecoveryPlan")
    first = plans(env, name)[0]["spec"]
    assert len(first["assignments"]) == 1
    single = [q for q, ts in failed_queries(graph, failed).items() if len(ts) == 1]
    if single:  # the best one-task plan brings back the highest-priority single-task query
        best = max(graph.priority[graph.index(q)] for q in single)
        assert first["recoveredPriority"] == best
    # replacement 2: 4 CPU x 0.8 = room for the three others
    pool.add("4")
    obj = wait_recovered(env, name)
    steps = plans(env, name)
    assert [s["spec"]["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) >= 2
    check_final(env, obj, set(victims))
    replay_steps(env, name, before, set(victims), cap=0.8)


def test_second_failure_during_recovery_joins_the_session(env: Env, pool: Pool) -> None:
    name = "repeated"
    start_fan(env, pool, name)
    before = nodes_of(env, name)
    first, second = sorted(set(before.values()))[:2]
    pool.sim.kill(first)
    wait_for(lambda: recovery(env, name).get("active"), 60, "the session to start")
    session = recovery(env, name)["session"]
    pool.sim.kill(second)
    wait_for(lambda: second in recovery(env, name).get("lost", {}), 60, "the second loss")
    assert recovery(env, name)["session"] == session
    pool.add("8")
    obj = wait_recovered(env, name)
    rec = obj["status"]["recovery"]
    assert rec["session"] == session
    expected = {t for t, n in before.items() if n in (first, second)}
    assert set(rec["sessionFailed"]) == expected
    check_final(env, obj, {first, second})
    assert {p["spec"]["session"] for p in plans(env, name)} == {session}


def test_lost_node_coming_back_takes_its_tasks_back(env: Env, pool: Pool) -> None:
    name = "comeback"
    # a full node takes all its tasks back only without headroom (cap 1.0); blocking mode
    # (one lost node) waits until everything fits, then recovers it at once
    start_fan(env, pool, name, cap=1.0)
    victim = sorted(set(nodes_of(env, name).values()))[0]
    pool.sim.kill(victim)
    wait_for(lambda: recovery(env, name).get("failed"), 60, "failed tasks waiting for capacity")
    pool.sim.revive(victim)
    obj = wait_recovered(env, name)
    assert any(p["spec"]["trigger"] == "NodeBack" for p in plans(env, name))
    check_final(env, obj, set())


def test_operator_killed_mid_session_resumes_without_duplicates(env: Env, pool: Pool) -> None:
    name = "resume"
    start_fan(env, pool, name)
    before = nodes_of(env, name)
    victims = sorted(set(before.values()))[:2]
    for v in victims:
        pool.sim.kill(v)
    wait_for(lambda: len(recovery(env, name).get("lost", {})) == 2, 60, "both nodes lost")
    session = recovery(env, name)["session"]
    assert env.proc is not None
    stop_operator(env.proc)
    pool.add("8")  # capacity arrives while no operator runs
    time.sleep(3)
    env.proc = start_operator(env.kubeconfig, env.namespace, env.log)
    obj = wait_recovered(env, name)
    assert obj["status"]["recovery"]["session"] == session
    steps = plans(env, name)
    assert [s["spec"]["step"] for s in steps] == list(range(1, len(steps) + 1))
    check_final(env, obj, set(victims))


def test_flapping_node_within_the_grace_period_causes_no_recovery(env: Env, pool: Pool) -> None:
    name = "flap"
    start_fan(env, pool, name, grace=60)
    victim = sorted(set(nodes_of(env, name).values()))[0]
    pool.sim.kill(victim)
    wait_for(lambda: not node_ready(pool.sim.core, victim), 60, f"{victim} NotReady")
    pool.sim.revive(victim)
    pool.wait_ready([victim])
    time.sleep(3)
    assert plans(env, name) == []
    assert not recovery(env, name).get("session")
    assert condition(env.get(name), "Ready")["status"] == "True"  # type: ignore[index]


def test_cordoned_node_is_drained_a_few_tasks_at_a_time_before_anything_fails(
    env: Env, pool: Pool
) -> None:
    for _ in range(4):
        pool.add("2")
    pool.add("4")
    pool.wait_ready()
    name = "drain"
    env.create(fan_topology(name, pool.name))
    env.wait_condition(name, "Ready", "True")
    before = nodes_of(env, name)
    victim = max(set(before.values()), key=lambda n: sum(1 for v in before.values() if v == n))
    on_victim = {t for t, n in before.items() if n == victim}
    spare = [pool.add("4"), pool.add("4")]  # empty: 2 x 3.2 CPU of room under the 0.8 cap
    pool.wait_ready(spare)
    pool.sim.core.patch_node(victim, {"spec": {"unschedulable": True}})
    wait_for(lambda: victim not in nodes_of(env, name).values(), 120, f"{victim} drained")
    obj = env.wait_condition(name, "Ready", "True", timeout=90)
    check_final(env, obj, {victim})
    assert plans(env, name) == [], "a drain is not a failure: no RecoveryPlan"
    assert not recovery(env, name).get("session")
    after = nodes_of(env, name)
    assert {t for t in before if before[t] != after[t]} == on_victim, "only its tasks moved"
    drains = [
        e
        for e in env.core.list_namespaced_event(env.namespace).items
        if e.involved_object.name == name and e.reason == "NodeDraining"
    ]
    moved_per_event = [e.message.count("->") for e in drains]
    assert drains and max(moved_per_event) <= 3, moved_per_event


def _min_available(env: Env, name: str) -> int | None:
    """The topology's PodDisruptionBudget's ``minAvailable`` (policy/v1beta1 here, 1.20)."""
    custom = client.CustomObjectsApi(env.core.api_client)
    for version in ("v1", "v1beta1"):
        try:
            pdb = custom.get_namespaced_custom_object(
                "policy", version, env.namespace, "poddisruptionbudgets", name
            )
        except ApiException:
            continue
        return int(pdb["spec"]["minAvailable"])
    return None


def test_a_drain_that_cannot_keep_the_bound_says_so(env: Env, pool: Pool) -> None:
    """Three nodes of 3 CPU for 8 tasks of 1 CPU: under the 0.8 cap no node has room for
    another task, so nothing can move off a cordoned one; the operator says why in a
    Warning Event instead of letting the drain wait in silence, and moves nothing. Past
    ``drainTimeoutSeconds`` the budget lets the cordoned node's pods be evicted
    (``DrainReleased``); uncordoned, the whole budget is back."""
    for _ in range(3):
        pool.add("3")
    pool.wait_ready()
    name = "stuck"
    doc = fan_topology(name, pool.name)
    doc["spec"]["recovery"]["drainTimeoutSeconds"] = 5
    env.create(doc)
    env.wait_condition(name, "Ready", "True")
    before = nodes_of(env, name)
    victim = max(set(before.values()), key=lambda n: sum(1 for v in before.values() if v == n))
    on_victim = sorted(t for t, n in before.items() if n == victim)
    pool.sim.core.patch_node(victim, {"spec": {"unschedulable": True}})
    try:

        def told() -> Any:
            return next(
                (
                    e
                    for e in env.core.list_namespaced_event(env.namespace).items
                    if e.involved_object.name == name and e.reason == "DrainBlocked"
                ),
                None,
            )

        event = wait_for(told, 60, "a DrainBlocked Event")
        assert event.type == "Warning"
        assert f"cordoned {victim}: {len(on_victim)} tasks" in event.message, event.message
        assert all(t in event.message for t in on_victim), event.message
        assert f"PodDisruptionBudget {name}" in event.message
        assert nodes_of(env, name) == before, "a task moved although the bound forbids it"
        assert _min_available(env, name) == len(before)
        lowered = len(before) - len(on_victim)
        wait_for(lambda: _min_available(env, name) == lowered, 60, "the budget lowered")
        # the Event follows the budget's write: read until it is there (not once, at once)
        wait_for(
            lambda: any(
                e.reason == "DrainReleased" and e.involved_object.name == name
                for e in env.core.list_namespaced_event(env.namespace).items
            ),
            10,
            "a DrainReleased Event",
        )
    finally:
        pool.sim.core.patch_node(victim, {"spec": {"unschedulable": False}})
    wait_for(lambda: _min_available(env, name) == len(before), 60, "the whole budget back")
