"""The largest objects the operator writes, at the largest topologies the spec admits.

The limits are Kubernetes': a ConfigMap's data holds at most 1 MiB
(https://kubernetes.io/docs/concepts/configuration/configmap/), and etcd refuses a request
over 1.5 MiB (``--max-request-bytes`` default 1572864,
https://etcd.io/docs/v3.5/dev-guide/limit/). ``tests/unit/test_object_sizes.py`` asserts
the objects built from these scenarios stay under them; ``bench/bench_object_sizes.py``
prints their sizes and build times for ``docs/scale.md``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from backstop.domain.spec import StreamTopologySpec, expand, parse_spec
from backstop.domain.status import (
    PlanStatus,
    RecoveryStatus,
    RolloutStatus,
    StepRecord,
    TopologyStatus,
)
from backstop.k8s.manifests import Owner
from planners import TaskGraph

__all__ = [
    "CONFIGMAP_DATA_MAX",
    "ETCD_REQUEST_MAX",
    "OWNER",
    "chains",
    "gke_node",
    "managed_fields",
    "mid_recovery_status",
    "session",
    "shuffle",
    "stored_size",
]

CONFIGMAP_DATA_MAX = 1024 * 1024  # 1 MiB, kubernetes.io (above)
ETCD_REQUEST_MAX = 1572864  # 1.5 MiB, etcd's --max-request-bytes default (above)
OWNER = Owner("t", "ns", "uid")


def _spec(operators: list[dict[str, Any]]) -> StreamTopologySpec:
    return parse_spec({"image": "x", "recoveryLatencyBound": 100, "operators": operators})


def shuffle(p: int, q: int) -> StreamTopologySpec:
    """``map`` of ``p`` tasks read by ``reduce`` of ``q`` tasks, every edge (shuffle)."""
    return _spec(
        [
            {"name": "map", "parallelism": p, "reprocessingLatency": 0.5},
            {"name": "reduce", "parallelism": q, "reprocessingLatency": 0.5,
             "inputs": [{"operator": "map", "grouping": "shuffle"}]},
        ]
    )  # fmt: skip


def chains(ops: int, par: int) -> StreamTopologySpec:
    """``ops`` operators of ``par`` tasks, each reading the one before (forward)."""
    out: list[dict[str, Any]] = [{"name": "op0", "parallelism": par, "reprocessingLatency": 1}]
    for k in range(1, ops):
        out.append(
            {"name": f"op{k}", "parallelism": par, "reprocessingLatency": 1,
             "inputs": [{"operator": f"op{k - 1}", "grouping": "forward"}]}
        )  # fmt: skip
    return _spec(out)


def session(
    graph: TaskGraph, failed: list[str], recovered: list[str], pending: list[str]
) -> dict[str, Any]:
    """A recovery session's record as the session ConfigMap is built from (40 lost nodes)."""
    return {
        "session": "s1795646076",
        "active": True,
        "step": 3,
        "startedAt": "2026-11-26T12:00:00Z",
        "lost": {f"ip-10-0-{i}-1.eu-west-1.compute.internal": 1.0 for i in range(40)},
        "sessionFailed": failed,
        "recovered": recovered,
        "failed": pending,
    }


def gke_node(i: int) -> str:
    """A node name as long as GKE's."""
    return f"gke-prod-cluster-default-pool-{i:08x}-x7k9"  # 43 characters, as GKE names them


def managed_fields(obj: Any) -> Any:
    """The ``fieldsV1`` the API server records for an object written by one manager: every
    key of every map (``f:<key>``); a list (atomic in a schemaless status) is one entry."""
    return {f"f:{k}": managed_fields(v) if isinstance(v, dict) else {} for k, v in obj.items()}


def stored_size(status: dict[str, Any]) -> int:
    """What etcd stores of a status: its JSON plus the ``managedFields`` entry per map key."""
    return len(json.dumps(status, separators=(",", ":"))) + len(
        json.dumps(managed_fields(status), separators=(",", ":"))
    )


@functools.cache  # frozen models: built once for the tests that read it
def mid_recovery_status() -> TopologyStatus:
    """10,000 tasks on 400 nodes, placed scattered (no run of tasks shares a node); half
    the nodes lost (5,000 tasks), half of those recovered, the rest pending; an image
    rollout was under way (every task's old node recorded)."""
    spec = chains(10, 1000)
    tasks = list(expand(spec).tasks)
    nodes = 400
    before = {t: gke_node((i * 7919) % nodes) for i, t in enumerate(tasks)}
    lost = {gke_node(i) for i in range(0, nodes, 2)}
    failed = [t for t in tasks if before[t] in lost]
    recovered, pending = failed[::2], failed[1::2]
    moved = {t: gke_node(1 + 2 * (i % (nodes // 2))) for i, t in enumerate(recovered)}
    assignment = {t: moved.get(t, n) for t, n in before.items() if t not in set(pending)}
    backups = [t for t in tasks if t.split("-")[0] in ("op1", "op4", "op7")]
    return TopologyStatus(
        plan=PlanStatus(
            generation=3, algorithm="joint", tasks=len(tasks), backup_count=len(backups),
            backups=backups, nodes_used=nodes, worst_recovery_latency=3.5, bound=4.0,
            bound_satisfied=True, assignment=assignment,
            worst_by_node={gke_node(i): 3.5 for i in range(nodes)},
            epochs=dict.fromkeys(recovered, 1), spec=spec.model_dump(by_alias=True, mode="json"),
        ),
        recovery=RecoveryStatus(
            session="s1795646076", started_at="2026-11-26T12:00:00Z", step=3, failed=pending,
            session_failed=failed, recovered=recovered, lost=dict.fromkeys(sorted(lost), 1.0),
            lost_history=dict.fromkeys(sorted(lost), 1.0), active=True,
            seen_ready=[gke_node(i) for i in range(1, nodes, 2)],
            last_step=StepRecord(step=3, trigger="NodeReady", recover=moved, pending=pending),
        ),
        rollout=RolloutStatus(
            generation=3, active=True, pending=tasks[5000:], batch=tasks[4990:5000],
            old_assignment=before, old_backups=backups,
        ),
    )  # fmt: skip
