"""The recovery state machine, :func:`backstop.domain.recovery.decide`, without a cluster.

decide() is pure: a status, the spec, the nodes, the time and the CPU other pods use
in, a Decision (the new status and what follows from it) out. So the rules the
operator lives by are checked here tick by tick: the session's bookkeeping, the
capacity a step may use, edits of the spec during a session, and what must exist
(RecoveryPlans) once a step is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop.domain.incidents import NodeInfo, for_topology
from backstop.domain.podtemplate import PodTemplate
from backstop.domain.recovery import (
    RETRY_SECONDS,
    Capacity,
    Decision,
    decide,
)
from backstop.domain.spec import StreamTopologySpec, expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus, parse_status
from backstop.domain.status.recoveryplans import mark_applied, wanted_recovery_plans
from planners import TaskGraph
from planners.evaluate import worst_node_failure


def fan_spec(
    *, mode: str = "incremental", cap: float = 0.8, bound: float = 10, restart: float = 0
) -> StreamTopologySpec:
    """8 tasks of 1 CPU: 2 sources -> 3 workers -> 3 queries (priorities 9, 5, 1)."""
    op = {"resources": {"cpu": "1"}, "reprocessingLatency": 0.5}
    queries = [("gold", 9), ("silver", 5), ("bronze", 1)]
    return parse_spec(
        {
            "image": "x",
            "recoveryLatencyBound": bound,
            "recovery": {
                "gracePeriodSeconds": 5,
                "mode": mode,
                "utilizationCap": cap,
                "restartSeconds": restart,
            },
            "operators": [
                {"name": "src", "parallelism": 2, **op},
                {"name": "work", "parallelism": 3, "inputs": [{"operator": "src"}], **op},
                *[
                    {"name": q, "priority": p, "inputs": [{"operator": "work"}], **op}
                    for q, p in queries
                ],
            ],
        }
    )


def node(name: str, cpu: float = 2.0, *, ready: bool = True, since: float = 0.0) -> NodeInfo:
    return NodeInfo(name, ready, since, cpu, schedulable=ready, cordoned=False)


def recorded(
    graph: TaskGraph, assignment: Mapping[str, str], generation: int = 1
) -> TopologyStatus:
    backups = ["work-0", "work-1", "work-2"]
    return TopologyStatus(
        plan=PlanStatus(generation=generation, assignment=dict(assignment), backups=backups)
    )


SPEC = fan_spec()
GRAPH = expand(SPEC)
FOUR = {t: f"n{i // 2}" for i, t in enumerate(GRAPH.tasks)}  # two tasks per 2-CPU node


def ledger(
    status: TopologyStatus, nodes: Mapping[str, NodeInfo], others: Mapping[str, float] = {}
) -> Capacity:
    """The capacity ledger's answer, by hand: cap x allocatable minus every pod's CPU
    (other workloads' ``others`` and this topology's own 1-CPU tasks)."""
    own: dict[str, float] = {}
    for n in (status.plan_or_empty.assignment or {}).values():
        own[n] = own.get(n, 0.0) + 1.0

    def capacity(usable: Sequence[str]) -> dict[str, float]:
        return {
            n: max(0.0, 0.8 * nodes[n].cpu - others.get(n, 0.0) - own.get(n, 0.0)) for n in usable
        }

    return capacity


def tick(status: TopologyStatus, nodes: dict[str, NodeInfo], now: float, **kw: Any) -> Decision:
    capacity = ledger(status, nodes, kw.pop("others", {}))
    d = decide(status, kw.pop("spec", SPEC), GRAPH, nodes, now, capacity, generation=1)
    assert d is not None
    return d


def test_nothing_happens_while_the_nodes_are_ready_or_within_the_grace_period() -> None:
    status = recorded(GRAPH, FOUR)
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    assert decide(status, SPEC, GRAPH, nodes, 100.0, ledger(status, nodes), generation=1) is None
    nodes["n0"] = node("n0", ready=False, since=97.0)  # NotReady for 3 s < grace 5 s
    assert decide(status, SPEC, GRAPH, nodes, 100.0, ledger(status, nodes), generation=1) is None
    # no plan recorded for this generation yet: the reconcile handler goes first
    assert decide(status, SPEC, GRAPH, nodes, 200.0, ledger(status, nodes), generation=2) is None


def test_a_lost_node_starts_a_session_and_the_step_fits_the_capacity_left() -> None:
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 4.0)}
    nodes["n0"] = node("n0", ready=False, since=90.0)
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0)
    rec, plan = d.status.recovery, d.status.plan
    assert rec is not None and plan is not None and plan.assignment is not None
    lost = {t for t, n in FOUR.items() if n == "n0"}
    assert d.trigger == "NodeLost" and rec.session == "s100" and set(rec.lost) == {"n0"}
    assert d.issued is not None and set(d.issued.recover) == lost  # 4 x 0.8 = 3.2 CPU on big
    assert set(d.issued.recover.values()) == {"big"}  # the 2-CPU nodes are full under the cap
    assert rec.failed == [] and not rec.active and set(rec.recovered) == lost
    assert set(plan.assignment) == set(GRAPH.tasks)
    assert "n0" not in plan.assignment.values()
    # the session is over: the bound is re-checked by the evaluator
    worst = worst_node_failure(GRAPH, plan.backups, plan.assignment)[0]
    assert plan.worst_recovery_latency == round(worst, 6)
    assert {n.reason for n in d.notices} >= {"NodeLost", "RecoveryPlanIssued", "Recovered"}
    [wanted] = wanted_recovery_plans(d.status)
    assert (wanted.session, wanted.step.step, wanted.phase) == ("s100", 1, "Issued")
    assert wanted.step.lost_nodes == ["n0"]


def test_the_recovered_message_says_the_bound_the_user_set() -> None:
    """ops-polish item 5: with restartSeconds 3 and a bound of 10 the message said
    "worst single-node recovery now 2.5s (bound 7s)" under a BOUND column of 10. It says
    the worst the session left at its end (a restore may better it later: "now" misled)."""
    spec = fan_spec(bound=10, restart=3)
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 4.0)}
    nodes["n0"] = node("n0", ready=False, since=90.0)
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0, spec=spec)
    assert d.status.plan is not None and d.status.plan.assignment is not None
    worst = worst_node_failure(GRAPH, d.status.plan.backups, d.status.plan.assignment)[0]
    [message] = [n.message for n in d.notices if n.reason == "Recovered"]
    assert message.endswith(
        f"worst single-node recovery at its end {3 + worst:g}s (3s restart + {worst:g}s after it; "
        "bound 10s)"
    ), message
    assert "bound 7" not in message


def test_cpu_other_pods_hold_is_not_given_to_a_step() -> None:
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 4.0)}
    nodes["n0"] = node("n0", ready=False, since=0.0)
    # another workload holds 2.5 of big's 4 CPU: 4 x 0.8 - 2.5 = 0.7 < one task
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0, others={"big": 2.5})
    assert d.issued is None and d.status.recovery is not None
    assert d.status.recovery.active and len(d.status.recovery.failed) == 2
    assert "waiting for capacity" in (d.status.recovery.message or "")


def test_no_usable_node_is_waited_out_and_retried_not_given_up() -> None:
    nodes = {f"n{i}": node(f"n{i}", ready=False, since=0.0) for i in range(4)}
    first = tick(recorded(GRAPH, FOUR), nodes, 100.0)
    rec = first.status.recovery
    assert rec is not None and rec.active and len(rec.failed) == len(GRAPH)
    assert (
        decide(first.status, SPEC, GRAPH, nodes, 101.0, ledger(first.status, nodes), generation=1)
        is None
    )
    nodes["new"] = node("new", 16.0)  # a replacement node: seen at once
    d = tick(first.status, nodes, 102.0)
    assert d.trigger == "NodeReady" and d.status.recovery is not None
    assert not d.status.recovery.active
    # and without a new node, the session re-plans every RETRY_SECONDS
    again = decide(
        first.status,
        SPEC,
        GRAPH,
        nodes | {},
        100.0 + RETRY_SECONDS,
        ledger(first.status, nodes),
        generation=1,
    )
    assert again is not None


def test_blocking_mode_recovers_everything_at_once_or_nothing() -> None:
    spec = fan_spec(mode="blocking")
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"s": node("s", 2.0)}
    nodes["n0"] = node("n0", ready=False, since=0.0)
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0, spec=spec)
    assert d.issued is None  # room for one task (2 x 0.8), two failed: wait
    nodes["t"] = node("t", 2.0)
    d2 = tick(d.status, nodes, 101.0, spec=spec)
    assert d2.issued is not None and len(d2.issued.recover) == 2


def test_failed_ids_the_edited_spec_no_longer_has_are_dropped_not_an_error() -> None:
    """Fault item 2: an edit during a session re-planned every task; the old failed ids go."""
    status = parse_status(
        {
            "plan": {"generation": 1, "assignment": FOUR, "backups": []},
            "recovery": {
                "session": "s1",
                "active": True,
                "failed": ["old-0", "old-1", "src-0"],  # old-*: gone; src-0: re-planned
                "lost": {"gone": 1.0},
                "lastAttempt": 99.0,
            },
        }
    ).status
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    d = tick(status, nodes, 100.0)
    rec = d.status.recovery
    assert d.trigger == "SpecChanged" and rec is not None
    assert rec.failed == [] and not rec.active and rec.completed_at
    assert d.status.plan is not None and d.status.plan.assignment == FOUR


def test_a_planner_error_is_recorded_and_retried_not_raised() -> None:
    broken = SPEC.model_copy(
        update={"recovery": SPEC.recovery.model_copy(update={"algorithm": "nope"})}
    )
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 8.0)}
    nodes["n0"] = node("n0", ready=False, since=0.0)
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0, spec=broken)
    rec = d.status.recovery
    assert rec is not None and rec.active and d.issued is None
    assert "unknown recovery algorithm 'nope'" in (rec.message or "")
    assert any(n.warning and "nope" in n.message for n in d.notices)


def test_the_last_step_is_marked_applied_once_its_pods_run_where_it_put_them() -> None:
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)} | {"big": node("big", 4.0)}
    nodes["n0"] = node("n0", ready=False, since=0.0)
    d = tick(recorded(GRAPH, FOUR), nodes, 100.0)
    assert d.issued is not None
    assert mark_applied(d.status, {}) is None
    applied = mark_applied(d.status, dict(d.issued.recover))
    assert applied is not None and applied.recovery is not None
    assert applied.recovery.applied_step == 1
    assert [w.phase for w in wanted_recovery_plans(applied)] == ["Applied"]
    assert mark_applied(applied, dict(d.issued.recover)) is None


@st.composite
def incidents(draw: st.DrawFn) -> tuple[list[set[str]], list[float]]:
    """Up to three rounds of losses among n0..n3, and replacement node sizes."""
    rounds = draw(st.lists(st.sets(st.sampled_from(["n0", "n1", "n2", "n3"])), max_size=3))
    sizes = draw(st.lists(st.sampled_from([1.0, 2.0, 4.0]), max_size=4))
    return rounds, sizes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(incidents(), st.sampled_from(["incremental", "blocking"]))
def test_ticks_keep_every_task_once_never_overbook_and_finish(
    case: tuple[list[set[str]], list[float]], mode: str
) -> None:
    """Whatever is lost and arrives, tick after tick: every task is running (in the plan)
    or failed, never both; no task sits on a lost node; a step never puts more on a
    node than cap x allocatable; steps are numbered 1, 2, ...; and once enough capacity
    arrives the session ends with every task placed."""
    rounds, sizes = case
    spec = fan_spec(mode=mode)
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    status = recorded(GRAPH, FOUR)
    now, steps, dead = 100.0, 0, set[str]()
    events: list[tuple[str, Any]] = [("lose", r) for r in rounds] + [("add", s) for s in sizes]
    events.append(("add", 16.0))
    for k, (kind, what) in enumerate(events):
        if kind == "lose":
            dead |= set(what)
            for n in what:
                nodes[n] = node(n, ready=False, since=0.0)
        else:
            nodes[f"r{k}"] = node(f"r{k}", what)
        now += 1.0
        d = decide(status, spec, GRAPH, nodes, now, ledger(status, nodes), generation=1)
        if d is None:
            continue
        status = d.status
        plan, rec = status.plan, status.recovery
        assert plan is not None and plan.assignment is not None and rec is not None
        assert set(plan.assignment).isdisjoint(rec.failed)
        assert set(plan.assignment) | set(rec.failed) == set(GRAPH.tasks)
        assert not set(plan.assignment.values()) & set(rec.lost)
        if d.issued is not None:
            steps += 1
            assert d.issued.step == steps
            load: dict[str, float] = {}
            for n in plan.assignment.values():
                load[n] = load.get(n, 0.0) + 1.0
            for n in set(d.issued.recover.values()):
                before = sum(1.0 for t, m in plan.assignment.items() if m == n) - sum(
                    1.0 for m in d.issued.recover.values() if m == n
                )
                added = load[n] - before
                assert added <= max(0.0, 0.8 * nodes[n].cpu - before) + 1e-9
    rec = status.recovery
    if dead:
        assert rec is not None and not rec.active and rec.failed == []
        plan = status.plan
        assert plan is not None and plan.assignment is not None
        assert set(plan.assignment) == set(GRAPH.tasks)


def test_recovery_uses_a_tainted_node_only_when_the_topology_tolerates_it() -> None:
    """The supervisor sees the node index through ``for_topology`` (its pods'
    tolerations); a NoSchedule-tainted node is a recovery target only when tolerated."""
    taint = (("dedicated", "streams", "NoSchedule"),)
    index = {f"n{i}": node(f"n{i}") for i in range(4)}
    index["big"] = NodeInfo("big", True, 0.0, 4.0, schedulable=False, cordoned=False, taints=taint)
    index["n0"] = node("n0", ready=False, since=90.0)
    status = recorded(GRAPH, FOUR)
    d = tick(status, for_topology(index, SPEC), 100.0)
    assert d.issued is None, "untolerated: big is not used, nothing else has room"
    tolerating = SPEC.model_copy(
        update={
            "pod_template": PodTemplate.model_validate(
                {
                    "spec": {
                        "containers": [{"name": "task"}],
                        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    }
                }
            )
        }
    )
    d = tick(status, for_topology(index, tolerating), 100.0, spec=tolerating)
    lost = {t for t, n in FOUR.items() if n == "n0"}
    assert d.issued is not None and set(d.issued.recover) == lost
    assert set(d.issued.recover.values()) == {"big"}
    plan = d.status.plan
    assert plan is not None and plan.assignment is not None
    worst = worst_node_failure(GRAPH, plan.backups, plan.assignment)[0]
    assert plan.worst_recovery_latency == round(worst, 6)
