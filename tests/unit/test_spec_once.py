"""A StreamTopology holds its spec once: the status and Kopf's diff base name it by hash.

The reconcile runs as Kopf runs it, against a client whose API calls are mocks: what it
writes to the status does not grow with the spec (an operator's ``config`` of any size),
the spec the plan was made for goes to the spec ConfigMap, and a status written by an
older operator (with its copy in ``status.plan.spec``) resumes its plan unchanged. Kopf's
diff base, as the operator's own settings build it, keeps a digest of the spec: its
annotation does not grow with the spec either, and a spec change is still an update.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any
from unittest import mock

import kopf
import pytest
from kopf._cogs.structs import bodies, diffs
from kopf._core.intents import causes
from kubernetes import client

from backstop.controller import daemon, handlers, metrics
from backstop.controller import memo as topology_memo
from backstop.controller import reconcile as reconciling
from backstop.controller.kopf_config import apply_kopf_settings
from backstop.domain.incidents import node_info
from backstop.domain.spec import spec_hash
from backstop.domain.status import parse_status
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.specstore import build_spec_configmap, stored_spec
from backstop.k8s.topologyobjects import Owner

NS = "team"
GROUP = "streams.backstop.dev"


def real_creations(kube: Any) -> int:
    """Pods created for real (a new spec's server-side dry runs are not pods)."""
    calls = kube.core.create_namespaced_pod.call_args_list
    return len([c for c in calls if not c.kwargs.get("dry_run")])


def topology_spec(config_bytes: int) -> dict[str, Any]:
    """Two operators of two tasks; the sink's ``config`` takes ``config_bytes``."""
    return {
        "image": "registry.example/t:1",
        "recoveryLatencyBound": 10,
        "store": {"objectStore": {"bucket": "state", "secretRef": {"name": "s3"}}},
        "operators": [
            {"name": "src", "parallelism": 2, "resources": {"cpu": "500m"},
             "reprocessingLatency": 1},
            {"name": "sink", "parallelism": 2, "resources": {"cpu": "500m"},
             "reprocessingLatency": 1, "inputs": [{"operator": "src"}],
             "config": {"table": "x" * config_bytes}},
        ],
    }  # fmt: skip


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch) -> Kube:
    k = Kube(client.ApiClient())
    k.core = mock.MagicMock(spec=client.CoreV1Api)
    k.core.read_namespaced_secret.return_value = client.V1Secret(data={"token": "dG9r"})
    k.custom = mock.MagicMock(spec=client.CustomObjectsApi)
    monkeypatch.setattr(handlers, "kube", lambda: k)
    monkeypatch.setattr(handlers, "post_event", lambda *a, **kw: None)
    return k


def run(spec: dict[str, Any], status: dict[str, Any], generation: int = 1) -> None:
    ledger = CapacityLedger()
    ledger.replace_pods([])
    meta = {"name": "t", "namespace": NS, "uid": "u1", "generation": generation}
    nodes = [node("a"), node("b")]
    reconcile: Any = handlers.reconcile  # Kopf passes these by keyword
    reconcile(
        body={"metadata": meta, "spec": spec, "status": status}, spec=spec, meta=meta,
        status=status, name="t", namespace=NS, patch=kopf.Patch(), logger=logging.getLogger("t"),
        memo=kopf.Memo(ledger=ledger, metrics=metrics.OperatorMetrics()),
        node_index={n["metadata"]["name"]: [node_info(n)] for n in nodes},
        pods_by_topology={},
    )  # fmt: skip


def status_writes(k: Kube) -> list[dict[str, Any]]:
    calls = k.custom.patch_namespaced_custom_object_status.call_args_list
    return [c.args[-1]["status"] for c in calls]


def stored_configmaps(k: Kube) -> list[dict[str, Any]]:
    """The ConfigMaps written (all created: the mocked patch answers nothing found)."""
    calls = k.core.create_namespaced_config_map.call_args_list
    return [c.args[1] for c in calls]


def first_plan(k: Kube, spec: dict[str, Any]) -> dict[str, Any]:
    k.core.patch_namespaced_config_map.side_effect = client.ApiException(status=404)
    run(spec, {})
    (written,) = [w for w in status_writes(k) if "plan" in w]
    return written


def test_the_recorded_plan_does_not_grow_with_the_spec(kube: Kube) -> None:
    small = first_plan(kube, topology_spec(10))
    kube.custom.patch_namespaced_custom_object_status.reset_mock()
    large = first_plan(kube, topology_spec(200_000))
    assert "spec" not in large["plan"]
    assert large["plan"]["specHash"] == spec_hash(topology_spec(200_000))
    # the same plan for either spec: only the hash differs, in as many bytes
    assert len(json.dumps(large)) == len(json.dumps(small))
    assert large["plan"]["assignment"] == small["plan"]["assignment"]


