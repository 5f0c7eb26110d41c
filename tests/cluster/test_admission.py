"""Issue 12, item 8 on the real API server: ``kubectl apply`` of a bad name or algorithm is
refused at admission, with a message naming the field (no operator needed).

``--validate=false`` turns kubectl's own client-side check off, so what refuses is the API
server with the CRD's schema, as for any client that is not kubectl.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.support.kubetools import ROOT, install_crds

KUBECTL = ROOT / ".tools" / "bin" / "kubectl"


def kubectl_apply(cluster: str, namespace: str, doc: dict[str, Any], tmp_path: Path) -> str:
    """``kubectl apply --validate=false`` of ``doc``; returns stderr, fails if accepted."""
    assert os.access(KUBECTL, os.X_OK), "kubectl is missing: run `make tools`"
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = [str(KUBECTL), "--kubeconfig", cluster, "-n", namespace, "apply"]
    proc = subprocess.run(
        [*argv, "--validate=false", "-f", str(path)],
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
