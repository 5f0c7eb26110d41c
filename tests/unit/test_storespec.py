"""``spec.store``: the object-store form, the volume forms, the task pods' store settings, and
the refusal of a store the tasks cannot share (with the single-host escape hatch)."""

from __future__ import annotations

from typing import Any, cast

import kopf
import pytest

from backstop.controller import admission as webhook
from backstop.controller import settings as config
from backstop.controller.settings import Settings
from backstop.domain.admission import admission_problem, node_local_problem
from backstop.domain.spec import StreamTopologySpec, parse_spec
from backstop.k8s.crd import spec_schema
from backstop.k8s.manifests import Owner, TaskRole, build_task_pod
from planners import InvalidTopology

S3 = {
    "endpoint": "http://10.0.0.5:18333",
    "bucket": "backstop",
    "prefix": "prod",
    "region": "us-east-1",
    "secretRef": {"name": "s3-creds"},
}


def spec(store: Any = None, parallelism: int = 2, **extra: Any) -> dict[str, Any]:
    """A two-operator topology (``parallelism`` tasks each) with ``store``, if given."""
    doc: dict[str, Any] = {
        "image": "img",
        "recoveryLatencyBound": 4,
        "operators": [
            {"name": "src", "parallelism": parallelism, "reprocessingLatency": 1},
            {"name": "sink", "reprocessingLatency": 1, "inputs": [{"operator": "src"}]},
        ],
        **extra,
    }
    if store is not None:
        doc["store"] = store
    return doc


def single(store: Any = None, **extra: Any) -> dict[str, Any]:
    """A topology of one task."""
    doc: dict[str, Any] = {
        "image": "img",
        "recoveryLatencyBound": 4,
        "operators": [{"name": "only", "reprocessingLatency": 1}],
        **extra,
    }
    if store is not None:
        doc["store"] = store
    return doc


def pod(store: Any) -> dict[str, Any]:
    model = StreamTopologySpec.model_validate(spec(store))
    return build_task_pod(Owner("t", "ns", "u"), model, TaskRole("src-0", "src", 0, (), False, "n"))


def env_of(p: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in p["spec"]["containers"][0]["env"]}


# ---------------------------------------------------------------- the forms
def test_the_object_store_form_is_accepted_with_its_fields() -> None:
    obj = parse_spec(spec({"objectStore": S3})).store.object_store
    assert obj is not None and obj.location == "s3://backstop/prod"
    assert (obj.endpoint, obj.region) == ("http://10.0.0.5:18333", "us-east-1")
    assert obj.secret_ref is not None and obj.secret_ref.name == "s3-creds"
    assert (obj.secret_ref.access_key_id_key, obj.secret_ref.secret_access_key_key) == (
        "accessKeyId",
        "secretAccessKey",
    )


@pytest.mark.parametrize(
    "legacy",
    [
        {"hostPath": {"path": "/srv/backstop", "type": "Directory"}},
        {"persistentVolumeClaim": {"claimName": "state"}},
        {"nfs": {"server": "nas", "path": "/export"}},
        {"emptyDir": {}},
    ],
)
def test_a_volume_source_at_the_top_level_is_the_volume_form(legacy: dict[str, Any]) -> None:
    top = parse_spec(spec(legacy)).store
    assert top.volume == legacy and top.object_store is None and top.kind() == next(iter(legacy))
    assert pod(legacy)["spec"]["volumes"][1] == {"name": "store", **legacy}
    assert pod({"volume": legacy}) == pod(legacy)


