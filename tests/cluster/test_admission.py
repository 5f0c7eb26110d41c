"""Admission on the real API server: ``kubectl apply`` of a bad manifest is refused with one
line naming the field.

The CRD's schema alone (no operator) refuses bad names and algorithms.
With the operator's validating webhook (``backstop operator
--webhook-port``), everything the operator itself would mark ``InvalidSpec`` is refused too.

``--validate=false`` turns kubectl's own client-side check off, so what refuses is the API
server with the CRD's schema, or the webhook, as for any client that is not kubectl.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from backstop_testkit.support.chartrights import webhook_configuration
from backstop_testkit.support.kubetools import (
    ROOT,
    free_port,
    install_crds,
    start_operator,
    stop_operator,
    wait_for,
)

KUBECTL = ROOT / ".tools" / "bin" / "kubectl"


def kubectl_apply(
    cluster: str, namespace: str, doc: dict[str, Any], tmp_path: Path, *extra: str
) -> str:
    """``kubectl apply --validate=false`` of ``doc``; returns stderr, fails if accepted."""
    assert os.access(KUBECTL, os.X_OK), "kubectl is missing: run `make tools`"
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = [str(KUBECTL), "--kubeconfig", cluster, "-n", namespace, "apply"]
    proc = subprocess.run(
        [*argv, "--validate=false", *extra, "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0, f"admitted: {doc}\n{proc.stdout}"
    return proc.stderr


def topology(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "streams.backstop.dev/v1alpha1",
        "kind": "StreamTopology",
        "metadata": {"name": name},
        "spec": {
            "image": "img",
            "recoveryLatencyBound": 2,
            "operators": [{"name": "src", "reprocessingLatency": 1}],
            **spec,
        },
    }


@pytest.mark.cluster
def test_fault08_kubectl_apply_refuses_bad_names_and_algorithms(
    cluster: str, kube: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    install_crds(kube)
    long_name = "t" * 64
    err = kubectl_apply(cluster, namespace, topology(long_name), tmp_path)
    assert "metadata.name" in err and "at most 63" in err, err

    err = kubectl_apply(
        cluster, namespace, topology("typo", placementAlgorithm="rtap-bff"), tmp_path
    )
    assert "spec.placementAlgorithm" in err and "rtap-bff" in err, err

    err = kubectl_apply(
        cluster, namespace, topology("typo", recovery={"algorithm": "best_density"}), tmp_path
    )
    assert "spec.recovery.algorithm" in err and "best_density" in err, err

    ops = [{"name": "b--c", "reprocessingLatency": 1}]
    err = kubectl_apply(cluster, namespace, topology("sep", operators=ops), tmp_path)
    assert "spec.operators" in err and "name" in err, err

    twice = [{"name": "src", "reprocessingLatency": 1}, {"name": "src", "reprocessingLatency": 2}]
    err = kubectl_apply(cluster, namespace, topology("dup", operators=twice), tmp_path)
    assert "spec.operators[1]" in err and "Duplicate value" in err, err

    objs = client.CustomObjectsApi(kube).list_namespaced_custom_object(
        "streams.backstop.dev", "v1alpha1", namespace, "streamtopologies"
    )
    assert objs["items"] == [], "nothing was stored"


def _ops(*names_inputs: tuple[str, ...], **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": n, "reprocessingLatency": 1, "inputs": [{"operator": i} for i in ins], **extra}
        for n, *ins in names_inputs
    ]


#: (topology name, spec fields, what the one line must hold: the field, then the reason)
BAD_MANIFESTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("cycle", {"operators": _ops(("a", "c"), ("b", "a"), ("c", "b"))},
     "spec.operators[0].inputs: ", "cycle"),
    ("unknown-input", {"operators": _ops(("a",), ("b",), ("c", "foo"))},
     "spec.operators[2].inputs[0].operator: ", "unknown operator 'foo'"),
    ("duplicate", {"operators": _ops(("a",), ("a",))},
     "spec.operators[1]: ", "Duplicate value"),
    ("negative-cpu", {"operators": _ops(("a",), resources={"cpu": "-1"})},
     "spec.operators[0].resources.cpu: ", "must be positive"),
    ("unknown-algorithm", {"placementAlgorithm": "rtap-bff"},
     "spec.placementAlgorithm: ", "rtap-bff"),
    ("bound-restart", {"recovery": {"restartSeconds": 2}},
     "spec: recovery.restartSeconds (2) must be below recoveryLatencyBound (2)", ""),
    # v1.20's schema validation names a list item's field without its index
    ("bad-name", {"operators": _ops(("Src",))}, "spec.operators.name: ", "should match"),
    ("too-many", {"operators": _ops(*[(f"o{i}",) for i in range(401)])},
     "spec.operators: ", "at most 400"),
    ("unknown-field", {"placementAlgoritm": "auto"}, "spec.placementAlgoritm: ", "unknown field"),
    ("no-container", {"podTemplate": {"spec": {"volumes": []}}},
     "spec.podTemplate.spec.containers: ", "at least one container"),
    ("owned-env", {"podTemplate": {"spec": {"containers": [
        {"name": "task", "env": [{"name": "BACKSTOP_TASK_ID", "value": "x"}]}]}}},
     "spec.podTemplate.spec.containers[0]: ", "env BACKSTOP_TASK_ID is the operator's"),
]  # fmt: skip


def _webhook_registered(
    admission: client.AdmissionregistrationV1Api, namespace: str, port: int
) -> bool:
    """The operator's entry is in the configuration the chart names for the namespace."""
    try:
        config = admission.read_validating_webhook_configuration(webhook_configuration(namespace))
    except client.ApiException:
        return False
    return any(f":{port}/" in (w.client_config.url or "") for w in config.webhooks or [])


