"""The operator's Prometheus metrics: every definition in one place, and their updates.

One :class:`OperatorMetrics` per process holds its own ``CollectorRegistry`` (no
module-level metric objects): ``backstop operator`` creates it, serves it on
``--metrics-port`` (:func:`serve`, on every replica, a standby included, so a
scrape of any pod answers) and hands it to Kopf in the root ``memo``
(``memo.metrics``), where every handler and daemon finds it.

The numbers come from where the operator already computes them, never from a
second computation: the recorded plan summary (``status.plan``: worst single-node
recovery, bound, backups, nodes, tasks), the recovery state machine's
:class:`~backstop.domain.recovery.Decision` (steps issued, time from node loss to
the first RecoveryPlan), and ``status.recovery`` / ``status.reoptimization``
(tasks still lost, queries down, sessions active, re-optimization runs). Series
carry ``namespace`` and ``topology`` labels and are removed with the topology
(:meth:`OperatorMetrics.forget`). ``docs/metrics.md`` lists them; the Grafana
dashboard (``charts/backstop/dashboards/backstop.json``) uses only these names
(``tests/unit/test_metrics.py`` checks both).

Examples
--------
>>> from backstop.domain.status import parse_status
>>> m = OperatorMetrics()
>>> plan = {"generation": 1, "assignment": {"a": "n1"}, "worstRecoveryLatency": 3.5,
...         "bound": 8, "boundSatisfied": True, "backupCount": 2, "nodesUsed": 1, "tasks": 1}
>>> m.observe_status("ns", "t", parse_status({"plan": plan}).status, queries_down=0)
>>> m.value("backstop_topology_worst_recovery_seconds", namespace="ns", topology="t")
3.5
>>> m.forget("ns", "t")
>>> m.value("backstop_topology_worst_recovery_seconds", namespace="ns", topology="t") is None
True
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from threading import Thread
from typing import Any, TypeVar, cast
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from backstop.domain.incidents import NodeInfo
from backstop.domain.recovery import Decision
from backstop.domain.status import PlanStatus, TopologyStatus

TOPOLOGY = ("namespace", "topology")
"""The labels of every per-topology series."""
SINCE = ("not_ready", "grace_expiry")
"""Where the time to the first RecoveryPlan starts: the node's Ready condition turning
False/Unknown (``not_ready``), or that moment plus the grace period (``grace_expiry``)."""
TRIGGERS = ("NodeLost", "DataPlane", "NodeBack", "NodeReady", "Retry", "SpecChanged")
"""``trigger`` values of ``backstop_recovery_steps_total`` (:data:`recovery.Trigger`)."""
REOPT_RESULTS = (
    "Applied",
    "Suggested",
    "BelowThreshold",
    "Stale",
    "NoMetrics",
    "Infeasible",
    "Invalid",
    "Failed",
    "Other",
)
"""``result`` values of ``backstop_reoptimization_runs_total`` (``status.reoptimization``)."""
ERROR_KINDS = ("TemporaryError", "PermanentError", "ApiException", "PlannerError", "Exception")
"""``kind`` values of ``backstop_reconcile_errors_total``: the exception's class, or its base."""
FIRST_PLAN_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0)
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

F = TypeVar("F", bound=Callable[..., Any])