@pytest.mark.parametrize(
    ("store", "field", "word"),
    [
        ({"objectStore": {"prefix": "p"}}, "spec.store.objectStore.bucket: ", "required"),
        ({"objectStore": {"bucket": "Not_A_Bucket"}}, "spec.store.objectStore.bucket: ", "pattern"),
        ({"objectStore": {"bucket": "b12", "prefix": "/lead"}}, "spec.store.objectStore.prefix: ",
         "pattern"),
        ({"objectStore": {"bucket": "b12", "endpoint": "10.0.0.5:18333"}},
         "spec.store.objectStore.endpoint: ", "pattern"),
        ({"objectStore": {"bucket": "b12", "secretRef": {}}},
         "spec.store.objectStore.secretRef.name: ", "required"),
        ({"objectStore": {"bucket": "b12", "acessKey": "x"}}, "spec.store.objectStore.acessKey: ",
         "not permitted"),
        ({"objectStore": {"bucket": "b12"}, "hostPath": {"path": "/x"}}, "spec.store: ",
         "cannot be combined with a volume source at the top level (hostPath)"),
        ({"objectStore": {"bucket": "b12"}, "volume": {"emptyDir": {}}}, "spec.store: ",
         "not both"),
        ({"volume": {"emptyDir": {}, "hostPath": {"path": "/x"}}}, "spec.store: ",
         "one volume source, got emptyDir, hostPath"),
    ],
)  # fmt: skip
def test_a_bad_store_is_refused_naming_the_field(store: Any, field: str, word: str) -> None:
    with pytest.raises(InvalidTopology) as err:
        parse_spec(spec(store))
    line = str(err.value)
    assert line.startswith(field) and word in line, line


# ---------------------------------------------------------------- the task pods
def test_an_object_store_pod_mounts_no_store_and_reads_credentials_from_the_secret() -> None:
    p = pod({"objectStore": S3})
    assert [v["name"] for v in p["spec"]["volumes"]] == ["recovery"]
    mounts = p["spec"]["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/etc/backstop/recovery"]
    env = env_of(p)
    assert env["BACKSTOP_STORE"]["value"] == "s3://backstop/prod"
    assert env["BACKSTOP_S3_ENDPOINT"]["value"] == "http://10.0.0.5:18333"
    assert env["AWS_REGION"]["value"] == "us-east-1"
    for var, key in (("AWS_ACCESS_KEY_ID", "accessKeyId"), ("AWS_SECRET_ACCESS_KEY",
                                                            "secretAccessKey")):  # fmt: skip
        assert "value" not in env[var]
        assert env[var]["valueFrom"] == {"secretKeyRef": {"name": "s3-creds", "key": key}}


