"""Crash safety, proven by killing the operator at every write point.

The status is a write-ahead log: whatever write the operator dies after, a fresh
operator must converge from the status alone. Each case runs the real operator
(``backstop operator``) armed with ``BACKSTOP_FAULT_POINT`` (see
:mod:`backstop.controller.faults`), triggers a reconcile (a new topology) or a recovery
step (a simulated node killed, as in ``test_node_loss.py``), waits until the process
exits with the fault exit code at that point, checks that it really died there (what
exists at the crash), restarts it unarmed and checks convergence: one Running pod per
task on its planned node (none lost, none twice), one RecoveryPlan per recorded step,
the session ConfigMap consistent with ``status.recovery``, and ``status.plan``'s bound
figures re-computed for the new assignment by the failure-effect evaluator.

A reconcile writes no RecoveryPlan or ConfigMap, so those two points are exercised
during recovery only; ``after-replan`` belongs to the restore that follows a recovery
which broke the bound. The cases run one after another: run at once (each in its own
namespace) they starved the node simulator's heartbeats on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from backstop.controller import faults
from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import cpu_cores, expand, parse_spec
from backstop_runtime import session as sessions
from backstop_testkit.sim.nodesim import NodeShape
from backstop_testkit.support.kubetools import (
    POOL_LABEL,
    Env,
    env_fixture,
    node_ready,
    start_operator,
    wait_for,
)
from planners.evaluate import check_plan, worst_node_failure

pytestmark = pytest.mark.cluster
BOUND = 10.0
RECONCILE_POINTS = ["after-status", "mid-pod-batch"]
RECOVERY_POINTS = ["after-status", "after-recoveryplan", "after-configmap", "mid-pod-batch"]


# every test makes its own labelled pool; the module's one node stays unused
env = env_fixture("faults", node_cpu="1", nodes=1)


@pytest.fixture(autouse=True)
def _cleanup(env: Env) -> Iterator[None]:
    yield
    if env.proc is None or env.proc.poll() is not None:
        env.restart_operator()  # a failed case may leave no operator to remove finalizers
    env.cleanup()


class Pool:
    """Simulated nodes of one test, labelled ``POOL_LABEL=<name>``; deleted afterwards."""

    def __init__(self, env: Env) -> None:
        assert env.simulator is not None
        self.sim = env.simulator
        self.name = f"f{uuid.uuid4().hex[:5]}"
        self.nodes: list[str] = []

    def add(self, cpu: str) -> str:
        node = f"{self.name}-{len(self.nodes)}"
        self.sim.create(node, NodeShape(cpu=cpu))
        self.sim.core.patch_node(node, {"metadata": {"labels": {POOL_LABEL: self.name}}})
        self.nodes.append(node)
        return node

    def wait_ready(self, nodes: list[str]) -> None:
        wait_for(lambda: all(node_ready(self.sim.core, n) for n in nodes), 30, f"{nodes} Ready")


@pytest.fixture
def pool(env: Env) -> Iterator[Pool]:
    p = Pool(env)
    yield p
    for n in p.nodes:
        with contextlib.suppress(ApiException):
            p.sim.core.delete_node(n)


def topology(name: str, pool: str) -> dict[str, Any]:
    """6 tasks of 1 CPU (src x2 -> work x2 -> gold, silver): three 2-CPU nodes hold them."""
    op = {"resources": {"cpu": "1", "memory": "64Mi"}, "reprocessingLatency": 0.5}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/fan:1",
            "recoveryLatencyBound": BOUND,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1, "mode": "auto", "utilizationCap": 0.8},
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "work", "parallelism": 2, "inputs": [{"operator": "src"}], **op},
                *[
                    {
                        "name": q,
                        "priority": prio,
                        "inputs": [{"operator": "work", "grouping": "global"}],
                        **op,
                    }
                    for q, prio in (("gold", 9), ("silver", 1))
                ],
            ],
        },
    }


# ---------------------------------------------------------------- the operator's lives
def arm(env: Env, point: str, log: Path) -> subprocess.Popen[bytes]:
    """Replace the running operator with one armed at ``point`` (the old one is SIGKILLed)."""
    if env.proc is not None and env.proc.poll() is None:
        env.proc.kill()
        env.proc.wait()
    env.proc = start_operator(
        env.kubeconfig, env.namespace, log, extra_env={"BACKSTOP_FAULT_POINT": point}
    )
    return env.proc


def wait_fault(proc: subprocess.Popen[bytes], point: str, log: Path) -> None:
    """The armed operator exits with the fault exit code, saying it stopped at ``point``."""
    try:
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        tail = log.read_text()[-3000:]
        raise AssertionError(f"the operator never reached {point}:\n{tail}") from None
    text = log.read_text()
    assert code == faults.EXIT_CODE, f"exit code {code}, not the fault's:\n{text[-3000:]}"
    assert f"exiting at point {point} (hit 1)" in text


def restart_unarmed(env: Env) -> None:
    env.proc = start_operator(env.kubeconfig, env.namespace, env.log)


# ---------------------------------------------------------------- reading the cluster
def live_pods(env: Env, name: str) -> list[Any]:
    return [p for p in env.pods(name) if p.metadata.deletion_timestamp is None]


def recoveryplans(env: Env, name: str) -> list[dict[str, Any]]:
    items = env.custom.list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, "recoveryplans", label_selector=f"{GROUP}/topology={name}"
    )["items"]
    return list(items)


def session_doc(env: Env, name: str) -> dict[str, Any] | None:
    try:
        cm = env.core.read_namespaced_config_map(f"{name}-recovery", env.namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    doc: dict[str, Any] = json.loads(cm.data["session.json"])
    return doc


# ---------------------------------------------------------------- convergence
def check_pods_and_bound(env: Env, obj: dict[str, Any], lost: set[str]) -> None:
    """One Running pod per task, on its planned node, none on a lost node; the recorded
    bound figures are the evaluator's for the recorded assignment."""
    name = obj["metadata"]["name"]
    graph = expand(parse_spec(obj["spec"]))
    plan = obj["status"]["plan"]
    assignment: dict[str, str] = plan["assignment"]
    assert sorted(assignment) == sorted(graph.tasks)
    assert not set(assignment.values()) & lost
    pods = live_pods(env, name)
    tasks = sorted(p.metadata.labels[f"{GROUP}/task"] for p in pods)
    assert tasks == sorted(graph.tasks), "a task pod is lost or duplicated"
    for p in pods:
        task = p.metadata.labels[f"{GROUP}/task"]
        assert p.status.phase == "Running", (p.metadata.name, p.status.phase)
        assert p.spec.node_name == assignment[task], (task, p.spec.node_name, assignment[task])
    bound = float(obj["spec"]["recoveryLatencyBound"])
    worst, _ = worst_node_failure(graph, plan["backups"], assignment)
    assert plan["worstRecoveryLatency"] == pytest.approx(worst, abs=1e-6)
    assert plan["boundSatisfied"] == (worst <= bound + 1e-9)
    assert set(plan["worstByNode"]) == set(assignment.values())
    capacity = {
        n.metadata.name: cpu_cores(n.status.allocatable["cpu"]) for n in env.core.list_node().items
    }
    violations = check_plan(
        graph, bound=bound, backups=plan["backups"], assignment=assignment, capacity=capacity
    )
    assert violations == [], violations


