"""The pod index keeps a slim record of each task pod, to keep the operator's RSS small.

:func:`backstop.k8s.podrecord.slim_pod` keeps only what the operator reads. Checked two
ways: every reader of the index (the tick, the pod diff, fencing, the rollout, the pod
faults, the readiness probe, capacity) answers the same on the slim record as on the
whole pod, for pods in every state the readers tell apart; and what no reader reads
(``managedFields``, the image, env, probes, volumes, other domains' annotations, ...)
is gone. The pods are the operator's own manifests (``desired_pods``) given what the
API server adds, written out here by hand.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import pytest

from backstop.controller import handlers
from backstop.controller.tick import pod_states, pods_match, running_primaries
from backstop.domain import lifecycle
from backstop.domain.fencing import fenced_tasks
from backstop.domain.incidents import NodeInfo
from backstop.domain.planning import current_assignment, diff_pods
from backstop.domain.podfaults import is_terminal, lost_tasks, unschedulable_since
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import pod_state
from backstop.k8s import taskprobe
from backstop.k8s.ledger import pod_owner, pod_place, pod_requests
from backstop.k8s.manifests import Owner, desired_pods
from backstop.k8s.podrecord import slim_pod

OWNER = Owner("wc", "team", "uid-wc")
SPEC = {
    "image": "registry.example/t:1",
    "recoveryLatencyBound": 10,
    "operators": [
        {"name": "src", "parallelism": 4, "resources": {"cpu": "250m", "memory": "64Mi"},
         "reprocessingLatency": 1},
        {"name": "sink", "parallelism": 4, "resources": {"cpu": "500m"}, "reprocessingLatency": 1,
         "inputs": [{"operator": "src", "grouping": "forward"}]},
    ],
}  # fmt: skip
PLACE = {"src-0": "n1", "src-1": "n1", "src-2": "n2", "src-3": "n2",
         "sink-0": "n1", "sink-1": "n2", "sink-2": "n3", "sink-3": "n3"}  # fmt: skip


def _server(manifest: dict[str, Any], status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """``manifest`` as the API server returns it, with ``status``."""
    pod = copy.deepcopy(manifest)
    pod["metadata"].update(
        uid="u-" + pod["metadata"]["name"],
        resourceVersion="812",
        creationTimestamp="2026-11-26T12:00:00Z",
        managedFields=[{"manager": "backstop", "operation": "Update", "fieldsV1": {}}],
        **meta,
    )
    pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    pod["metadata"]["labels"]["team"] = "analytics"
    pod["spec"].update(schedulerName="default-scheduler", restartPolicy="Always")
    for c in pod["spec"]["containers"]:  # a template's own metrics port (not the default)
        for port in c.get("ports") or []:
            if port["name"] == "metrics":
                port["containerPort"] = 9393
    pod["status"] = {"qosClass": "Burstable", "hostIP": "10.0.0.2", **status}
    return pod


def _running(ready: bool) -> dict[str, Any]:
    return {
        "phase": "Running",
        "podIP": "10.89.1.7",
        "startTime": "2026-11-26T12:00:01Z",
        "conditions": [{"type": "Ready", "status": str(ready), "lastProbeTime": None}],
        "containerStatuses": [
            {"name": "task", "ready": ready, "restartCount": 0, "image": "registry.example/t:1",
             "imageID": "sha256:00", "containerID": "containerd://1",
             "state": {"running": {"startedAt": "2026-11-26T12:00:02Z"}}, "lastState": {}},
        ],
    }  # fmt: skip


def cluster() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """``(desired manifests, the pods as the server has them)``: one pod per state the
    readers tell apart (running, unready, crash-looping, unschedulable, evicted, being
    deleted, ended after a checkpoint, on a lost node with a backup flag)."""
    model = parse_spec(SPEC)
    graph = expand(model)
    desired = desired_pods(OWNER, model, graph, frozenset({"src-2"}), PLACE)
    by_task = {m["metadata"]["labels"]["streams.backstop.dev/task"]: m for m in desired.values()}
    crash = _running(False)
    crash["containerStatuses"][0].update(
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        lastState={"terminated": {"exitCode": 2, "reason": "Error",
                                  "message": "error: config: bad window"}},
    )  # fmt: skip
    checkpoint = {
        "phase": "Succeeded",
        "containerStatuses": [{"name": "task", "ready": False, "restartCount": 0,
                               "image": "i", "imageID": "", "state": {"terminated": {
                                   "exitCode": 0, "reason": "Completed",
                                   "message": "backstop-checkpoint round=40 at=1764150000.5"}}}],
    }  # fmt: skip
    unschedulable = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/3 nodes are available",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }  # fmt: skip
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    pods = [
        _server(by_task["src-0"], _running(True), deletionTimestamp=None),
        _server(by_task["src-1"], _running(False)),
        _server(by_task["src-2"], _running(True)),  # keeps a backup; its node is lost
        _server(by_task["src-3"], crash),
        _server(by_task["sink-0"], _running(True), deletionTimestamp="2026-11-26T12:05:00Z"),
        _server(by_task["sink-1"], evicted),
        _server(by_task["sink-2"], unschedulable),
        _server(by_task["sink-3"], checkpoint),
    ]
    for pod in pods:
        if pod["status"]["phase"] != "Pending":
            pod["spec"]["nodeName"] = pod["metadata"]["annotations"][
                "streams.backstop.dev/planned-node"
            ]
    pods[1]["metadata"]["annotations"]["streams.backstop.dev/spec-hash"] = "stale"
    return desired, pods


NODES = {
    "n1": NodeInfo("n1", ready=True, since=0, cpu=4, schedulable=True, cordoned=False),
    "n2": NodeInfo("n2", ready=False, since=0, cpu=4, schedulable=False, cordoned=False),
    "n3": NodeInfo("n3", ready=True, since=0, cpu=4, schedulable=True, cordoned=False),
}
NOW = 1767225600.0 + 600

Reader = Callable[[dict[str, dict[str, Any]], list[Mapping[str, Any]]], Any]
READERS: dict[str, Reader] = {
    "pods_match": lambda d, p: pods_match(d, p),
    "pod_states": lambda d, p: pod_states(p),
    "pod_state": lambda d, p: [pod_state(x) for x in p],
    "running_primaries": lambda d, p: running_primaries(p),
    "unready_address": lambda d, p: [taskprobe.unready_address(x) for x in p],
    "diff_pods": lambda d, p: diff_pods(d, p, {"n2"}),
    "current_assignment": lambda d, p: current_assignment(p),
    "fenced_tasks": lambda d, p: fenced_tasks(p, d, {"n2"}),
    "replaced_tasks": lambda d, p: lifecycle.replaced_tasks(d, p, diff_pods(d, p).delete),
    "pod_backups": lambda d, p: lifecycle.pod_backups(p),
    "hold_pending": lambda d, p: lifecycle.hold_pending(
        diff_pods(d, p), p, {"src-1", "src-3"}, {"n1", "n2"}
    ),
    "new_pods": lambda d, p: lifecycle.new_pods(d, p),
    "checkpoint_report": lambda d, p: [lifecycle.checkpoint_report(x) for x in p],
    "lost_tasks": lambda d, p: lost_tasks(p, PLACE, NODES, now=NOW),
    "is_terminal": lambda d, p: [is_terminal(x) for x in p],
    "unschedulable_since": lambda d, p: [unschedulable_since(x) for x in p],
    "ledger": lambda d, p: [(pod_place(x), pod_requests(x), pod_owner(x)) for x in p],
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_answers_the_same_on_the_slim_record(reader: str) -> None:
    desired, pods = cluster()
    slim: list[Mapping[str, Any]] = [slim_pod(p) for p in pods]
    assert READERS[reader](desired, slim) == READERS[reader](desired, list(pods))


def test_the_readers_see_what_each_pod_state_means() -> None:
    """What the readers must find in the slim records, derived from the pods above."""
    desired, pods = cluster()
    slim: list[Mapping[str, Any]] = [slim_pod(p) for p in pods]
    names = [p["metadata"]["name"] for p in pods]
    assert taskprobe.unready_address(slim[1]) == "http://10.89.1.7:9393/ready"
    assert [s.failure is not None for s in pod_states(slim)] == [
        False, False, False, True, False, False, False, False,
    ]  # fmt: skip
    assert "exit 2" in str(pod_states(slim)[3].failure)
    assert lifecycle.checkpoint_report(slim[7]) == "round=40 at=1764150000.5"
    assert lost_tasks(slim, PLACE, NODES, now=NOW) == {
        "sink-2": "Unschedulable on n3 for 600s: 0/3 nodes are available"
    }
    assert lifecycle.pod_backups(slim) == {"src-2"}
    assert fenced_tasks(slim, desired, {"n2"}) == {"src-2", "src-3", "sink-1"}
    diff = diff_pods(desired, slim, {"n2"})
    assert diff.terminating == [names[4]]
    assert names[1] in diff.delete and names[5] in diff.force and names[7] in diff.force
    assert pod_requests(slim[0]).cpu == 0.25 and pod_requests(slim[0]).memory == 64 * 2**20
    assert pod_owner(slim[0]) == "team/wc"


def test_what_no_reader_reads_is_not_kept() -> None:
    _, pods = cluster()
    for pod in pods:
        slim = slim_pod(pod)
        text = json.dumps(slim)
        meta, spec = slim["metadata"], slim["spec"]
        assert "managedFields" not in meta and "uid" not in meta
        assert "creationTimestamp" not in meta
        assert set(meta["labels"]) == {
            f"streams.backstop.dev/{k}" for k in ("topology", "operator", "task", "role")
        }  # the user's "team" label is gone
        assert all(k.startswith("streams.backstop.dev/") for k in meta["annotations"])
        assert set(spec) <= {"nodeName", "containers"}
        for c in spec["containers"]:
            assert set(c) <= {"name", "resources", "ports", "env"}
            assert [e["name"] for e in c.get("env", [])] in ([], ["BACKSTOP_UPSTREAM_BACKUP"])
            # the peer map's address (data) and push (metrics)
            assert [p["name"] for p in c.get("ports", [])] in ([], ["data", "metrics"])
        for gone in ("image", "qosClass", "hostIP", "startTime", "schedulerName",
                     "lastProbeTime", "containerID", "registry.example"):  # fmt: skip
            assert gone not in text, gone
        assert len(text) < len(json.dumps(pod)) / 3


def test_the_pod_index_keeps_the_slim_record() -> None:
    _, pods = cluster()
    body = kopf.Body(pods[0])  # type: ignore[arg-type]
    fn: Any = handlers.pods_by_topology
    index = asyncio.run(fn(namespace="team", labels=body.metadata.labels, body=body))
    assert index == {("team", "wc"): slim_pod(pods[0])}
