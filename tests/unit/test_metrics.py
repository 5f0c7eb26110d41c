"""The operator's Prometheus metrics (:mod:`backstop.controller.metrics`) without a cluster.

The recovery metrics are fed real Decisions of the recovery state machine
(:func:`backstop.domain.recovery.decide`), tick by tick, as the supervisor feeds
them; the expected values are worked out here from the scenario (when the node
turned NotReady, the grace period, the tick's time), not read back from the code.
"""

from __future__ import annotations

import urllib.request

import pytest
from kopf import TemporaryError
from prometheus_client.parser import text_string_to_metric_families

from backstop.controller import settings as config
from backstop.controller.metrics import OperatorMetrics, error_kind, serve
from backstop.domain.incidents import NodeInfo
from backstop.domain.recovery import decide
from backstop.domain.status import TopologyStatus, parse_status
from backstop_testkit.support.kubetools import free_port
from planners import Infeasible
from planners.recovery import failed_queries
from tests.unit.test_recovery_decide import FOUR, GRAPH, SPEC, ledger, node, recorded

NS, NAME = "prod", "fan"
TOPO = {"namespace": NS, "topology": NAME}


def _v(m: OperatorMetrics, sample: str, **labels: str) -> float | None:
    return m.value(sample, **{**TOPO, **labels})


def _tick(
    m: OperatorMetrics, status: TopologyStatus, nodes: dict[str, NodeInfo], now: float
) -> TopologyStatus:
    """One supervision round as the supervisor runs it: decide, 'write', then observe."""
    decision = decide(status, SPEC, GRAPH, nodes, now, ledger(status, nodes), generation=1)
    if decision is None:
        return status
    grace = SPEC.recovery.grace_period_seconds
    m.observe_decision(NS, NAME, status, decision, nodes, grace, now)
    new = decision.status
    down = len(failed_queries(GRAPH, new.recovery_or_empty.failed))
    m.observe_status(NS, NAME, new, queries_down=down)
    return new


def test_node_loss_moves_the_recovery_metrics() -> None:
    """n0 (src-0 and src-1 in FOUR) turns NotReady at t=100; the grace period
    is 5 s, so it is lost from t=105; two 4-CPU spares take its tasks in one step."""
    m = OperatorMetrics()
    status = recorded(GRAPH, FOUR)
    ok = {n: node(n) for n in sorted(set(FOUR.values()))}
    spares = {"s0": node("s0", 4.0), "s1": node("s1", 4.0)}
    status = _tick(m, status, {**ok, **spares}, 99.0)
    assert _v(m, "backstop_recovery_steps_total", trigger="NodeLost") is None

    down = {**ok, "n0": node("n0", ready=False, since=100.0), **spares}
    status = _tick(m, status, down, 103.0)  # within the grace period: nothing yet
    assert status.recovery is None
    status = _tick(m, status, down, 106.5)
    rec = status.recovery_or_empty
    assert rec.step == 1 and rec.failed == [] and not rec.active  # one step recovers both
    assert _v(m, "backstop_recovery_steps_total", trigger="NodeLost") == 1.0
    # 106.5 - 100 from NotReady, 106.5 - 105 from the grace period's end
    assert _v(m, "backstop_recovery_first_plan_seconds_sum", since="not_ready") == 6.5
    assert _v(m, "backstop_recovery_first_plan_seconds_sum", since="grace_expiry") == 1.5
    assert _v(m, "backstop_recovery_first_plan_seconds_count", since="not_ready") == 1.0
    assert _v(m, "backstop_recovery_first_plan_seconds_bucket", since="grace_expiry", le="2.0") == 1
    assert _v(m, "backstop_recovery_first_plan_seconds_bucket", since="grace_expiry", le="1.0") == 0
    assert _v(m, "backstop_recovery_tasks_lost") == 0.0
    assert _v(m, "backstop_recovery_session_active") == 0.0

    status = _tick(m, status, down, 120.0)  # nothing new: no second observation
    assert _v(m, "backstop_recovery_first_plan_seconds_count", since="not_ready") == 1.0
    assert _v(m, "backstop_recovery_steps_total", trigger="NodeLost") == 1.0


def test_tasks_waiting_for_capacity_count_as_lost_and_their_queries_as_down() -> None:
    """No spare capacity: the sources' node is lost at t=50+5 and nothing can take its
    tasks, so they stay lost, every query (all read the sources) is down, the session
    stays active and no step (no RecoveryPlan) is counted until a node arrives."""
    m = OperatorMetrics()
    status = recorded(GRAPH, FOUR)
    victim = FOUR["src-0"]  # a source: every query reads from it
    full = {n: node(n) for n in sorted(set(FOUR.values()))}
    full[victim] = node(victim, ready=False, since=50.0)
    status = _tick(m, status, full, 60.0)
    lost_tasks = sorted(t for t, n in FOUR.items() if n == victim)
    assert status.recovery_or_empty.failed == lost_tasks
    assert _v(m, "backstop_recovery_tasks_lost") == len(lost_tasks)
    assert _v(m, "backstop_recovery_queries_down") == 3.0  # gold, silver, bronze
    assert _v(m, "backstop_recovery_session_active") == 1.0
    assert _v(m, "backstop_recovery_steps_total", trigger="NodeLost") is None
    assert _v(m, "backstop_recovery_first_plan_seconds_count", since="not_ready") is None

    # a node arrives 20 s later: the first RecoveryPlan for the victim's tasks is issued now
    full["s0"] = node("s0", 4.0)
    status = _tick(m, status, full, 80.0)
    assert status.recovery_or_empty.failed == []
    assert _v(m, "backstop_recovery_steps_total", trigger="NodeReady") == 1.0
    assert _v(m, "backstop_recovery_first_plan_seconds_sum", since="not_ready") == 30.0
    assert _v(m, "backstop_recovery_first_plan_seconds_sum", since="grace_expiry") == 25.0
    assert _v(m, "backstop_recovery_queries_down") == 0.0