def test_the_secrets_key_names_are_configurable_and_optional_settings_stay_unset() -> None:
    ref = {"name": "gcs-hmac", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"}
    env = env_of(pod({"objectStore": {"bucket": "my-bucket", "secretRef": ref}}))
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "gcs-hmac",
        "key": "id",
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secret"
    assert env["BACKSTOP_STORE"]["value"] == "s3://my-bucket/"
    assert "AWS_REGION" not in env
    no_secret = env_of(pod({"objectStore": {"bucket": "my-bucket"}}))
    assert "AWS_ACCESS_KEY_ID" not in no_secret and "AWS_SECRET_ACCESS_KEY" not in no_secret
    assert "BACKSTOP_S3_ENDPOINT" not in no_secret  # AWS S3 itself


def test_an_endpoint_left_unset_is_read_from_the_secret_if_it_holds_one() -> None:
    ref = {"name": "store", "endpointKey": "url"}
    env = env_of(pod({"objectStore": {"bucket": "b12", "secretRef": ref}}))
    assert env["BACKSTOP_S3_ENDPOINT"]["valueFrom"]["secretKeyRef"] == {
        "name": "store",
        "key": "url",
        "optional": True,  # a Secret without it: AWS S3 of the region
    }
    given = env_of(pod({"objectStore": S3}))["BACKSTOP_S3_ENDPOINT"]
    assert given == {"name": "BACKSTOP_S3_ENDPOINT", "value": "http://10.0.0.5:18333"}


def test_a_volume_store_pod_mounts_it_and_an_unset_store_is_an_empty_dir() -> None:
    p = pod({"persistentVolumeClaim": {"claimName": "state"}})
    assert env_of(p)["BACKSTOP_STORE"]["value"] == "/var/lib/backstop"
    assert {"name": "store", "mountPath": "/var/lib/backstop"} in p["spec"]["containers"][0][
        "volumeMounts"
    ]
    assert {"name": "store", "emptyDir": {}} in pod(None)["spec"]["volumes"]
    assert not any(k.startswith("AWS_") for k in env_of(p))


# ---------------------------------------------------------------- node-local stores
@pytest.mark.parametrize(
    ("doc", "refused"),
    [
        (spec(None), "an emptyDir (the default when spec.store is unset) is private to each pod"),
        (spec({"emptyDir": {}}), "an emptyDir is private to each pod; 3 tasks cannot share"),
        (spec({"hostPath": {"path": "/srv"}}), "a hostPath is a different directory on every "
         "node, and its 3 tasks may run on different nodes"),
        (single({"hostPath": {"path": "/srv"}}, replication={"spareCpu": "1"}),
         "its replicas run on other nodes"),
        (single(None, replication={"spareCpu": "1"}), "an emptyDir"),
        (spec({"hostPath": {"path": "/srv"}}, nodeSelector={"kubernetes.io/hostname": "n1"}),
         None),
        (spec({"emptyDir": {}}, nodeSelector={"kubernetes.io/hostname": "n1"}), "an emptyDir"),
        (single({"hostPath": {"path": "/srv"}}), None),
        (single(None), None),
        (spec({"persistentVolumeClaim": {"claimName": "rwx"}}), None),
        (spec({"objectStore": S3}), None),
    ],
)  # fmt: skip
def test_a_store_tasks_on_several_nodes_cannot_share_is_named(
    doc: dict[str, Any], refused: str | None
) -> None:
    problem = node_local_problem(parse_spec(doc))
    if refused is None:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    assert problem.startswith("spec.store: ") and refused in problem, problem
    assert "use spec.store.objectStore or a ReadWriteMany persistentVolumeClaim" in problem


def test_admission_refuses_a_node_local_store_in_one_line_unless_allowed() -> None:
    doc = spec({"hostPath": {"path": "/srv"}})
    line = admission_problem(doc, name="t", annotations={})
    assert line is not None and line.startswith("spec.store: a hostPath") and "\n" not in line
    assert admission_problem(doc, name="t", annotations={}, allow_node_local_store=True) is None
    # an update that leaves the spec alone (finalizers, annotations) is still admitted
    assert (
        admission_problem(doc, name="t", annotations={}, old_spec=doc, old_annotations={}) is None
    )
    # the spec's own problems come first, the store's only of a valid spec
    bad = spec({"hostPath": {"path": "/srv"}}, recoveryLatencyBound=-1)
    assert (admission_problem(bad, name="t", annotations={}) or "").startswith(
        "spec.recoveryLatencyBound"
    )


def test_the_operator_setting_is_the_escape_hatch_of_webhook_and_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings.from_env({}).allow_node_local_store is False
    allowed = Settings.from_env({"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "true"})
    assert allowed.allow_node_local_store is True
    doc = spec({"hostPath": {"path": "/srv"}})
    body = kopf.Body(cast(Any, {"metadata": {"name": "t"}, "spec": doc}))

    monkeypatch.setattr(config, "settings", lambda: Settings())
    with pytest.raises(InvalidTopology, match=r"^spec\.store: a hostPath"):
        config.parse_spec(doc)
    monkeypatch.setattr(webhook, "settings", lambda: Settings())
    with pytest.raises(kopf.AdmissionError, match=r"^spec\.store: a hostPath"):
        webhook.validate(body, operation="CREATE")

    monkeypatch.setattr(config, "settings", lambda: allowed)
    monkeypatch.setattr(webhook, "settings", lambda: allowed)
    assert config.parse_spec(doc).store.kind() == "hostPath"
    webhook.validate(body, operation="CREATE")  # admitted: no AdmissionError


def test_the_crd_types_the_object_store_and_keeps_the_volume_sources() -> None:
    store = spec_schema()["properties"]["store"]
    assert store["x-kubernetes-preserve-unknown-fields"] is True  # {hostPath: ...} survives
    obj = store["properties"]["objectStore"]
    assert obj["required"] == ["bucket"]
    assert set(obj["properties"]) == {"endpoint", "bucket", "prefix", "region", "secretRef"}
    assert obj["properties"]["secretRef"]["required"] == ["name"]
    assert store["properties"]["volume"]["x-kubernetes-preserve-unknown-fields"] is True
