"""Pure builders and rules of the operator: pods, conditions, merge patches, event reasons."""

from __future__ import annotations

import json
from typing import Any

from backstop.domain.constants import ANN_HASH
from backstop.domain.incidents import NodeInfo, detect_lost, replay_sources, session_mode
from backstop.domain.spec import RecoveryPolicy, StreamTopologySpec
from backstop.domain.status import merge_patch
from backstop.k8s.manifests import Owner, TaskRole, build_task_pod
from planners import TaskGraph

SPEC = StreamTopologySpec.model_validate(
    {
        "image": "img",
        "recoveryLatencyBound": 2,
        "operators": [{"name": "src", "reprocessingLatency": 1, "resources": {"cpu": "250m"}}],
    }
)
OWNER = Owner("topo", "ns", "uid-1")


def role(node: str, backup: bool = False) -> TaskRole:
    return TaskRole("src-0", "src", 0, (), backup, node)


def test_task_pod_is_pinned_owned_labelled_and_told_its_role() -> None:
    pod = build_task_pod(OWNER, SPEC, role("n1", backup=True))
    assert pod["metadata"]["name"] == "topo--src-0"
    term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # the Node's name, never its hostname label (which may differ from the name)
    assert term["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    env = {
        e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]
    }
    assert env["BACKSTOP_UPSTREAM_BACKUP"] == "true" and env["BACKSTOP_TASK_ID"] == "src-0"
    assert env["BACKSTOP_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"


def test_task_pod_carries_the_runtime_contract() -> None:
    spec = StreamTopologySpec.model_validate(
        {
            "image": "img",
            "recoveryLatencyBound": 4,
            "store": {"hostPath": {"path": "/srv/backstop"}},
            "operators": [
                {
                    "name": "src",
                    "parallelism": 2,
                    "reprocessingLatency": 0.5,
                    "config": {"function": "m:Src", "path": "/in", "nested": {"a": [1]}},
                },
                {
                    "name": "count",
                    "parallelism": 3,
                    "reprocessingLatency": 1,
                    "inputs": [{"operator": "src", "grouping": "shuffle"}],
                },
                {
                    "name": "sink",
                    "reprocessingLatency": 1,
                    "inputs": [
                        {"operator": "count", "grouping": "global"},
                        {"operator": "src", "grouping": "broadcast"},
                    ],
                },
            ],
        }
    )
    pod = build_task_pod(OWNER, spec, TaskRole("src-1", "src", 1, (), False, "n1"))
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert json.loads(env["BACKSTOP_CONFIG"]) == {
        "function": "m:Src",
        "path": "/in",
        "nested": {"a": [1]},
    }
    assert json.loads(env["BACKSTOP_DOWNSTREAM"]) == [
        {"operator": "count", "parallelism": 3, "grouping": "shuffle"},
        {"operator": "sink", "parallelism": 1, "grouping": "broadcast"},
    ]
    assert env["BACKSTOP_PARALLELISM"] == "2" and env["BACKSTOP_CHECKPOINT_INTERVAL"] == "1.0"
    # the runtime keys its store state by the topology's namespace and uid, not its name
    assert (env["BACKSTOP_TOPOLOGY"], env["BACKSTOP_NAMESPACE"]) == ("topo", "ns")
    assert env["BACKSTOP_TOPOLOGY_UID"] == "uid-1"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "data": 7077,
        "metrics": 9090,
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["store"] == env["BACKSTOP_STORE"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["store"] == {"name": "store", "hostPath": {"path": "/srv/backstop"}}
    # without a store each pod gets its own scratch directory
    plain = build_task_pod(OWNER, SPEC, role("n1"))
    assert {"name": "store", "emptyDir": {}} in plain["spec"]["volumes"]


def test_spec_hash_changes_with_node_or_role_only() -> None:
    def h(r: TaskRole) -> Any:
        return build_task_pod(OWNER, SPEC, r)["metadata"]["annotations"][ANN_HASH]

    assert h(role("n1")) == h(role("n1"))
    assert h(role("n1")) != h(role("n2"))
    assert h(role("n1")) != h(role("n1", backup=True))


def test_merge_patch_round_trips() -> None:
    old = {"a": {"x": 1, "y": 2}, "b": [1], "c": 3}
    new = {"a": {"x": 1, "z": 4}, "b": [2], "d": 5}
    patch = merge_patch(old, new)

    def apply(target: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
        out = dict(target)
        for k, v in p.items():
            if v is None:
                out.pop(k, None)
            elif isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = apply(out[k], v)
            else:
                out[k] = v
        return out

    assert apply(old, patch) == new


def test_loss_detection_respects_the_grace_period_and_deletion() -> None:
    nodes = {
        "flapped": NodeInfo("flapped", True, 90.0, 4, True, False),
        "down": NodeInfo("down", False, 50.0, 4, False, False),
        "fresh": NodeInfo("fresh", False, 99.0, 4, False, False),
    }
    lost = detect_lost({"flapped", "down", "fresh", "deleted"}, nodes, grace=30, now=100)
    assert lost == {"down", "deleted"}


def test_auto_mode_is_incremental_only_for_correlated_losses() -> None:
    p = RecoveryPolicy(correlated_threshold=2, window_seconds=60)
    assert session_mode(p, {"a": 0}) == "blocking"
    assert session_mode(p, {"a": 0, "b": 100}) == "blocking"
    assert session_mode(p, {"a": 0, "b": 30}) == "incremental"
    assert session_mode(RecoveryPolicy(mode="incremental"), {"a": 0}) == "incremental"


def test_replay_sources_follow_the_failure_effect_model() -> None:
    g = TaskGraph.build(
        ["s", "a", "b", "c"],
        [("s", "a"), ("a", "b"), ("b", "c")],
        latency={"s": 1, "a": 1, "b": 1, "c": 1},
    )
    # a keeps a backup but failed too: the search goes past it to the source log
    assert replay_sources(g, backups=["a"], failed=["a", "b", "c"], task="c") == ["log:s"]
    assert replay_sources(g, backups=["b"], failed=["c"], task="c") == ["b"]


def test_a_plans_pods_share_their_equal_parts_and_are_the_same_pods() -> None:
    """The pods of one plan, kept in the supervisor's memo, share their per-operator parts
    instead of holding equal copies (this keeps the operator's RSS small); each is still
    exactly the pod built on its own (same JSON, same spec-hash), epochs and replicas
    included."""
    from backstop.domain.spec import expand, parse_spec
    from backstop.k8s.manifests import desired_pods, task_roles

    spec = parse_spec({
        "image": "img", "recoveryLatencyBound": 10,
        "operators": [
            {"name": "src", "parallelism": 3, "reprocessingLatency": 1,
             "resources": {"cpu": "250m"}},
            {"name": "sink", "parallelism": 3, "reprocessingLatency": 1,
             "inputs": [{"operator": "src", "grouping": "shuffle"}]},
        ],
    })  # fmt: skip
    graph = expand(spec)
    where = {t: f"n{i % 2}" for i, t in enumerate(graph.tasks)}
    pods = desired_pods(OWNER, spec, graph, frozenset({"src-1"}), where,
                        replicas={"sink-0": ["n1"]}, epochs={"src-2": 3})  # fmt: skip
    alone: dict[str, Any] = {}
    for r in task_roles(graph, frozenset({"src-1"}), where, {"src-2": 3}):
        alone[f"topo--{r.task}"] = build_task_pod(OWNER, spec, r)
    assert len(pods) == 7  # six primaries and one replica
    for name, pod in alone.items():
        assert json.dumps(pods[name], sort_keys=True) == json.dumps(pod, sort_keys=True)
    a, b = pods["topo--src-0"]["spec"], pods["topo--src-2"]["spec"]
    ca, cb = a["containers"][0], b["containers"][0]
    assert ca["env"] is not cb["env"]  # the per-task part is the pod's own
    assert [e for e in cb["env"] if e not in ca["env"]] != []  # task id, index, epoch
    shared_env = [e for e in ca["env"] if any(e is f for f in cb["env"])]
    assert {e["name"] for e in shared_env} >= {"BACKSTOP_DOWNSTREAM", "BACKSTOP_CONFIG"}
    assert ca["resources"] is cb["resources"] and ca["readinessProbe"] is cb["readinessProbe"]
    assert a["affinity"] is b["affinity"]  # both on n0
    assert a["volumes"] is b["volumes"]
    sink = pods["topo--sink-0"]["spec"]["containers"][0]
    assert sink["resources"] is not ca["resources"]  # another operator: its own