def test_plan_gauges_follow_the_recorded_plan_and_vanish_with_the_topology() -> None:
    m = OperatorMetrics()
    raw = {
        "plan": {
            "generation": 3,
            "assignment": {"a": "n1", "b": "n2"},
            "worstRecoveryLatency": 4.25,
            "bound": 6.0,
            "boundSatisfied": True,
            "backupCount": 1,
            "nodesUsed": 2,
            "tasks": 2,
        }
    }
    m.observe_status(NS, NAME, parse_status(raw).status, queries_down=0)
    m.observe_status("other", NAME, parse_status(raw).status, queries_down=0)
    assert _v(m, "backstop_topology_worst_recovery_seconds") == 4.25
    assert _v(m, "backstop_topology_recovery_bound_seconds") == 6.0
    assert _v(m, "backstop_topology_bound_satisfied") == 1.0
    assert _v(m, "backstop_topology_backups") == 1.0
    assert _v(m, "backstop_topology_nodes_used") == 2.0
    assert _v(m, "backstop_topology_tasks") == 2.0

    raw["plan"].update(worstRecoveryLatency=7.5, boundSatisfied=False)
    m.observe_status(NS, NAME, parse_status(raw).status, queries_down=0)
    assert _v(m, "backstop_topology_worst_recovery_seconds") == 7.5
    assert _v(m, "backstop_topology_bound_satisfied") == 0.0

    m.steps.labels(NS, NAME, "NodeLost").inc()
    m.first_plan.labels(NS, NAME, "not_ready").observe(3.0)
    m.forget(NS, NAME)
    text = m.exposition()
    assert f'namespace="{NS}"' not in text
    assert 'namespace="other"' in text  # another topology's series stay


def test_reoptimization_runs_are_counted_once_per_recorded_run() -> None:
    m = OperatorMetrics()

    def status(last_run: str | None, result: str, running: bool = False) -> TopologyStatus:
        reopt = {"lastRun": last_run, "result": result, "running": running or None}
        return parse_status({"reoptimization": reopt}).status

    def runs(result: str) -> float | None:
        return _v(m, "backstop_reoptimization_runs_total", result=result)

    m.observe_status(NS, NAME, status("2026-01-01T00:00:00Z", "Applied"), queries_down=0)
    assert runs("Applied") is None  # recorded before this process: a baseline, not a run
    m.observe_status(NS, NAME, status("2026-01-01T01:00:00Z", "Suggested", True), queries_down=0)
    assert runs("Suggested") is None  # still running
    m.observe_status(NS, NAME, status("2026-01-01T01:00:00Z", "BelowThreshold"), queries_down=0)
    m.observe_status(NS, NAME, status("2026-01-01T01:00:00Z", "BelowThreshold"), queries_down=0)
    assert runs("BelowThreshold") == 1.0
    m.observe_status(NS, NAME, status("2026-01-01T02:00:00Z", "Failed"), queries_down=0)
    assert runs("Failed") == 1.0


def test_handler_time_and_errors_by_kind() -> None:
    m = OperatorMetrics()
    with m.timed("reconcile"):
        pass
    for err in (TemporaryError("wait", delay=1), Infeasible("no"), RuntimeError("bug")):
        with pytest.raises(type(err)), m.timed("reconcile"):
            raise err
    assert m.value("backstop_reconcile_duration_seconds_count", handler="reconcile") == 4.0
    for kind in ("TemporaryError", "PlannerError", "Exception"):
        assert m.value("backstop_reconcile_errors_total", handler="reconcile", kind=kind) == 1.0
    assert error_kind(KeyError("x")) == "Exception"


def test_metrics_are_served_over_http_and_the_port_is_a_setting() -> None:
    port = free_port()
    assert config.Settings.from_env({"BACKSTOP_METRICS_PORT": str(port)}).metrics_port == port
    m = OperatorMetrics()
    m.leader.set(1)
    m.observe_status(NS, NAME, recorded(GRAPH, FOUR), queries_down=0)
    server, thread = serve(m, port, host="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["backstop_leader"].samples[0].value == 1.0
    (active,) = families["backstop_recovery_session_active"].samples
    assert active.labels == TOPO and active.value == 0.0
