"""A lost task without a replica, on the capacity ledger: placed at once when there is room,
and as soon as room frees up when there is none.

The word count of the replicated real-node test (``tests/realnodes/test_runtime_real_zz_
bound_open.py``): 7 tasks of 200m, all primaries on node ``a``, replicas of 5 of them on
``b`` and ``c`` (2 CPU each, utilization cap 0.8). ``a`` is lost: the 5 replicas are
promoted in place and ``count-1`` and ``sink-0`` must be placed. The supervisor's decision
(:func:`backstop.controller.supervisor._decide`) reads the ledger, which counts every pod:
the replicas once each, and here also the pods of another topology that fill ``b`` and
``c`` until they go. A session that waits then tried again only every
:data:`~backstop.domain.recovery.RETRY_SECONDS` (10 s) or when a node turned Ready, so
the two tasks waited up to 10 s more after the room was there.
"""

from __future__ import annotations

from typing import Any

from backstop.controller import supervisor
from backstop.controller.tick import Tick, planned_pods
from backstop.domain.constants import ANN_NODE
from backstop.domain.incidents import NodeInfo
from backstop.domain.recovery import RETRY_SECONDS
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import PlanStatus, TopologyStatus
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.manifests import Owner

OP = {"resources": {"cpu": "200m", "memory": "128Mi"}, "reprocessingLatency": 0.5}
SPEC = {
    "image": "i",
    "recoveryLatencyBound": 38.0,
    "recovery": {"gracePeriodSeconds": 2, "utilizationCap": 0.8},
    "replication": {"spareCpu": "4"},
    "operators": [
        {"name": "source", "parallelism": 2, **OP},
        {"name": "tokenize", "parallelism": 2, "inputs": [{"operator": "source"}], **OP},
        {"name": "count", "parallelism": 2,
         "inputs": [{"operator": "tokenize", "grouping": "key"}], **OP},
        {"name": "sink", "parallelism": 1,
         "inputs": [{"operator": "count", "grouping": "global"}], **OP},
    ],
}  # fmt: skip
REPLICAS = {
    "source-0": ["c"],
    "source-1": ["b"],
    "tokenize-0": ["c"],
    "tokenize-1": ["b"],
    "count-0": ["c"],
}
GiB = 2.0**30


def node(name: str, ready: bool = True, since: float = 0.0) -> NodeInfo:
    return NodeInfo(name, ready, since, 2.0, ready, False, memory=8 * GiB, pods=110)


def running(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod of ``manifest`` as the pod feed sees it: bound to its planned node."""
    where = manifest["metadata"]["annotations"][ANN_NODE]
    return {**manifest, "spec": {**manifest["spec"], "nodeName": where},
            "status": {"phase": "Running"}}  # fmt: skip


def other_pod(name: str, where: str, cpu: str) -> dict[str, Any]:
    """A pod of another workload (no topology label) on ``where``."""
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
    return {
        "metadata": {"namespace": "other", "name": name},
        "spec": {"nodeName": where, "containers": [container]},
        "status": {"phase": "Running"},
    }


def replicated_on_a(ledger: CapacityLedger) -> Tick:
    """Every primary on ``a``, :data:`REPLICAS` on ``b`` and ``c``, their pods running."""
    model = parse_spec(SPEC)
    graph = expand(model)
    plan = PlanStatus(
        generation=1,
        assignment=dict.fromkeys(graph.tasks, "a"),
        backups=list(graph.tasks),
        replicas=REPLICAS,
        bound=38.0,
    )
    t = Tick(
        kube=None,  # type: ignore[arg-type]
        owner=Owner("wc", "ns", "uid"),
        model=model,
        graph=graph,
        generation=1,
        status=TopologyStatus(plan=plan),
        nodes={n: node(n) for n in "abc"},
        emit=lambda *_: None,
        ledger=ledger,
    )
    ledger.replace_pods([running(p) for p in planned_pods(t, plan).values()])
    t.nodes = {"a": node("a", False, since=90.0), "b": node("b"), "c": node("c")}
    return t


def test_a_lost_task_without_a_replica_is_placed_in_the_first_decision() -> None:
    """The promoted replicas already run where they are promoted: counted once, they leave
    room for ``count-1`` and ``sink-0`` on ``b`` and ``c`` (1.6 CPU each under the cap)."""
    t = replicated_on_a(CapacityLedger())
    decision = supervisor._decide(t, now=100.0)
    assert decision is not None and decision.issued is not None
    assert set(decision.issued.recover) == {"count-1", "sink-0"}
    assert set(decision.issued.recover.values()) <= {"b", "c"}
    plan = decision.status.plan
    assert plan is not None and set(plan.promoted or {}) == set(REPLICAS)


def test_a_waiting_session_tries_again_as_soon_as_capacity_frees() -> None:
    """Another workload fills ``b`` and ``c`` to the cap: the first decision waits. One
    second later its pods are gone, and the next tick places the two tasks, 9 s before
    the periodic retry would have."""
    ledger = CapacityLedger()
    t = replicated_on_a(ledger)
    others = [other_pod("x-b", "b", "1200m"), other_pod("x-c", "c", "1000m")]
    for pod in others:
        ledger.observe(pod)
    first = supervisor._decide(t, now=100.0)
    assert first is not None and first.issued is None
    rec = first.status.recovery
    assert rec is not None and rec.active and set(rec.failed) == {"count-1", "sink-0"}
    t.status = first.status
    assert supervisor._decide(t, now=100.5) is None  # nothing changed: nothing to decide
    for pod in others:
        ledger.forget(("other", pod["metadata"]["name"]))
    assert RETRY_SECONDS > 1.0, "here the periodic retry must not be due yet"
    again = supervisor._decide(t, now=101.0)
    assert again is not None and again.issued is not None, "waited for the periodic retry"
    assert again.trigger == "Retry"
    assert set(again.issued.recover) == {"count-1", "sink-0"}
    rec = again.status.recovery
    assert rec is not None and not rec.active and not rec.failed