def converged(env: Env, name: str) -> dict[str, Any]:
    """Wait until the topology is Ready with no recovery running and every pod Running."""

    def done() -> dict[str, Any] | None:
        obj = env.get(name)
        rec = (obj.get("status") or {}).get("recovery") or {}
        pods = live_pods(env, name)
        running = pods and all(p.status.phase == "Running" for p in pods)
        return obj if running and not rec.get("active") and not rec.get("failed") else None

    env.wait_condition(name, "Ready", "True", timeout=90)
    found = wait_for(done, 60, f"{name} converged")
    assert found is not None
    return found


# ---------------------------------------------------------------- the cases
@pytest.mark.parametrize("point", RECONCILE_POINTS)
def test_fault_injection_during_reconcile_converges(
    env: Env, pool: Pool, tmp_path: Path, point: str
) -> None:
    nodes = [pool.add("2") for _ in range(3)]
    pool.wait_ready(nodes)
    name = f"rc-{point}"
    log = tmp_path / "armed.log"
    proc = arm(env, point, log)
    env.create(topology(name, pool.name))
    wait_fault(proc, point, log)

    # it died where it says: the plan is recorded (write-ahead), the pods are not all there
    at_crash = env.get(name)
    assert at_crash["status"]["plan"]["generation"] == at_crash["metadata"]["generation"]
    created = len(live_pods(env, name))
    if point == "after-status":
        assert created == 0
    else:  # mid-pod-batch: half of the six creations
        assert 0 < created < 6, created

    restart_unarmed(env)
    obj = converged(env, name)
    assert obj["status"]["plan"]["assignment"] == at_crash["status"]["plan"]["assignment"]
    check_pods_and_bound(env, obj, set())
    assert recoveryplans(env, name) == []
    assert session_doc(env, name) is None


