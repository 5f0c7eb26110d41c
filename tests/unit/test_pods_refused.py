"""Task pods the namespace refuses are seen: a condition, a Warning Event, a backoff.

A pod creation the API server answers with 403 Forbidden (Pod Security admission, a
ResourceQuota, a missing ServiceAccount) is no spec error and no API hiccup: only a
change of the namespace helps. The reconcile handler runs here as Kopf runs it, against
a client whose API calls are mocks answering as a real API server does (a ``Status``
body), and the status it writes is merged as the API server merges it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from unittest import mock

import kopf
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.controller import handlers, metrics, supervisor
from backstop.controller.tick import Tick
from backstop.domain.constants import LABEL_OPERATOR
from backstop.domain.incidents import node_info
from backstop.domain.spec import expand, parse_spec
from backstop.domain.status import TopologyStatus, parse_status, with_changes
from backstop.k8s.apierrors import PodRefused, pod_refusal
from backstop.k8s.kubeio import Kube
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.manifests import Owner

NS = "team"
SPEC: dict[str, Any] = {
    "image": "registry.example/t:1",
    "recoveryLatencyBound": 10,
    "store": {"objectStore": {"bucket": "state", "secretRef": {"name": "s3"}}},
    "operators": [
        {"name": "src", "parallelism": 2, "resources": {"cpu": "500m"}, "reprocessingLatency": 1},
        {
            "name": "sink",
            "parallelism": 2,
            "resources": {"cpu": "500m"},
            "reprocessingLatency": 1,
            "inputs": [{"operator": "src"}],
        },
    ],
}
QUOTA = (
    'pods "t--src-0" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, '
    "used: requests.cpu=2, limited: requests.cpu=2"
)
PSA = (
    'pods "t--src-0" is forbidden: violates PodSecurity "restricted:latest": '
    'allowPrivilegeEscalation != false (container "task" must set '
    "securityContext.allowPrivilegeEscalation=false)"
)


class Response:
    """The urllib3 response the client's ``ApiException`` reads (status, reason, body)."""

    def __init__(self, status: int, reason: str, body: dict[str, Any]) -> None:
        self.status, self.reason, self.data = status, reason, json.dumps(body).encode()
        self.headers = {"Content-Type": "application/json"}

    def getheaders(self) -> dict[str, str]:
        return self.headers


