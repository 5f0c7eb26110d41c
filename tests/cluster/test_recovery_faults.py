"""The recovery state machine under faults, on the real
control plane: spec edits during a session, and an operator that dies between writes.

Spec edits: an edit made while a session runs must not wedge it (failed ids the new
spec no longer has are dropped), and an edit the operator rejects must not stop the
recovery of the pods that still run the last good plan. A dying operator: whatever the
status records (the write-ahead log), the RecoveryPlan and the session ConfigMap that
follow from it exist once an operator has run again, even if the one that wrote the
status died before writing them.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import expand, parse_spec
from backstop_testkit.support.kubetools import (
    Env,
    Pool,
    condition,
    env_fixture,
    plans,
    recovery,
    stop_operator,
    wait_for,
)
from tests.cluster.test_node_loss import (
    check_final,
    fan_topology,
    nodes_of,
    start_fan,
    wait_recovered,
)

pytestmark = pytest.mark.cluster


env = env_fixture("recfaults", node_cpu="1", nodes=1)


@pytest.fixture(autouse=True)
def _cleanup(env: Env) -> Iterator[None]:
    yield
    env.cleanup()
    if env.proc is None or env.proc.poll() is not None:
        env.restart_operator()  # a test that killed it leaves a plain one for the next


@pytest.fixture
def pool(env: Env) -> Iterator[Pool]:
    p = Pool(env)
    yield p
    p.delete()


def edit_operators(env: Env, name: str, operators: list[dict[str, Any]]) -> int:
    """Replace ``spec.operators``; returns the new generation."""
    obj = env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "streamtopologies", name, {"spec": {"operators": operators}}
    )
    return int(obj["metadata"]["generation"])


def session_exists(env: Env, name: str) -> bool:
    names = [c.metadata.name for c in env.core.list_namespaced_config_map(env.namespace).items]
    return f"{name}-recovery" in names


def session_doc(env: Env, name: str) -> dict[str, Any]:
    cm = env.core.read_namespaced_config_map(f"{name}-recovery", env.namespace)
    doc: dict[str, Any] = json.loads(cm.data["session.json"])
    return doc


QUERIES_DROPPED = ("silver", "bronze")


def test_fault02_an_edit_during_a_session_drops_failed_tasks_that_no_longer_exist(
    env: Env, pool: Pool
) -> None:
    name = "editrec"
    start_fan(env, pool, name)  # 8 one-CPU tasks fill 4 x 2 CPU: no room to recover
    victim = nodes_of(env, name)["bronze-0"]
    pool.sim.kill(victim)
    wait_for(lambda: recovery(env, name).get("failed"), 60, "failed tasks waiting for capacity")
    assert "bronze-0" in recovery(env, name)["failed"]
    # two queries removed (an edit the data plane carries out: nothing reads them), so
    # bronze-0 no longer exists and the six tasks left fit the three nodes left
    ops = [op for op in env.get(name)["spec"]["operators"] if op["name"] not in QUERIES_DROPPED]
    generation = edit_operators(env, name, ops)
    obj = wait_recovered(env, name, timeout=90)
    assert obj["status"]["plan"]["generation"] == generation
    assert "bronze-0" not in obj["status"]["recovery"].get("failed", [])
    check_final(env, obj, {victim})


def test_fault02_an_invalid_edit_keeps_recovering_the_last_good_plan(env: Env, pool: Pool) -> None:
    name = "badedit"
    start_fan(env, pool, name)
    good = env.get(name)
    graph = expand(parse_spec(good["spec"]))
    ops = [dict(op) for op in good["spec"]["operators"]]
    ops[-1]["inputs"] = [{"operator": "nowhere"}]  # the schema cannot see this, the operator can
    generation = edit_operators(env, name, ops)
    wait_for(
        lambda: (env.get(name)["status"].get("problem") or {}).get("generation") == generation,
        30,
        "the edit rejected",
    )
    victim = nodes_of(env, name)["gold-0"]
    pool.add("4")  # room for the victim's two tasks
    pool.sim.kill(victim)
    wait_for(lambda: recovery(env, name).get("session"), 60, "a recovery session")
    wait_for(
        lambda: not recovery(env, name).get("active") and recovery(env, name).get("completedAt"),
        60,
        "the session to complete",
    )
    obj = env.get(name)
    plan = obj["status"]["plan"]
    assert plan["generation"] == good["metadata"]["generation"]  # still the last good plan
    assert set(plan["assignment"]) == set(graph.tasks) and victim not in plan["assignment"].values()

    def running_once() -> bool:
        pods = [p for p in env.pods(name) if p.metadata.deletion_timestamp is None]
        where = {p.metadata.labels[f"{GROUP}/task"]: p.spec.node_name for p in pods}
        phases = {p.status.phase for p in pods}
        return len(pods) == len(graph) and where == plan["assignment"] and phases == {"Running"}

    wait_for(running_once, 60, "every task of the last good plan running once")
    planned = condition(env.get(name), "Planned")
    assert planned is not None and planned["status"] == "False"
    assert "rejected" in planned["message"] and "nowhere" in planned["message"]


def test_fault02_no_usable_node_is_retried_not_given_up(env: Env, pool: Pool) -> None:
    name = "nonodes"
    env.create(fan_topology(name, pool.name))  # the pool has no node yet
    wait_for(
        lambda: (
            (env.get(name).get("status") or {}).get("problem", {}).get("reason") == "Infeasible"
        ),
        30,
        "the topology found infeasible",
    )
    for _ in range(4):
        pool.add("2")
    pool.wait_ready()
    obj = env.wait_condition(name, "Ready", "True", timeout=60)
    assert obj["status"].get("problem") is None
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


def test_fault05_recoveryplan_and_configmap_lost_after_the_status_write_come_back(
    env: Env, pool: Pool
) -> None:
    """The state a crash right after the status write leaves: the status records the step,
    neither its RecoveryPlan nor the session ConfigMap exists. A new operator writes both."""
    name = "rederive"
    start_fan(env, pool, name)
    pool.add("4")  # empty: room for the lost node's two tasks
    pool.wait_ready()
    pool.sim.kill(nodes_of(env, name)["gold-0"])
    wait_for(lambda: recovery(env, name).get("session"), 60, "a recovery session")
    obj = wait_recovered(env, name)
    rec = obj["status"]["recovery"]

    def recovery_plan() -> dict[str, Any] | None:
        mine = [p for p in plans(env, name) if p["spec"]["session"] == rec["session"]]
        return max(mine, key=lambda p: int(p["spec"]["step"]), default=None)

    last = recovery_plan()
    assert last is not None and last["spec"]["step"] == rec["lastStep"]["step"]
    assert env.proc is not None
    stop_operator(env.proc)
    rec = recovery(env, name)  # as the stopped operator left it
    for p in plans(env, name):  # (a restore may have followed: its plans go too)
        env.custom.delete_namespaced_custom_object(
            GROUP, VERSION, env.namespace, "recoveryplans", p["metadata"]["name"]
        )
    env.core.delete_namespaced_config_map(f"{name}-recovery", env.namespace)
    env.restart_operator()
    again = wait_for(recovery_plan, 30, "the last step's RecoveryPlan again")
    assert again is not None and again["spec"] == last["spec"]
    applied = rec.get("appliedStep") == rec["lastStep"]["step"]
    phase = "Applied" if applied else "Issued"
    wait_for(lambda: ((recovery_plan() or {}).get("status") or {}).get("phase") == phase, 30, phase)
    # the tick writes the RecoveryPlan first, then the ConfigMap: wait for the ConfigMap too
    wait_for(lambda: session_exists(env, name), 30, "the session ConfigMap")
    doc = session_doc(env, name)
    assert (doc["session"], doc["phase"], doc["step"]) == (rec["session"], "Completed", rec["step"])


def test_fault05_operator_killed_right_after_a_recovery_steps_status_write(
    env: Env, pool: Pool
) -> None:
    from backstop.controller import faults  # imported here: only this test needs it

    name = "killed"
    start_fan(env, pool, name)
    env.restart_operator({"BACKSTOP_FAULT_POINT": "after-status"})
    env.wait_condition(name, "Ready", "True")
    before = nodes_of(env, name)
    victims = sorted(set(before.values()))[:1]
    pool.add("4")
    pool.wait_ready()
    for v in victims:
        pool.sim.kill(v)
    assert env.proc is not None
    try:
        code = env.proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the operator did not stop at the after-status write point")
    assert code == faults.EXIT_CODE
    rec = recovery(env, name)
    step = rec["lastStep"]["step"]
    assert all(p["spec"]["step"] != step for p in plans(env, name)), "died before its plan"
    env.restart_operator()
    obj = wait_recovered(env, name)
    steps = plans(env, name)
    assert [s["spec"]["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert {s["spec"]["session"] for s in steps} == {obj["status"]["recovery"]["session"]}
    # the tick writes the RecoveryPlan first, then the ConfigMap: wait for the ConfigMap too
    wait_for(lambda: session_exists(env, name), 30, "the session ConfigMap")
    doc = session_doc(env, name)
    assert doc["session"] == obj["status"]["recovery"]["session"]
    assert doc["phase"] == "Completed"
    check_final(env, obj, set(victims))
    time.sleep(2)  # nothing more happens: no second copy of any pod
    tasks = [p.metadata.labels[f"{GROUP}/task"] for p in env.pods(name)]
    assert sorted(tasks) == sorted(before)