@pytest.mark.parametrize("point", RECOVERY_POINTS)
def test_fault05_crash_at_a_recovery_write_point_converges(
    env: Env, pool: Pool, tmp_path: Path, point: str
) -> None:
    """Item 5: a crash after the step's status write (or any later write of the step)
    loses nothing: the RecoveryPlan, the session ConfigMap and the pods follow."""
    nodes = [pool.add("2") for _ in range(3)]
    pool.wait_ready(nodes)
    name = f"rv-{point}"
    env.create(topology(name, pool.name))
    before = dict(converged(env, name)["status"]["plan"]["assignment"])
    victim = max(set(before.values()), key=lambda n: sum(1 for v in before.values() if v == n))
    failed = {t for t, n in before.items() if n == victim}
    assert len(failed) == 2, before  # three 2-CPU nodes, six 1-CPU tasks
    spare = pool.add("4")  # 4 x 0.8 CPU of room: one step recovers both tasks
    pool.wait_ready([spare])

    # the armed operator resumes the topology first, then the node's heartbeats stop (it
    # turns NotReady ~15 s later: the node-lifecycle controller's grace period)
    log = tmp_path / "armed.log"
    proc = arm(env, point, log)
    wait_for(lambda: "Handler 'reconcile' succeeded" in log.read_text(), 60, "armed resume")
    pool.sim.kill(victim)
    wait_fault(proc, point, log)

    # it died where it says
    rec = env.get(name)["status"]["recovery"]
    assert rec["step"] == 1 and set(rec["lastStep"]["recover"]) == failed
    plans_at_crash = recoveryplans(env, name)
    doc = session_doc(env, name)
    if point == "after-status":
        assert plans_at_crash == [] and doc is None
    elif point == "after-recoveryplan":
        assert len(plans_at_crash) == 1 and doc is None
    else:
        assert len(plans_at_crash) == 1 and doc is not None and doc["session"] == rec["session"]
    moved = [
        p
        for p in live_pods(env, name)
        if p.metadata.labels[f"{GROUP}/task"] in failed and p.spec.node_name != victim
    ]
    assert len(moved) == (1 if point == "mid-pod-batch" else 0), moved

    restart_unarmed(env)
    obj = converged(env, name)
    check_pods_and_bound(env, obj, {victim})
    rec = obj["status"]["recovery"]
    assert set(rec["sessionFailed"]) == failed and set(rec["recovered"]) == failed
    assert {t: n for t, n in before.items() if t not in failed} == {
        t: n for t, n in obj["status"]["plan"]["assignment"].items() if t not in failed
    }, "only the lost node's tasks move"

    # exactly one RecoveryPlan per recorded step, each as the status recorded it
    steps = sorted((p["spec"]["session"], p["spec"]["step"]) for p in recoveryplans(env, name))
    assert steps == [(rec["session"], k) for k in range(1, rec["step"] + 1)], steps
    last = next(p for p in recoveryplans(env, name) if p["spec"]["step"] == rec["step"])
    assert {a["task"]: a["node"] for a in last["spec"]["assignments"]} == rec["lastStep"]["recover"]
    wait_for(
        lambda: all(
            (p.get("status") or {}).get("phase") == "Applied" for p in recoveryplans(env, name)
        ),
        30,
        "every RecoveryPlan Applied",
    )

    # the session ConfigMap says what status.recovery says
    doc = session_doc(env, name)
    assert doc is not None, "the session ConfigMap is missing"
    assert doc["session"] == rec["session"]
    assert doc["step"] == rec["step"]
    assert doc["phase"] == "Completed"
    assert doc["lostNodes"] == sorted(rec["lost"]) == [victim]
    assert doc["pendingTasks"] == "" and rec["failed"] == []
    assert sorted(sessions.parse(doc).replay) == sorted(rec["recovered"])


