"""Replicas the plan lacks, added once CPU frees: ``spec.replication`` kept up to date.

The reconcile chooses the active replicas (:func:`backstop.domain.planning.plan_replicas`)
on the CPU free when it plans. Pods of another workload may hold some of it for a while (a
topology deleted a moment before, its pods still terminating), and a task left without a
replica then stayed without one until the spec changed; when its primary's node died, it
was restarted instead of promoted. This tick adds replicas for such tasks as soon as CPU
is free for them, within the ``spareCpu`` the replicas there are leave
(:func:`backstop.domain.planning.more_replicas`), reserving their pods in the capacity
ledger before the plan is written, as every planner does.
"""

from __future__ import annotations

import logging

from backstop.controller.capacity import owner_key, reserve, step_capacity
from backstop.controller.tick import Tick, write_status
from backstop.domain.constants import LABEL_ROLE
from backstop.domain.planning import more_replicas
from backstop.domain.recovery import usable_nodes
from backstop.domain.status import with_changes
from backstop.k8s.ledger import Reading
from backstop.k8s.manifests import desired_pods
from planners.replication import availability

log = logging.getLogger(__name__)


def replica_tick(t: Tick) -> bool:
    """Add replicas for the tasks of the plan in force that have none, where CPU is free
    now; whether the status was written. Only while nothing else moves the plan (no
    recovery, restore or drain) and its pods match it, and only when the free CPU
    differs from the last look (so a cluster without room costs one ledger read)."""
    plan = t.status.plan
    if t.model.replication is None or plan is None or not plan.assignment:
        return False
    st = t.status
    if not plan.recorded_for(t.generation) or t.memory.matched is not True:
        return False
    if st.recovering() or st.restore_or_empty.active or st.drain is not None:
        return False
    usable = usable_nodes(t.model, t.nodes)
    looked = step_capacity(Reading(t.ledger), t.nodes, usable, t.model, cap=1.0)
    if looked == t.memory.replicas_looked:
        return False
    t.memory.replicas_looked = looked
    if not more_replicas(t.model, t.graph, plan.assignment, plan.replicas or {}, looked):
        return False  # none to add (or no room): no booking taken
    with t.ledger.booking() as booking:
        free = step_capacity(booking, t.nodes, usable, t.model, cap=1.0)
        t.memory.replicas_looked = free
        more = more_replicas(t.model, t.graph, plan.assignment, plan.replicas or {}, free)
        if not more:
            return False
        replicas = {**(plan.replicas or {}), **{task: list(ns) for task, ns in more.items()}}
        pool = frozenset(plan.assignment.values()) | frozenset(usable)
        rated = availability(t.graph, plan.assignment, {k: tuple(v) for k, v in replicas.items()},
                             pool)  # fmt: skip
        new_plan = plan.model_copy(
            update={"replicas": replicas, "replicated": sorted(replicas), "availability": rated}
        )
        pods = desired_pods(t.owner, t.model, t.graph, frozenset(plan.backups),
                            plan.assignment, replicas, plan.epochs, only=set(more),
                            promoted=plan.promoted)  # fmt: skip
        # the tasks of ``more`` had no replica: every replica pod of theirs is new
        mine = {n: m for n, m in pods.items() if m["metadata"]["labels"][LABEL_ROLE] == "replica"}
        reserve(booking, t.owner, mine, t.nodes)  # held before the status write
    if not write_status(t, with_changes(t.status, plan=new_plan)):
        t.ledger.release(owner_key(t.owner))  # its pods all ran: only these were held
        t.memory.replicas_looked = None
        return False
    text = ", ".join(f"{task} on {', '.join(ns)}" for task, ns in sorted(more.items()))
    log.info("replicas of %s/%s added where CPU freed: %s", t.owner.namespace, t.owner.name, text)
    t.emit("Planned", f"replicas added on CPU that freed: {text}", False)
    return True