def api_error(code: int, reason: str, message: str, kind: str = "pods") -> ApiException:
    """An ``ApiException`` as the client raises it for a ``Status`` answer."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": "t--src-0", "kind": kind},
        "code": code,
    }
    return ApiException(http_resp=Response(code, reason, body))


def merged(old: Any, patch: Any) -> Any:
    """``patch`` applied to ``old`` as a JSON merge patch (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(old) if isinstance(old, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


class Cluster:
    """The mocked API server: pod creations answered by ``answer``, server-side dry runs by
    ``dry_answer`` (a refusal between the dry run and the creation, or of a spec planned
    before, is refused at creation only); the status kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kube = Kube(client.ApiClient())
        self.kube.core = mock.MagicMock(spec=client.CoreV1Api)
        self.kube.core.read_namespaced_secret.return_value = client.V1Secret(data={"token": "dG9r"})
        self.kube.custom = mock.MagicMock(spec=client.CustomObjectsApi)
        self.status: dict[str, Any] = {}
        self.version = 1
        self.events: list[tuple[str, str, bool]] = []
        self.answer: ApiException | None = None
        self.dry_answer: ApiException | None = None
        self.kube.custom.patch_namespaced_custom_object_status.side_effect = self._patch
        self.kube.core.create_namespaced_pod.side_effect = self._create
        self.ledger = CapacityLedger()
        self.ledger.replace_pods([])
        monkeypatch.setattr(handlers, "kube", lambda: self.kube)
        monkeypatch.setattr(handlers, "post_event", self._event)

    def _patch(self, *args: Any) -> dict[str, Any]:
        self.status = merged(self.status, args[-1]["status"])
        self.version += 1
        return {"status": self.status, "metadata": {"resourceVersion": str(self.version)}}

    def _create(self, namespace: str, manifest: dict[str, Any], **kwargs: Any) -> Any:
        answer = self.dry_answer if kwargs.get("dry_run") else self.answer
        if answer is not None:
            raise answer
        return mock.MagicMock()

    def _event(self, body: Any, reason: str, message: str, *, warning: bool) -> None:
        self.events.append((reason, message, warning))

    def reconcile(self, spec: dict[str, Any] = SPEC) -> kopf.Patch:
        meta = {"name": "t", "namespace": NS, "uid": "u1", "generation": 1}
        nodes = [node("a"), node("b")]
        patch = kopf.Patch()
        status = json.loads(json.dumps(self.status))
        reconcile: Any = handlers.reconcile  # Kopf passes these by keyword
        reconcile(
            body={"metadata": meta, "spec": spec, "status": status}, spec=spec, meta=meta,
            status=status, name="t", namespace=NS, patch=patch, logger=logging.getLogger("t"),
            memo=kopf.Memo(ledger=self.ledger, metrics=metrics.OperatorMetrics()),
            node_index={n["metadata"]["name"]: [node_info(n)] for n in nodes},
            pods_by_topology={},
        )  # fmt: skip
        self.status = merged(self.status, dict(patch.status))
        return patch

    def ready(self) -> dict[str, Any]:
        found: dict[str, Any] = next(c for c in self.status["conditions"] if c["type"] == "Ready")
        return found


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_refused_pod_is_a_condition_an_event_and_a_backoff_until_pods_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster(monkeypatch)
    cluster.answer = api_error(403, "Forbidden", QUOTA)
    before = time.time()
    with pytest.raises(kopf.TemporaryError) as first:
        cluster.reconcile()
    after = time.time()
    assert first.value.delay == 5
    refused = cluster.status["podsRefused"]
    assert (refused["code"], refused["reason"], refused["attempts"]) == (403, "Forbidden", 1)
    assert refused["message"] == QUOTA and refused["since"]
    assert before + 5 - 0.001 <= refused["retryAt"] <= after + 5 + 0.001  # the supervisor's too
    ready = cluster.ready()
    assert (ready["status"], ready["reason"]) == ("False", "PodsRefused")
    assert QUOTA in ready["message"]
    assert cluster.status["plan"]["generation"] == 1  # the plan itself stays recorded
    assert [(r, w) for r, _, w in cluster.events if r == "PodsRefused"] == [("PodsRefused", True)]
    assert QUOTA in next(m for r, m, _ in cluster.events if r == "PodsRefused")

    with pytest.raises(kopf.TemporaryError) as second:  # still refused: a longer delay
        cluster.reconcile()
    assert second.value.delay == 10
    assert cluster.status["podsRefused"]["attempts"] == 2
    assert cluster.status["podsRefused"]["since"] == refused["since"]
    assert len([r for r, _, _ in cluster.events if r == "PodsRefused"]) == 1  # nothing new

    cluster.answer = api_error(403, "Forbidden", PSA)  # another refusal: a new Event
    with pytest.raises(kopf.TemporaryError):
        cluster.reconcile()
    assert [m for r, m, _ in cluster.events if r == "PodsRefused"][-1].endswith(PSA)

    cluster.answer = None  # the namespace is fixed: the pods are created, the refusal goes
    cluster.reconcile()
    assert "podsRefused" not in cluster.status
    assert cluster.ready()["reason"] != "PodsRefused"


def test_an_api_hiccup_is_no_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(monkeypatch)
    cluster.answer = api_error(500, "InternalError", "etcdserver: request timed out")
    with pytest.raises(kopf.TemporaryError) as err:
        cluster.reconcile()
    assert err.value.delay == 2
    assert "podsRefused" not in cluster.status
    assert not [r for r, _, _ in cluster.events if r == "PodsRefused"]


def test_a_template_the_namespace_refuses_in_the_dry_run_is_no_invalid_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster(monkeypatch)
    cluster.answer = cluster.dry_answer = api_error(403, "Forbidden", PSA)
    spec = {**SPEC, "podTemplate": {"metadata": {"labels": {"team": "a"}}}}
    with pytest.raises(kopf.TemporaryError):
        cluster.reconcile(spec)
    dry_runs = [c for c in cluster.kube.core.create_namespaced_pod.call_args_list if c.kwargs]
    assert dry_runs and dry_runs[0].kwargs.get("dry_run") == "All"
    assert "problem" not in cluster.status
    assert cluster.status["podsRefused"]["message"] == PSA
    assert [r for r, _, _ in cluster.events] == ["PodsRefused"]


def test_which_errors_of_a_pod_creation_are_refusals() -> None:
    sa = 'pods "t--src-0" is forbidden: error looking up service account team/runner: ' + (
        'serviceaccount "runner" not found'
    )
    forbidden = pod_refusal(api_error(403, "Forbidden", sa))
    assert isinstance(forbidden, PodRefused) and forbidden.message == sa
    assert forbidden.status == 403
    missing_sa = api_error(404, "NotFound", 'serviceaccounts "runner" not found', "serviceaccounts")
    assert pod_refusal(missing_sa) is not None
    gone = api_error(404, "NotFound", 'namespaces "team" not found', "namespaces")
    assert pod_refusal(gone) is None
    assert pod_refusal(api_error(422, "Invalid", "spec.containers: Required value")) is None
    assert pod_refusal(api_error(409, "AlreadyExists", 'pods "t--src-0" already exists')) is None


def test_the_supervisor_creates_no_pod_before_the_next_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervise daemon converges the same recorded plan every second: while the
    refusal holds it leaves the creations to the reconcile's next attempt."""
    cluster = Cluster(monkeypatch)
    cluster.answer = api_error(403, "Forbidden", QUOTA)
    with pytest.raises(kopf.TemporaryError):
        cluster.reconcile()
    status = parse_status(cluster.status).status
    model = parse_spec(SPEC)
    created: list[int] = []

    written: list[dict[str, Any]] = []

    class Pods:
        def apply_pod_diff(self, namespace: str, diff: Any) -> tuple[int, int]:
            created.append(len(diff.create))
            return 0, len(diff.create)

        def patch_status_returning(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            written.append(args[-1])
            return {"status": merged(cluster.status, args[-1]), "metadata": {}}

    def tick(status: TopologyStatus) -> Tick:
        return Tick(
            kube=Pods(),  # type: ignore[arg-type]
            owner=Owner("t", NS, "u1"), model=model, graph=expand(model), generation=1,
            status=status, nodes={n: node_info(node(n)) for n in ("a", "b")},
            emit=lambda *a: None, ledger=cluster.ledger, resource_version="1",
        )  # fmt: skip

    supervisor.converge(tick(status), [], force_nodes=set())
    assert created == [0] and written == []  # refused: the next attempt is seconds away
    refused = status.pods_refused
    assert refused is not None
    due = refused.model_copy(update={"retry_at": time.time() - 1})
    supervisor.converge(tick(with_changes(status, pods_refused=due)), [], force_nodes=set())
    assert created == [0, 4]  # due: the plan's four pods
    assert [w.get("podsRefused", "kept") for w in written] == [None]  # and the record goes


def test_a_new_spec_has_one_pod_of_every_operator_tried_before_any_pod_is_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ServiceAccount the namespace lacks (no pod template anywhere) is refused by the dry
    run: the condition and the Event come before any real pod creation was tried."""
    cluster = Cluster(monkeypatch)
    missing = 'pods "t--src-0" is forbidden: error looking up service account team/runner'
    cluster.answer = cluster.dry_answer = api_error(403, "Forbidden", missing)
    with pytest.raises(kopf.TemporaryError):
        cluster.reconcile({**SPEC, "serviceAccountName": "runner"})
    calls = cluster.kube.core.create_namespaced_pod.call_args_list
    assert calls and all(c.kwargs.get("dry_run") == "All" for c in calls)
    assert cluster.status["podsRefused"]["message"] == missing
    assert [r for r, _, _ in cluster.events] == ["PodsRefused"]

    cluster.answer = cluster.dry_answer = None  # the ServiceAccount exists: one dry run each
    cluster.kube.core.create_namespaced_pod.reset_mock()
    cluster.reconcile({**SPEC, "serviceAccountName": "runner"})
    calls = cluster.kube.core.create_namespaced_pod.call_args_list
    tried = [c.args[1]["metadata"]["labels"] for c in calls if c.kwargs.get("dry_run")]
    real = [c for c in calls if not c.kwargs.get("dry_run")]
    assert sorted(t[LABEL_OPERATOR] for t in tried) == ["sink", "src"]
    assert len(real) == 4  # two tasks of each operator

    cluster.kube.core.create_namespaced_pod.reset_mock()  # the same spec again: no dry run
    cluster.reconcile({**SPEC, "serviceAccountName": "runner"})
    assert not [
        c for c in cluster.kube.core.create_namespaced_pod.call_args_list if c.kwargs.get("dry_run")
    ]


def test_an_api_hiccup_in_the_dry_run_is_retried_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(monkeypatch)
    cluster.dry_answer = api_error(500, "InternalError", "etcdserver: request timed out")
    with pytest.raises(kopf.TemporaryError) as err:
        cluster.reconcile()
    assert err.value.delay == 2
    assert "problem" not in cluster.status and "podsRefused" not in cluster.status
    assert not cluster.events


def supervise_round(cluster: Cluster) -> None:
    """One round of the supervise daemon on the cluster's status, its pods all gone (lost
    with a node, evicted by a drain, replaced by a rollout step: the round recreates them)."""
    model = parse_spec(SPEC)
    t = Tick(
        kube=cluster.kube, owner=Owner("t", NS, "u1"), model=model, graph=expand(model),
        generation=1, status=parse_status(cluster.status).status,
        nodes={n: node_info(node(n)) for n in ("a", "b")},
        emit=lambda *event: cluster.events.append(event), ledger=cluster.ledger,
        resource_version=str(cluster.version),
    )  # fmt: skip
    supervisor.supervise_once(t, lambda: [])


def test_a_pod_the_supervisor_is_refused_is_a_condition_and_an_event_until_pods_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervise daemon, not the reconcile, recreates the pods of a recovery, a drain
    or a rollout: a refusal there is recorded as the reconcile records it."""
    cluster = Cluster(monkeypatch)
    cluster.reconcile()  # the plan recorded, its pods created
    assert "podsRefused" not in cluster.status
    create = cluster.kube.core.create_namespaced_pod
    cluster.answer = api_error(403, "Forbidden", QUOTA)
    before = time.time()
    supervise_round(cluster)  # no exception: the round records the refusal
    refused = cluster.status["podsRefused"]
    assert (refused["code"], refused["reason"], refused["attempts"]) == (403, "Forbidden", 1)
    assert refused["message"] == QUOTA and refused["since"]
    assert before + 5 - 0.001 <= refused["retryAt"] <= time.time() + 5 + 0.001
    ready = cluster.ready()
    assert (ready["status"], ready["reason"]) == ("False", "PodsRefused")
    assert QUOTA in ready["message"]
    warnings = [(m, w) for r, m, w in cluster.events if r == "PodsRefused"]
    assert len(warnings) == 1 and warnings[0][1] is True and QUOTA in warnings[0][0]

    tried = create.call_count  # the next round, before the next attempt: no creation
    supervise_round(cluster)
    assert create.call_count == tried
    assert len([r for r, _, _ in cluster.events if r == "PodsRefused"]) == 1

    cluster.status["podsRefused"]["retryAt"] = time.time() - 1  # due, and another refusal
    cluster.answer = api_error(403, "Forbidden", PSA)
    supervise_round(cluster)
    assert create.call_count > tried
    assert cluster.status["podsRefused"]["attempts"] == 2
    assert cluster.status["podsRefused"]["since"] == refused["since"]
    assert cluster.status["podsRefused"]["retryAt"] >= time.time() + 10 - 1  # doubled
    assert PSA in cluster.ready()["message"]
    messages = [m for r, m, _ in cluster.events if r == "PodsRefused"]
    assert len(messages) == 2 and messages[-1].endswith(PSA)

    cluster.status["podsRefused"]["retryAt"] = time.time() - 1  # the namespace is fixed
    cluster.answer = None
    supervise_round(cluster)
    assert "podsRefused" not in cluster.status
    assert cluster.ready()["reason"] != "PodsRefused"
    assert len([r for r, _, _ in cluster.events if r == "PodsRefused"]) == 2