def chains(name: str, pool: str) -> dict[str, Any]:
    """Three chains src -> parse -> score -> sink of 250m tasks, bound 2.5 s: one node
    holding all twelve recovers in 4 s, so the bound needs two nodes (as in
    ``test_restore_cluster.py``)."""
    stages = [("src", 0.5), ("parse", 1.0), ("score", 1.5), ("sink", 1.0)]
    operators = [
        {
            "name": stage,
            "parallelism": 3,
            "reprocessingLatency": latency,
            "resources": {"cpu": "250m", "memory": "32Mi"},
            **({"inputs": [{"operator": stages[k - 1][0], "grouping": "forward"}]} if k else {}),
        }
        for k, (stage, latency) in enumerate(stages)
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "registry.example/chains:1",
            "recoveryLatencyBound": CHAINS_BOUND,
            "nodeSelector": {POOL_LABEL: pool},
            "recovery": {"gracePeriodSeconds": 1, "mode": "auto"},
            "operators": operators,
        },
    }


CHAINS_BOUND = 2.5
RESTORE_POINTS = ["after-replan"]


@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_fault_injection_during_restore_converges(
    env: Env, pool: Pool, tmp_path: Path, point: str
) -> None:
    """The re-plan after a recovery that broke the bound: a crash after the restore is
    recorded (and its first step's assignment with it) loses neither its RecoveryPlans
    nor its later steps."""
    first, second = pool.add("4"), pool.add("4")
    pool.wait_ready([first, second])
    name = f"rs-{point}"
    env.create(chains(name, pool.name))
    before = dict(converged(env, name)["status"]["plan"]["assignment"])
    assert set(before.values()) == {first, second}, "the bound needs both nodes"

    # an unarmed operator recovers everything onto the survivor (the bound breaks) and
    # records that no placement on it restores the bound
    pool.sim.kill(first)

    def waiting() -> bool:
        status = env.get(name).get("status") or {}
        rec, rst = status.get("recovery") or {}, status.get("restore") or {}
        done = rec.get("session") and not rec.get("active") and not rec.get("failed")
        return bool(done) and rst.get("phase") == "Waiting"

    wait_for(waiting, 120, "recovered onto the survivor, the restore waiting for capacity")
    assert not env.get(name)["status"]["plan"]["boundSatisfied"]

    log = tmp_path / "armed.log"
    proc = arm(env, point, log)
    wait_for(lambda: "Handler 'reconcile' succeeded" in log.read_text(), 60, "armed resume")
    added = pool.add("4")  # capacity returns: the restore re-plans under the armed operator
    wait_fault(proc, point, log)

    # it died where it says: the restore and its first step are recorded, nothing else
    rst = env.get(name)["status"]["restore"]
    assert rst["active"] and rst["issued"] == 1 and rst["steps"], rst
    restore_plans = [p for p in recoveryplans(env, name) if p["spec"]["session"] == rst["id"]]
    assert restore_plans == []

    restart_unarmed(env)
    env.wait_condition(name, "BoundSatisfied", "True", timeout=120)
    obj = converged(env, name)
    check_pods_and_bound(env, obj, {first})
    assert set(obj["status"]["plan"]["assignment"].values()) <= {second, added}
    assert obj["status"]["plan"]["boundSatisfied"]
    done = obj["status"]["restore"]
    assert done["id"] == rst["id"] and done["phase"] == "Restored", done
    assert done["steps"] == rst["steps"], "the recorded restore is resumed, not planned anew"

    # one RecoveryPlan per restore step, each as recorded, all Applied
    def restore_steps() -> list[dict[str, Any]]:
        items = [p for p in recoveryplans(env, name) if p["spec"]["session"] == rst["id"]]
        return sorted(items, key=lambda p: int(p["spec"]["step"]))

    steps = restore_steps()
    assert [p["spec"]["step"] for p in steps] == list(range(1, len(rst["steps"]) + 1))
    for p, recorded in zip(steps, rst["steps"], strict=True):
        assert {a["task"]: a["node"] for a in p["spec"]["assignments"]} == recorded["moves"]
    wait_for(
        lambda: all((p.get("status") or {}).get("phase") == "Applied" for p in restore_steps()),
        30,
        "every restore RecoveryPlan Applied",
    )
