"""``spec.reoptimization.metricsPath`` in an object store: what the spec admits, where an
unset one points, and how the job's process gets the store's address and credentials
(in a Job's manifest, and in a real ``mode: local`` run against SeaweedFS)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from backstop.controller import reoptrun
from backstop.controller import settings as config
from backstop.controller.handlers_reopt import metrics_dir
from backstop.controller.settings import Settings
from backstop.domain import metricspath
from backstop.domain.spec import load_topology, parse_spec
from backstop.domain.storespec import StoreSpec
from backstop.domain.yamlio import load_all
from backstop.k8s.reoptjob import JobSettings, build_reopt_job
from backstop_runtime.blobs import open_blobs
from backstop_testkit.sim.metricsgen import GeneratorParams, write_metrics
from backstop_testkit.support.kubetools import ROOT
from planners import InvalidTopology

EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
OBJECT_STORE = {"objectStore": {"endpoint": "http://s3.storage:8333", "bucket": "state",
                                "prefix": "team/prod", "region": "eu-west-1",
                                "secretRef": {"name": "creds", "accessKeyIdKey": "id",
                                              "secretAccessKeyKey": "secret"}}}  # fmt: skip


def _spec(store: Mapping[str, Any] | None, metrics_path: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": "x",
        "recoveryLatencyBound": 10,
        "operators": [{"name": "a", "reprocessingLatency": 1.0, "resources": {"cpu": "1"}}],
        "reoptimization": {} if metrics_path is None else {"metricsPath": metrics_path},
    }
    if store is not None:
        spec["store"] = dict(store)
    return spec


# ------------------------------------------------------------------ what the spec admits
@pytest.mark.parametrize(
    "path",
    [
        "s3://state/team/prod/{namespace}/{name}/{uid}/metrics",
        "s3://other-bucket/m",  # another bucket of the same store
        "/var/lib/backstop/{namespace}/{name}/{uid}/metrics",
    ],
)
def test_an_object_store_topology_admits_s3_and_directory_paths(path: str) -> None:
    model = parse_spec(_spec(OBJECT_STORE, path))
    assert model.reoptimization is not None and model.reoptimization.metrics_path == path


@pytest.mark.parametrize(
    ("store", "path", "needle"),
    [
        (None, "s3://state/m", "needs spec.store.objectStore"),
        ({"hostPath": {"path": "/srv"}}, "s3://state/m", "needs spec.store.objectStore"),
        (OBJECT_STORE, "s3a://state/m", "use s3://bucket/prefix or an absolute directory"),
        (OBJECT_STORE, "gs://state/m", "use s3://bucket/prefix or an absolute directory"),
        (OBJECT_STORE, "metrics/tasks", "use s3://bucket/prefix or an absolute directory"),
        (OBJECT_STORE, "s3:///m", "has no bucket"),
        (OBJECT_STORE, "s3://Not_A_Bucket/m", "'Not_A_Bucket' is not a bucket name"),
    ],
)
def test_unreadable_metrics_paths_are_refused_with_the_reason(
    store: Mapping[str, Any] | None, path: str, needle: str
) -> None:
    with pytest.raises(InvalidTopology, match=f"metricsPath.*{needle}"):
        parse_spec(_spec(store, path))


# ------------------------------------------------------------------ where it points
def test_unset_defaults_to_where_the_runtime_writes_in_the_object_store() -> None:
    store = parse_spec(_spec(OBJECT_STORE, None)).store
    # BACKSTOP_STORE=s3://state/team/prod, the runtime's root <namespace>/<name>/<uid>,
    # its rows under <root>/metrics
    path = metricspath.effective(None, store)
    assert path is not None
    assert metrics_dir(path, "ns", "tw", "u-1") == "s3://state/team/prod/ns/tw/u-1/metrics"
    assert metricspath.effective("/m/{name}", store) == "/m/{name}"
    # a volume store has no default: its mount in the job is the operator's to say
    assert metricspath.effective(None, StoreSpec()) is None


# ------------------------------------------------------------------ the Job's access
def _secret(e: Mapping[str, Any]) -> tuple[str, str]:
    ref = e["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_a_job_in_the_topologys_namespace_uses_the_topologys_secret() -> None:
    store = StoreSpec.model_validate(OBJECT_STORE)
    env = {e["name"]: e for e in metricspath.job_store_env(store, "prod", "prod", "other")}
    assert env["BACKSTOP_S3_ENDPOINT"]["value"] == "http://s3.storage:8333"
    assert env["AWS_REGION"]["value"] == "eu-west-1"
    assert _secret(env["AWS_ACCESS_KEY_ID"]) == ("creds", "id")
    assert _secret(env["AWS_SECRET_ACCESS_KEY"]) == ("creds", "secret")
    assert "BACKSTOP_STORE" not in env


def test_a_job_elsewhere_uses_the_operators_secret_or_says_it_has_none() -> None:
    store = StoreSpec.model_validate(OBJECT_STORE)
    env = {e["name"]: e for e in metricspath.job_store_env(store, "ops", "prod", "reopt-s3")}
    assert _secret(env["AWS_ACCESS_KEY_ID"]) == ("reopt-s3", "accessKeyId")
    assert _secret(env["AWS_SECRET_ACCESS_KEY"]) == ("reopt-s3", "secretAccessKey")
    assert env["BACKSTOP_S3_ENDPOINT"]["value"] == "http://s3.storage:8333"
    with pytest.raises(ValueError, match=r"cannot use Secret prod/creds.*objectStoreSecret"):
        metricspath.job_store_env(store, "ops", "prod", None)
    # a store without a Secret: the pod's own credentials (a cloud role), wherever it runs
    own = StoreSpec.model_validate({"objectStore": {"bucket": "state"}})
    assert metricspath.job_store_env(own, "ops", "prod", None) == []


def test_the_job_manifest_carries_the_s3_path_and_the_store_settings() -> None:
    settings = JobSettings(namespace="prod", image="backstop/spark:1")
    store = StoreSpec.model_validate(OBJECT_STORE)
    env = metricspath.job_store_env(store, "prod", "prod")
    topology = {"metadata": {"name": "tw", "namespace": "prod"}}
    job = build_reopt_job("j", settings, topology, "s3://state/team/prod/prod/tw/u/metrics", env)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][c["args"].index("--metrics") + 1] == "s3://state/team/prod/prod/tw/u/metrics"
    names = [e["name"] for e in c["env"]]
    assert {"BACKSTOP_S3_ENDPOINT", "AWS_REGION", "AWS_ACCESS_KEY_ID"} <= set(names)
    assert "POD_NAMESPACE" in names  # the Job's own settings stay
    assert "metrics" not in [v["name"] for v in job["spec"]["template"]["spec"]["volumes"]]


def test_the_operator_reads_the_jobs_secret_setting() -> None:
    s = Settings.from_env({"BACKSTOP_REOPT_STORE_SECRET": "reopt-s3"})
    assert s.reopt_store_secret == "reopt-s3"
    assert Settings.from_env({}).reopt_store_secret is None


# ------------------------------------------------------------------ a real local run
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_local_run_reads_the_object_store_with_the_topologys_endpoint(
    object_store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The operator's environment has the credentials only; the endpoint and region come
    from the topology's store, as the operator passes them to its child process."""
    for key in ("BACKSTOP_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", object_store_env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", object_store_env["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("BACKSTOP_REOPT_TIME_LIMIT", "0.3")
    config.settings.cache_clear()
    prefix = f"local-{uuid.uuid4().hex[:10]}"
    store = StoreSpec.model_validate({"objectStore": {
        "endpoint": object_store_env["BACKSTOP_S3_ENDPOINT"],
        "bucket": object_store_env["BACKSTOP_S3_BUCKET"], "prefix": prefix,
        "region": object_store_env["AWS_REGION"]}})  # fmt: skip
    default = metricspath.effective(None, store)
    assert default is not None
    metrics = metrics_dir(default, "prod", "twitter-sentiment", "u-1")
    local = tmp_path / "generated"
    write_metrics(local, [load_topology(EXAMPLE)], GeneratorParams(rows=3000, seed=5), "jsonl")
    blobs = open_blobs(f"s3://{object_store_env['BACKSTOP_S3_BUCKET']}/{prefix}",
                       object_store_env)  # fmt: skip
    for name in ("tasks", "nodes"):
        blobs.put(f"prod/twitter-sentiment/u-1/metrics/{name}/part-0.jsonl",
                  (local / f"{name}.jsonl").read_bytes())  # fmt: skip
    (manifest,) = [d for d in load_all(EXAMPLE.read_text()) if d["kind"] == "StreamTopology"]
    manifest["metadata"]["namespace"] = "prod"
    nodes = [{"name": f"n{i}", "cpu": 4.0, "domain": None} for i in range(4)]
    phases: list[str] = []

    async def progress(phase: str, fields: Mapping[str, Any]) -> None:
        phases.append(phase)

    work = tmp_path / "work"
    work.mkdir()
    try:
        rec = asyncio.run(reoptrun.run_local(manifest, nodes, None, metrics, work, progress, store))
    finally:
        config.settings.cache_clear()
    assert rec["result"] == "Recommended" and phases == ["Running"]
    assert {o["operator"] for o in rec["operators"]} == {
        op.name for op in load_topology(EXAMPLE).spec.operators
    }