def test_the_spec_of_a_new_plan_is_stored_before_the_plan(kube: Kube) -> None:
    spec = topology_spec(1000)
    order: list[str] = []
    kube.core.create_namespaced_config_map.side_effect = lambda *a, **kw: order.append("cm")
    kube.custom.patch_namespaced_custom_object_status.side_effect = lambda *a, **kw: order.append(
        "status"
    )
    written = first_plan(kube, spec)
    assert order[:2] == ["cm", "status"]
    (cm,) = stored_configmaps(kube)
    assert cm["metadata"]["name"] == "t-spec"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert stored_spec(cm["data"], written["plan"]["specHash"]) == spec


def test_an_old_status_with_its_copy_of_the_spec_resumes_the_same_plan(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = topology_spec(1000)
    written = first_plan(kube, spec)
    old = copy.deepcopy(written)
    old["plan"]["spec"] = spec  # as an older operator wrote it
    kube.core.reset_mock()
    kube.custom.reset_mock()

    def no_planning(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a resume plans nothing")

    monkeypatch.setattr(reconciling, "plan_topology", no_planning)
    run(spec, old)
    assert kube.core.delete_namespaced_pod.call_count == 0
    (patch,) = [w for w in status_writes(kube) if "plan" in w]
    assert patch["plan"] == {"spec": None}  # the copy goes; the plan stays as it was
    (cm,) = stored_configmaps(kube)  # after it is stored on its own
    assert stored_spec(cm["data"], old["plan"]["specHash"]) == spec


def stored_for_reads(k: Kube) -> None:
    """Reads of the spec ConfigMap answer what was written to it."""
    (cm,) = stored_configmaps(k)
    k.core.read_namespaced_config_map.return_value = client.V1ConfigMap(data=cm["data"])


def test_a_changed_spec_is_planned_anew(kube: Kube) -> None:
    written = first_plan(kube, topology_spec(10))
    stored_for_reads(kube)
    kube.custom.reset_mock()
    edited = topology_spec(10)
    edited["operators"][1]["resources"]["cpu"] = "900m"
    run(edited, written, generation=2)
    (patch,) = [w for w in status_writes(kube) if "plan" in w]
    assert patch["plan"]["generation"] == 2
    assert patch["plan"]["specHash"] == spec_hash(edited) != written["plan"]["specHash"]


def test_more_tasks_for_a_topology_that_has_run_are_refused_and_its_plan_kept(
    kube: Kube,
) -> None:
    """The new task would ask for rounds trimmed long ago (``backstop.domain.wiring``)."""
    written = first_plan(kube, topology_spec(10))
    stored_for_reads(kube)
    kube.custom.reset_mock()
    edited = topology_spec(10)
    edited["operators"][1]["parallelism"] = 3
    before_pods = kube.core.create_namespaced_pod.call_count
    run(edited, written, generation=2)
    writes = status_writes(kube)
    assert not [w for w in writes if w.get("plan")], "no new plan"
    (problem,) = [w["problem"] for w in writes if w.get("problem")]
    assert problem["reason"] == "InvalidSpec" and problem["generation"] == 2
    assert problem["message"].startswith("spec.operators[1].parallelism: sink runs 2 tasks, not 3")
    assert kube.core.create_namespaced_pod.call_count == before_pods


def test_a_refused_spec_configmap_costs_only_the_fallback(kube: Kube) -> None:
    """A quota on ConfigMaps (403) leaves the plan recorded and run; a hiccup is retried."""
    kube.core.create_namespaced_config_map.side_effect = client.ApiException(status=403)
    written = first_plan(kube, topology_spec(10))
    assert len(written["plan"]["assignment"]) == 4
    assert real_creations(kube) == 4
    kube.custom.reset_mock()
    kube.core.create_namespaced_config_map.side_effect = client.ApiException(status=500)
    with pytest.raises(kopf.TemporaryError, match="cannot store the spec"):
        first_plan(kube, topology_spec(10))
    assert status_writes(kube) == []  # no plan without its spec stored


# ---- the supervisor's last good spec ------------------------------------------------------


def status_of(plan: dict[str, Any], rejected: int) -> Any:
    raw = {"plan": plan, "problem": {"reason": "InvalidSpec", "generation": rejected}}
    return parse_status(raw).status


def test_a_rejected_edit_follows_the_spec_the_configmap_holds_for_the_plan() -> None:
    good = topology_spec(10)
    cm = build_spec_configmap(Owner("t", NS, "u1"), good, spec_hash(good))
    k = mock.MagicMock()
    k.configmap_data.return_value = cm["data"]
    plan = {"generation": 1, "assignment": {}, "specHash": spec_hash(good)}
    bad = {"operators": "not a list"}
    mem = topology_memo.TopologyMemo()
    read = daemon._plan_spec(k, NS, "t")
    target = daemon._target(mem, 2, bad, status_of(plan, 2), read)
    assert target is not None
    model, graph, followed, fallback = target
    assert (followed, fallback, len(graph)) == (1, True, 4)
    assert model.image == "registry.example/t:1"
    k.configmap_data.assert_called_once_with(NS, "t-spec")
    daemon._target(mem, 2, bad, status_of(plan, 2), read)  # the model is kept
    assert k.configmap_data.call_count == 1


def test_a_configmap_of_another_spec_is_no_last_good_plan() -> None:
    good, other = topology_spec(10), topology_spec(20)
    k = mock.MagicMock()
    k.configmap_data.return_value = build_spec_configmap(
        Owner("t", NS, "u1"), other, spec_hash(other)
    )["data"]
    plan = {"generation": 1, "assignment": {}, "specHash": spec_hash(good)}
    read = daemon._plan_spec(k, NS, "t")
    mem = topology_memo.TopologyMemo()
    assert daemon._target(mem, 2, {"operators": 1}, status_of(plan, 2), read) is None


def test_an_old_status_is_followed_from_its_own_copy() -> None:
    good = topology_spec(10)
    k = mock.MagicMock()
    plan = {"generation": 1, "assignment": {}, "specHash": spec_hash(good), "spec": good}
    read = daemon._plan_spec(k, NS, "t")
    target = daemon._target(topology_memo.TopologyMemo(), 2, {}, status_of(plan, 2), read)
    assert target is not None and target[2:] == (1, True)
    assert k.configmap_data.call_count == 0


# ---- Kopf's diff base ---------------------------------------------------------------------


def storage() -> Any:
    settings = kopf.OperatorSettings()
    apply_kopf_settings(settings)
    return settings.persistence.diffbase_storage


def body(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> bodies.Body:
    meta = {"name": "t", "namespace": NS, "annotations": dict(annotations or {})}
    raw = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "StreamTopology", "metadata": meta,
           "spec": spec, "status": {"plan": {"generation": 1}}}  # fmt: skip
    return bodies.Body(raw)  # type: ignore[arg-type]


def handled(b: bodies.Body) -> dict[str, str]:
    """The annotations Kopf writes once ``b`` is handled."""
    patch = kopf.Patch()
    s = storage()
    s.store(body=b, patch=patch, essence=s.build(body=b))
    return dict(patch["metadata"]["annotations"])


def cause_of(stored: dict[str, str], now: bodies.Body) -> causes.Reason:
    """What Kopf makes of ``now`` given the annotations it stored (on its first sight)."""
    b = body(dict(now["spec"]), {**now["metadata"]["annotations"], **stored})
    s = storage()
    old, new = s.fetch(body=b), s.build(body=b)
    event: Any = {"type": "MODIFIED", "object": dict(b)}
    cause = causes.detect_changing_cause(
        finalizer="f", raw_event=event, body=b,
        old=old, new=new, diff=diffs.diff(old, new), initial=True, logger=logging.getLogger("t"),
        resource=None, patch=kopf.Patch(), memo=kopf.Memo(), indices=None,
    )  # fmt: skip
    return cause.reason


def test_kopf_keeps_a_digest_of_the_spec_not_a_copy() -> None:
    small = handled(body(topology_spec(10)))
    large = handled(body(topology_spec(200_000)))
    key = f"{GROUP}/last-handled-configuration"
    assert len(large[key]) == len(small[key]) < 200
    assert "registry.example" not in large[key]


def test_kopf_sees_a_spec_change_as_an_update_and_no_change_as_a_resume() -> None:
    spec = topology_spec(10)
    stored = handled(body(spec, {"team/owner": "a"}))
    assert cause_of(stored, body(spec, {"team/owner": "a"})) == causes.Reason.RESUME
    edited = copy.deepcopy(spec)
    edited["operators"][1]["config"]["table"] += "y"  # deep in an operator's config
    assert cause_of(stored, body(edited, {"team/owner": "a"})) == causes.Reason.UPDATE
    # an annotation's change is still seen whole (a handler of one annotation reads it)
    assert cause_of(stored, body(spec, {"team/owner": "b"})) == causes.Reason.UPDATE


def test_a_diff_base_an_older_operator_stored_whole_resumes() -> None:
    spec = topology_spec(10)
    b = body(spec, {"team/owner": "a"})
    whole = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    patch = kopf.Patch()
    whole.store(body=b, patch=patch, essence=whole.build(body=b))
    stored = dict(patch["metadata"]["annotations"])
    assert "registry.example" in stored[f"{GROUP}/last-handled-configuration"]
    assert cause_of(stored, b) == causes.Reason.RESUME