@pytest.mark.cluster
def test_webhook_refuses_each_bad_manifest_in_one_line_naming_the_field(
    cluster: str, kube: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """One operator start with its webhook, then one apply per bad manifest
    (the CRD's schema or the webhook refuses, whichever comes first: both name the field).

    The operator runs with ``--leader-elect`` while a stranger holds the Lease, so the table
    is answered by the standby's webhook (which failed to log in out-of-cluster before),
    then the Lease is freed and the same port answers as the leader's."""
    install_crds(kube)
    port = free_port()
    admission = client.AdmissionregistrationV1Api(kube)
    coord = client.CoordinationV1Api(kube)
    now = datetime.now(UTC)
    lease = {"holderIdentity": "a-stranger", "leaseDurationSeconds": 3600,
             "acquireTime": now, "renewTime": now}  # fmt: skip
    coord.create_namespaced_lease(
        namespace, {"metadata": {"name": "backstop-operator"}, "spec": lease}
    )
    op = start_operator(
        cluster,
        namespace,
        tmp_path / "operator.log",
        (
            "--webhook-port",
            str(port),
            "--leader-elect",
            f"--leader-elect-namespace={namespace}",
            "--lease-duration=3600",  # the stranger's Lease never expires: standby until freed
        ),
    )
    try:
        wait_for(
            lambda: _webhook_registered(admission, namespace, port), 30, "the webhook registered"
        )
        ready = topology("probe", operators=_ops(("a", "a")))

        def refused() -> bool:  # the server is up once the webhook answers (Ignore admits)
            proc = subprocess.run(
                [str(KUBECTL), "--kubeconfig", cluster, "-n", namespace, "apply",
                 "--dry-run=server", "-f", "-"],
                input=yaml.safe_dump(ready), capture_output=True, text=True, check=False,
            )  # fmt: skip
            return proc.returncode != 0

        wait_for(refused, 30, "the webhook answering")
        for name, spec, field, reason in BAD_MANIFESTS:
            err = kubectl_apply(cluster, namespace, topology(name, **spec), tmp_path)
            lines = err.strip().splitlines()
            assert len(lines) == 1, f"{name}: {err}"
            after = lines[0].split("denied the request: ")[-1].split(" is invalid: ")[-1]
            assert after.startswith(field) and reason in after, f"{name}: {err}"
        # a good manifest passes the same admission (server-side dry run: the API server's
        # whole admission chain, nothing stored, so the operator has nothing to reconcile)
        ok = subprocess.run(
            [str(KUBECTL), "--kubeconfig", cluster, "-n", namespace, "apply",
             "--dry-run=server", "-f", "-"],
            input=yaml.safe_dump(topology("good", operators=_ops(("a",), ("b", "a")))),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert "created (server dry run)" in ok.stdout, ok.stdout
        log = (tmp_path / "operator.log").read_text()
        assert "leads" not in log and "authentication has failed" not in log, log[-3000:]
        coord.delete_namespaced_lease("backstop-operator", namespace)  # the standby leads
        wait_for(lambda: " leads (" in (tmp_path / "operator.log").read_text(), 60, "leading")
        wait_for(refused, 30, "the leader's webhook answering")
    finally:
        stop_operator(op)
        with contextlib.suppress(client.ApiException):
            admission.delete_validating_webhook_configuration(webhook_configuration(namespace))
    objs = client.CustomObjectsApi(kube).list_namespaced_custom_object(
        "streams.backstop.dev", "v1alpha1", namespace, "streamtopologies"
    )
    assert objs["items"] == [], "nothing was stored"
