"""Pod templates: the Flink-style merge, the operator's fields winning, what is refused,
and which tainted nodes a topology may use."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from backstop.domain.constants import ANN_HASH
from backstop.domain.incidents import NodeInfo, for_topology, node_info, topology_tolerations
from backstop.domain.pinning import hashed_pod_spec
from backstop.domain.podmerge import build_pod_spec, merge, taints_tolerated, tolerates
from backstop.domain.spec import StreamTopologySpec, expand, parse_spec, parse_topology
from backstop.k8s import manifests
from backstop.k8s.manifests import Owner, TaskRole, build_task_pod, desired_pods
from planners import InvalidTopology

OWNER = Owner("topo", "ns", "uid-1")
SECRET_ENV = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}


def spec_doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "image": "img",
        "recoveryLatencyBound": 2,
        "operators": [
            {"name": "src", "reprocessingLatency": 1, "resources": {"cpu": "250m"}},
            {
                "name": "sink",
                "reprocessingLatency": 1,
                "resources": {"cpu": "500m", "memory": "256Mi"},
                "inputs": [{"operator": "src"}],
            },
        ],
    }
    doc.update(extra)
    return doc


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "task"}], **spec}}


TOPOLOGY_TEMPLATE = {
    "metadata": {"labels": {"team": "streams"}, "annotations": {"owner": "a@b"}},
    "spec": {
        "serviceAccountName": "reader",
        "securityContext": {"fsGroup": 2000},
        "imagePullSecrets": [{"name": "registry"}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streams"}],
        "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}],
        "containers": [
            {
                "name": "task",
                "env": [SECRET_ENV, {"name": "GREETING", "value": "hello"}],
                "envFrom": [{"configMapRef": {"name": "common"}}],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True}],
                "resources": {"limits": {"memory": "512Mi"}},
            },
            {
                "name": "log-shipper",
                "image": "fluent-bit:3",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
            },
        ],
    },
}
SINK_TEMPLATE = {
    "metadata": {"labels": {"tier": "out"}},
    "spec": {
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "task", "env": [{"name": "GREETING", "value": "bye"}]}],
    },
}


def templated() -> StreamTopologySpec:
    doc = spec_doc(podTemplate=TOPOLOGY_TEMPLATE)
    doc["operators"][1]["podTemplate"] = SINK_TEMPLATE
    return parse_spec(doc)


def pod_of(spec: StreamTopologySpec, operator: str, node: str = "n1") -> dict[str, Any]:
    return build_task_pod(OWNER, spec, TaskRole(f"{operator}-0", operator, 0, (), False, node))


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ------------------------------------------------------------------ the merge into pods
def test_templates_reach_every_pod_and_the_operators_template_wins() -> None:
    spec = templated()
    src, sink = pod_of(spec, "src"), pod_of(spec, "sink")
    for pod in (src, sink):
        task = pod["spec"]["containers"][0]
        assert [c["name"] for c in pod["spec"]["containers"]] == ["task", "log-shipper"]
        assert env_of(task)["TOKEN"] == SECRET_ENV["valueFrom"]
        assert task["envFrom"] == [{"configMapRef": {"name": "common"}}]
        assert {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True} in task["volumeMounts"]
        assert {"name": "cfg", "configMap": {"name": "settings"}} in pod["spec"]["volumes"]
        assert pod["spec"]["serviceAccountName"] == "reader"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
        # the restricted defaults stay, the template's fsGroup is added to them
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["fsGroup"] == 2000
        assert task["resources"]["limits"] == {"memory": "512Mi"}
        assert pod["metadata"]["labels"]["team"] == "streams"
        assert pod["metadata"]["annotations"]["owner"] == "a@b"
    assert env_of(src["spec"]["containers"][0])["GREETING"] == "hello"
    assert env_of(sink["spec"]["containers"][0])["GREETING"] == "bye"
    assert sink["metadata"]["labels"]["tier"] == "out" and "tier" not in src["metadata"]["labels"]
    # tolerations are joined: the topology's and the operator's
    assert sink["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "streams"},
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert src["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "streams"}
    ]


def test_the_operators_fields_win_and_come_first() -> None:
    plain = pod_of(parse_spec(spec_doc()), "sink")
    pod = pod_of(templated(), "sink")
    task, bare = pod["spec"]["containers"][0], plain["spec"]["containers"][0]
    assert task["image"] == bare["image"] == "img"
    assert task["resources"]["requests"] == bare["resources"]["requests"]
    names = [e["name"] for e in task["env"]]
    backstop = [e["name"] for e in bare["env"]]
    assert names[: len(backstop)] == backstop, "BACKSTOP_* first: $(BACKSTOP_...) may be used"
    assert task["env"][: len(backstop)] == bare["env"]
    assert task["ports"] == bare["ports"]
    assert pod["spec"]["affinity"] == plain["spec"]["affinity"]
    assert pod["spec"]["restartPolicy"] == "Always"
    for key, value in plain["metadata"]["labels"].items():
        assert pod["metadata"]["labels"][key] == value
    assert pod["metadata"]["annotations"]["streams.backstop.dev/planned-node"] == "n1"


def test_a_template_change_restarts_the_pods_and_replicas_get_the_template() -> None:
    spec = templated()
    before = pod_of(spec, "src")["metadata"]["annotations"]["streams.backstop.dev/spec-hash"]
    doc = spec_doc(podTemplate=copy.deepcopy(TOPOLOGY_TEMPLATE))
    doc["podTemplate"]["metadata"]["labels"]["team"] = "other"
    after = pod_of(parse_spec(doc), "src")["metadata"]["annotations"]
    assert after["streams.backstop.dev/spec-hash"] != before
    graph = expand(spec)
    pods = desired_pods(
        OWNER, spec, graph, frozenset(), {t: "n1" for t in graph.tasks}, {"src-0": ["n2"]}
    )
    replica = pods["topo--src-0--r0"]
    assert replica["spec"]["containers"][1]["name"] == "log-shipper"
    assert env_of(replica["spec"]["containers"][0])["TOKEN"] == SECRET_ENV["valueFrom"]


def test_sidecar_requests_count_in_the_tasks_weight() -> None:
    graph = expand(templated())
    assert graph.weight[graph.index("src-0")] == pytest.approx(0.25 + 0.1)
    assert graph.weight[graph.index("sink-0")] == pytest.approx(0.5 + 0.1)
    # an init container larger than the running containers sets the pod's request
    doc = spec_doc(
        podTemplate=template(
            initContainers=[{"name": "fetch", "image": "f", "resources": {"limits": {"cpu": "2"}}}]
        )
    )
    graph = expand(parse_spec(doc))
    assert graph.weight[graph.index("src-0")] == pytest.approx(2.0)


# ------------------------------------------------------------------ refused, naming the field
BAD = [
    (template(containers=[]), "spec.containers: a pod template needs at least one container"),
    ({"spec": {"volumes": []}}, "spec.containers: a pod template needs at least one container"),
    (
        {
            "spec": {
                "containers": [
                    {"name": "task", "env": [{"name": "BACKSTOP_TASK_ID", "value": "x"}]}
                ]
            }
        },
        "env BACKSTOP_TASK_ID is the operator's",
    ),
    (template(nodeSelector={"a": "b"}), "nodeSelector is the operator's: use spec.nodeSelector"),
    (template(affinity={}), "affinity is the operator's"),
    (template(nodeName="n1"), "nodeName is the operator's"),
    (template(restartPolicy="Never"), "restartPolicy is the operator's"),
    (
        {"spec": {"containers": [{"name": "sidecar"}]}},
        "container sidecar: a sidecar needs an image",
    ),
    (
        {"spec": {"containers": [{"name": "task", "image": "x"}]}},
        "container task: image is the operator's",
    ),
    ({"spec": {"containers": [{"name": "task", "command": ["sh"]}]}}, "command is the operator's"),
    (
        {"spec": {"containers": [{"name": "task", "resources": {"requests": {"cpu": "1"}}}]}},
        "resources.requests.cpu is the operator's: use spec.operators[].resources.cpu",
    ),
    (
        {"spec": {"containers": [{"name": "task", "resources": {"limits": {"cpu": "lots"}}}]}},
        "resources.limits.cpu: 'lots' is not a Kubernetes quantity",
    ),
    (template(volumes=[{"name": "store", "emptyDir": {}}]), "volumes: store is the operator's"),
    (template(volumes=[{"name": "v"}]), "volume v: needs exactly one source"),
    (
        template(volumes=[{"name": "v", "emptyDir": {}, "configMap": {"name": "c"}}]),
        "volume v: needs exactly one source",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "task",
                        "volumeMounts": [{"name": "v", "mountPath": "/var/lib/backstop"}],
                    }
                ]
            }
        },
        "volumeMount /var/lib/backstop is the operator's",
    ),
    (
        {
            "spec": {
                "containers": [
                    {"name": "task", "volumeMounts": [{"name": "nowhere", "mountPath": "/data"}]}
                ]
            }
        },
        "volumeMount /data names no volume of the pod (nowhere)",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "task",
                        "env": [
                            {
                                "name": "T",
                                "value": "1",
                                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                            }
                        ],
                    }
                ]
            }
        },
        "env T: set value or valueFrom, not both",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "task",
                        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s"}}}],
                    }
                ]
            }
        },
        "env T: valueFrom.secretKeyRef needs key",
    ),
    (
        template(tolerations=[{"key": "a", "operator": "Exists", "value": "b"}]),
        "a toleration with operator Exists takes no value",
    ),
    (
        template(tolerations=[{"key": "a", "operator": "Sometimes"}]),
        "tolerations[0].operator: Input should be",
    ),
    (
        {"metadata": {"labels": {"streams.backstop.dev/task": "x"}}},
        "labels: streams.backstop.dev/task",
    ),
    (
        {"spec": {"containers": [{"name": "task", "resources": {"limits": {"memory": "64Mi"}}}]}},
        "resources.limits.memory 64Mi is below the memory request 128Mi",
    ),
    (
        {"spec": {"containers": [{"name": "log", "image": "x"}, {"name": "log", "image": "y"}]}},
        "containers: log given twice",
    ),
]


@pytest.mark.parametrize(("bad", "reason"), BAD, ids=[r for _, r in BAD])
@pytest.mark.parametrize("where", ["spec.podTemplate", "spec.operators[0].podTemplate"])
def test_bad_templates_are_refused_naming_the_field(
    bad: dict[str, Any], reason: str, where: str
) -> None:
    doc = spec_doc()
    if where == "spec.podTemplate":
        doc["podTemplate"] = bad
    else:
        doc["operators"][0]["podTemplate"] = bad
    with pytest.raises(InvalidTopology) as err:
        parse_spec(doc)
    message = str(err.value)
    assert reason in message, message
    assert len(message.splitlines()) == 1, message
    located = message.startswith(where) or message.startswith("spec: operators[0].podTemplate")
    assert located, message
    assert "Traceback" not in message


def test_the_runtimes_settings_may_be_set_and_limits_from_resources_win() -> None:
    doc = spec_doc(
        podTemplate={
            "spec": {
                "containers": [
                    {
                        "name": "task",
                        "env": [{"name": "BACKSTOP_LOG_LEVEL", "value": "DEBUG"}],
                        "resources": {"limits": {"cpu": "100m", "memory": "1Gi"}},
                    }
                ]
            }
        }
    )
    doc["operators"][0]["resources"]["cpuLimit"] = "500m"
    doc["operators"][1]["resources"]["cpuLimit"] = "1"
    spec = parse_spec(doc)
    task = pod_of(spec, "src")["spec"]["containers"][0]
    assert env_of(task)["BACKSTOP_LOG_LEVEL"] == "DEBUG"
    assert task["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}


@pytest.mark.parametrize(
    "name", ["BACKSTOP_BUFFER_BYTES", "BACKSTOP_READAHEAD_BYTES", "BACKSTOP_BUFFER_ROUNDS"]
)
def test_a_template_may_bound_the_runtimes_buffers(name: str) -> None:
    env = [{"name": name, "value": "8388608"}]
    spec = parse_spec(
        spec_doc(podTemplate={"spec": {"containers": [{"name": "task", "env": env}]}})
    )
    assert env_of(pod_of(spec, "src")["spec"]["containers"][0])[name] == "8388608"


# ------------------------------------------------------------------ merge properties
scalars = st.one_of(st.integers(), st.text(max_size=3), st.booleans())
names = st.sampled_from(["a", "b", "c", "d"])
named_lists = st.lists(st.fixed_dictionaries({"name": names, "v": scalars}), max_size=4).map(
    lambda items: list({i["name"]: i for i in items}.values())
)
values = st.recursive(
    st.one_of(scalars, named_lists, st.lists(scalars, max_size=3)),
    lambda inner: st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(st.sampled_from(["x", "y", "z", "w"]), values, max_size=4)


@settings(max_examples=50, deadline=None)
@given(objects, objects)
def test_merge_later_wins_and_nothing_is_lost(
    base: dict[str, Any], override: dict[str, Any]
) -> None:
    frozen = copy.deepcopy((base, override))
    merged = merge(base, override)
    assert (base, override) == frozen, "merge changes neither input"
    assert set(merged) == set(base) | set(override)
    for key, value in override.items():
        if not isinstance(value, (dict, list)) or not isinstance(base.get(key), type(value)):
            assert merged[key] == value
    assert merge(merged, override) == merged, "applying the same template twice changes nothing"
    assert merge(base, {}) == base and merge({}, override) == override


@settings(max_examples=50, deadline=None)
@given(named_lists, named_lists)
def test_named_lists_merge_by_name_in_order(base: list[Any], override: list[Any]) -> None:
    merged = merge(base, override)
    first = [i["name"] for i in base]
    assert [i["name"] for i in merged] == first + [
        i["name"] for i in override if i["name"] not in first
    ]
    by_name = {i["name"]: i for i in override}
    for item in merged:
        expected = by_name.get(item["name"]) or next(b for b in base if b["name"] == item["name"])
        assert item["v"] == expected["v"]


# ------------------------------------------------------------------ tainted nodes
def node(*taints: dict[str, str], ready: bool = True) -> NodeInfo:
    return node_info(
        {
            "metadata": {"name": "n"},
            "spec": {"taints": list(taints)},
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


DEDICATED = {"key": "dedicated", "value": "streams", "effect": "NoSchedule"}


def usable(info: NodeInfo, doc: dict[str, Any]) -> bool:
    return for_topology({"n": info}, parse_spec(doc))["n"].schedulable


def test_a_tainted_node_is_usable_only_when_every_operators_pods_tolerate_it() -> None:
    assert not usable(node(DEDICATED), spec_doc()), "untolerated: not usable (as before)"
    assert usable(node(), spec_doc())
    tolerate = [{"key": "dedicated", "operator": "Equal", "value": "streams"}]
    assert usable(node(DEDICATED), spec_doc(podTemplate=template(tolerations=tolerate)))
    # only the sink tolerates it: the planners could put the source there, so not usable
    doc = spec_doc()
    doc["operators"][1]["podTemplate"] = template(tolerations=tolerate)
    assert not usable(node(DEDICATED), doc)
    doc["operators"][0]["podTemplate"] = template(tolerations=tolerate)
    assert usable(node(DEDICATED), doc)
    # a PreferNoSchedule taint never kept a node out
    assert usable(node({"key": "x", "effect": "PreferNoSchedule"}), spec_doc())


def test_node_lost_taints_and_not_ready_nodes_stay_unusable_whatever_is_tolerated() -> None:
    everything = spec_doc(podTemplate=template(tolerations=[{"operator": "Exists"}]))
    assert usable(node(DEDICATED, {"key": "other", "effect": "NoExecute"}), everything)
    for key in ("not-ready", "unreachable", "unschedulable", "memory-pressure"):
        taint = {"key": f"node.kubernetes.io/{key}", "effect": "NoExecute"}
        assert not usable(node(taint), everything), key
    assert not usable(node(DEDICATED, ready=False), everything)
    # a NoExecute toleration with tolerationSeconds only delays the eviction
    delayed = [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    assert not usable(
        node({"key": "k", "effect": "NoExecute"}),
        spec_doc(podTemplate=template(tolerations=delayed)),
    )


taints = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["a", "b", "node.kubernetes.io/unreachable"]),
        "value": st.sampled_from(["", "1"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    }
)
tolerations = st.fixed_dictionaries(
    {"operator": st.sampled_from(["Exists", "Equal"])},
    optional={
        "key": st.sampled_from(["a", "b"]),
        "value": st.sampled_from(["", "1"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    },
).filter(lambda t: t.get("key") or t["operator"] == "Exists")


@settings(max_examples=50, deadline=None)
@given(
    st.lists(taints, max_size=3),
    st.lists(st.lists(tolerations, max_size=3), min_size=1, max_size=3),
    tolerations,
)
def test_tolerating_more_never_loses_a_node(
    node_taints: list[dict[str, str]], pods: list[list[dict[str, str]]], extra: dict[str, str]
) -> None:
    ok = taints_tolerated(node_taints, pods)
    if ok:  # an extra toleration for any operator keeps the node usable
        assert taints_tolerated(node_taints, [[*pods[0], extra], *pods[1:]])
        hard = [t for t in node_taints if t["effect"] != "PreferNoSchedule"]
        assert all(any(tolerates(t, taint) for t in pod) for pod in pods for taint in hard)
    # one more operator whose pods tolerate nothing: only nodes without hard taints remain
    assert taints_tolerated(node_taints, [*pods, []]) == (
        all(t["effect"] == "PreferNoSchedule" for t in node_taints)
    )


def test_topology_tolerations_are_per_operator() -> None:
    tols = topology_tolerations(templated())
    assert tols[0] == ({"key": "dedicated", "operator": "Equal", "value": "streams"},)
    assert len(tols[1]) == 2


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"store": {"hostPath": {"path": "/srv/b"}}, "serviceAccountName": "tasks"},
        {"nodeSelector": {"pool": "a"}, "automountServiceAccountToken": True},
    ],
)
def test_without_a_template_the_pod_is_what_the_full_merge_makes(extra: dict[str, Any]) -> None:
    """The no-template shortcut of ``build_task_pod`` (the merge is most of the cost of
    building 10k pods) gives the very pod spec, and so the spec-hash, that merging nothing gives:
    running pods are not restarted by an operator upgrade."""
    spec = StreamTopologySpec.model_validate(
        {
            "image": "img",
            "recoveryLatencyBound": 2,
            "operators": [{"name": "src", "reprocessingLatency": 1, "resources": {"cpu": "1"}}],
            **extra,
        }
    )
    role = TaskRole("src-0", "src", 0, ("x-0",), True, "n1", epoch=2)
    pod = build_task_pod(Owner("t", "ns", "u"), spec, role)
    env = pod["spec"]["containers"][0]["env"]
    base = manifests._base_pod_spec(Owner("t", "ns", "u"), spec, spec.operators[0], role, env)
    merged = build_pod_spec(base, {}, manifests.owned_pod_spec(base))
    assert pod["spec"] == merged
    hashed = hashed_pod_spec(merged, "n1")
    assert pod["metadata"]["annotations"][ANN_HASH] == manifests._hash(hashed)


def test_a_topology_with_env_values_parses_again_from_its_own_dump() -> None:
    """The re-optimization job re-parses the estimated manifest it dumped (Monte Carlo,
    trade-off curve): an env `value` dumps beside the empty default `valueFrom`, which is
    not a second source (a real run on real nodes failed on exactly this)."""
    root = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((root / "examples" / "wordcount.yaml").read_text())
    env = [{"name": "BACKSTOP_METRICS_INTERVAL", "value": "1"}]
    doc["spec"]["podTemplate"] = {"spec": {"containers": [{"name": "task", "env": env}]}}
    dumped = parse_topology(doc).model_dump(mode="json", by_alias=True, exclude_none=True)
    again = parse_topology(dumped)
    assert again.model_dump(mode="json", by_alias=True, exclude_none=True) == dumped
    both = {"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    doc["spec"]["podTemplate"]["spec"]["containers"][0]["env"] = [both]
    with pytest.raises(InvalidTopology, match="set value or valueFrom, not both"):
        parse_topology(doc)