class OperatorMetrics:
    """This process's registry and the metrics in it (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        gauge = self._gauge
        self.worst = gauge(
            "topology_worst_recovery_seconds",
            "Worst single-node recovery latency of the recorded plan (failure-effect model).",
        )
        self.bound = gauge(
            "topology_recovery_bound_seconds",
            "The bound the plan is checked against (recoveryLatencyBound minus detectionSeconds "
            "and restartSeconds).",
        )
        self.bound_ok = gauge(
            "topology_bound_satisfied", "1 when the recorded plan keeps the bound, else 0."
        )
        self.backups = gauge("topology_backups", "Tasks keeping an upstream backup.")
        self.nodes = gauge("topology_nodes_used", "Nodes the plan places tasks on.")
        self.tasks = gauge("topology_tasks", "Tasks of the topology.")
        self.lost = gauge(
            "recovery_tasks_lost", "Tasks lost with a node and not yet given a new one."
        )
        self.queries_down = gauge(
            "recovery_queries_down", "Queries (output tasks) with a lost task upstream."
        )
        self.active = gauge(
            "recovery_session_active", "1 while a node-loss recovery session runs, else 0."
        )
        self.steps = self._counter(
            "recovery_steps",
            "Recovery steps issued (one RecoveryPlan each).",
            (*TOPOLOGY, "trigger"),
        )
        self.first_plan = self._histogram(
            "recovery_first_plan_seconds",
            "Seconds from a node's loss to the first RecoveryPlan recovering its tasks.",
            (*TOPOLOGY, "since"),
            FIRST_PLAN_BUCKETS,
        )
        self.reopt_runs = self._counter(
            "reoptimization_runs",
            "Re-optimization runs recorded in status.reoptimization.",
            (*TOPOLOGY, "result"),
        )
        self.duration = self._histogram(
            "reconcile_duration_seconds",
            "Seconds per handler call (reconcile) or supervision round (supervise).",
            ("handler",),
            RECONCILE_BUCKETS,
        )
        self.errors = self._counter(
            "reconcile_errors",
            "Handler calls and supervision rounds that ended in an exception.",
            ("handler", "kind"),
        )
        self.leader = Gauge(
            "backstop_leader",
            "1 in the replica that runs the handlers (holds the Lease), 0 in a standby.",
            registry=self.registry,
        )
        self._reopt_seen: dict[tuple[str, str], str | None] = {}

    def _gauge(self, name: str, doc: str) -> Gauge:
        """A per-topology gauge ``backstop_<name>``."""
        return Gauge(f"backstop_{name}", doc, TOPOLOGY, registry=self.registry)

    def _counter(self, name: str, doc: str, labels: tuple[str, ...]) -> Counter:
        """A counter ``backstop_<name>_total``."""
        return Counter(f"backstop_{name}", doc, labels, registry=self.registry)

    def _histogram(
        self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> Histogram:
        """A histogram ``backstop_<name>``."""
        return Histogram(f"backstop_{name}", doc, labels, buckets=buckets, registry=self.registry)

    # ------------------------------------------------------------------ updates
    def observe_plan(self, namespace: str, name: str, plan: PlanStatus) -> None:
        """The plan summary's gauges (set by the reconcile when it records a plan)."""
        labels = (namespace, name)
        for gauge, value in (
            (self.worst, plan.worst_recovery_latency),
            (self.bound, plan.bound),
            (self.backups, plan.backup_count),
            (self.nodes, plan.nodes_used),
            (self.tasks, plan.tasks),
        ):
            if value is not None:
                gauge.labels(*labels).set(float(value))
        if plan.bound_satisfied is not None:
            self.bound_ok.labels(*labels).set(1.0 if plan.bound_satisfied else 0.0)

    def observe_status(
        self, namespace: str, name: str, status: TopologyStatus, *, queries_down: int
    ) -> None:
        """Every gauge from the status a supervision round ends with (plan, recovery), and
        a re-optimization run each time ``status.reoptimization.lastRun`` changes."""
        if status.plan is not None and status.plan.assignment is not None:
            self.observe_plan(namespace, name, status.plan)
        rec = status.recovery_or_empty
        self.lost.labels(namespace, name).set(len(rec.failed))
        self.queries_down.labels(namespace, name).set(queries_down)
        self.active.labels(namespace, name).set(1.0 if rec.active else 0.0)
        self._observe_reopt(namespace, name, status)

    def _observe_reopt(self, namespace: str, name: str, status: TopologyStatus) -> None:
        reopt = status.reoptimization
        run = None if reopt is None or reopt.running else reopt.last_run
        key = (namespace, name)
        if key not in self._reopt_seen:  # this process's first look: a baseline, not a run
            self._reopt_seen[key] = run
            return
        if run is None or run == self._reopt_seen[key]:
            return
        self._reopt_seen[key] = run
        result = reopt.result if reopt is not None else None
        self.reopt_runs.labels(
            namespace, name, result if result in REOPT_RESULTS else "Other"
        ).inc()

    def observe_decision(
        self,
        namespace: str,
        name: str,
        before: TopologyStatus,
        decision: Decision,
        nodes: Mapping[str, NodeInfo],
        grace: float,
        now: float,
    ) -> None:
        """A recovery Decision that was written: its step, and for each node whose tasks
        get their first RecoveryPlan now, the time since the node was lost."""
        if decision.issued is None:
            return
        self.steps.labels(namespace, name, decision.trigger).inc()
        for delay in first_plan_delays(before, decision, nodes, grace, now):
            self.first_plan.labels(namespace, name, delay.since).observe(delay.seconds)

    @contextlib.contextmanager
    def timed(self, handler: str) -> Iterator[None]:
        """Time a handler call or supervision round; count it as an error if it raises."""
        start = time.perf_counter()
        try:
            yield
        except BaseException as err:
            self.errors.labels(handler, error_kind(err)).inc()
            raise
        finally:
            self.duration.labels(handler).observe(time.perf_counter() - start)

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of a topology (it was deleted)."""
        labels = (namespace, name)
        for gauge in (self.worst, self.bound, self.bound_ok, self.backups, self.nodes):
            _remove(gauge, labels)
        for gauge in (self.tasks, self.lost, self.queries_down, self.active):
            _remove(gauge, labels)
        for trigger in TRIGGERS:
            _remove(self.steps, (*labels, trigger))
        for since in SINCE:
            _remove(self.first_plan, (*labels, since))
        for result in REOPT_RESULTS:
            _remove(self.reopt_runs, (*labels, result))
        self._reopt_seen.pop(labels, None)

    # ------------------------------------------------------------------ reading
    def exposition(self) -> str:
        """The text a scrape of ``/metrics`` returns."""
        return prometheus_client.generate_latest(self.registry).decode()

    def value(self, sample: str, **labels: str) -> float | None:
        """One sample's value (``None`` when the series does not exist), for tests and docs."""
        found = self.registry.get_sample_value(sample, labels)
        return None if found is None else float(found)

    def names(self) -> set[str]:
        """Every sample name this registry can export (``_total``, ``_bucket``, ... included)."""
        out: set[str] = set()
        for family in self.registry.collect():
            out.add(family.name)
            out.update(s.name for s in family.samples)
            suffixes = {"counter": ("_total", "_created"), "histogram": HISTOGRAM_SUFFIXES}
            out.update(family.name + s for s in suffixes.get(family.type, ()))
        return out


HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def _remove(metric: Gauge | Counter | Histogram, labels: tuple[str, ...]) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


def error_kind(err: BaseException) -> str:
    """The ``kind`` label of an exception: its class or the first known base, by name.

    Examples
    --------
    >>> from planners import Infeasible
    >>> error_kind(Infeasible("no")), error_kind(KeyError("x"))
    ('PlannerError', 'Exception')
    """
    for cls in type(err).__mro__:
        if cls.__name__ in ERROR_KINDS:
            return cls.__name__
    return "Exception"


@dataclass(frozen=True)
class Delay:
    """Seconds from one lost node to the first RecoveryPlan for its tasks."""

    node: str
    since: str
    seconds: float


def first_plan_delays(
    before: TopologyStatus,
    decision: Decision,
    nodes: Mapping[str, NodeInfo],
    grace: float,
    now: float,
) -> list[Delay]:
    """The delays a written Decision ends: one per lost node whose tasks get their first
    RecoveryPlan with this step, measured from :data:`SINCE` (a deleted node, which has
    no Ready condition any more, from when the operator counted it lost).

    A node is new to this step unless the previous step (``before``) already listed it
    in ``lostNodes`` and it was not lost again since (detected more than a second after).

    Examples
    --------
    >>> from backstop.domain.status import StepRecord, parse_status
    >>> step = StepRecord(step=1, trigger="NodeLost", lost_nodes=["n1"])
    >>> after = parse_status({"recovery": {"lost": {"n1": 140.0}}}).status
    >>> d = Decision(status=after, trigger="NodeLost", issued=step)
    >>> n1 = NodeInfo("n1", ready=False, since=100.0, cpu=4, schedulable=False, cordoned=False)
    >>> [(x.since, x.seconds) for x in first_plan_delays(after, d, {"n1": n1}, 30, 141.5)]
    [('not_ready', 41.5), ('grace_expiry', 11.5)]
    """
    issued = decision.issued
    if issued is None:
        return []
    prev = before.recovery_or_empty.last_step
    covered = set(prev.lost_nodes or []) if prev is not None else set()
    prev_at = _epoch(prev.at) if prev is not None and prev.at else 0.0
    lost_at = decision.status.recovery_or_empty.lost
    out: list[Delay] = []
    for node in sorted(issued.lost_nodes or []):
        if node in covered and lost_at.get(node, 0.0) <= prev_at + 1.0:
            continue
        info = nodes.get(node)
        if info is not None and not info.ready and info.since > 0:
            starts = {"not_ready": info.since, "grace_expiry": info.since + grace}
        elif node in lost_at:
            starts = dict.fromkeys(SINCE, lost_at[node])
        else:
            continue
        out.extend(Delay(node, s, max(0.0, now - starts[s])) for s in SINCE)
    return out


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def instrumented(handler: str) -> Callable[[F], F]:
    """Time a Kopf handler with its memo's metrics (:meth:`OperatorMetrics.timed`).

    Put it below the ``kopf.on`` decorators: Kopf passes ``memo`` by keyword.
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            with kwargs["memo"].metrics.timed(handler):
                return fn(*args, **kwargs)

        return cast(F, call)

    return wrap


def serve(metrics: OperatorMetrics, port: int, host: str = "0.0.0.0") -> tuple[WSGIServer, Thread]:
    """Serve ``/metrics`` (prometheus-client's own server) in a daemon thread."""
    return prometheus_client.start_http_server(port, addr=host, registry=metrics.registry)
