"""Task pods: restricted securityContext, no API token unless the spec asks,
limits from the spec (and a limit below its request refused at admission, naming the field)."""

from __future__ import annotations

from typing import Any

import pytest

from backstop.domain.spec import StreamTopologySpec, parse_spec
from backstop.k8s.manifests import Owner, TaskRole, build_task_pod
from planners import InvalidTopology

OWNER = Owner("topo", "ns", "uid-1")
ROLE = TaskRole("src-0", "src", 0, (), False, "n1")


def pod(**spec: Any) -> dict[str, Any]:
    ops = spec.pop("operators", [{"name": "src", "reprocessingLatency": 1}])
    model = StreamTopologySpec.model_validate(
        {"image": "img", "recoveryLatencyBound": 2, "operators": ops, **spec}
    )
    return build_task_pod(OWNER, model, ROLE)


def test_fault09_task_pods_are_restricted_and_carry_no_token() -> None:
    p = pod()["spec"]
    assert p["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in p  # the namespace's default account, without its token
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = p["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"].get("privileged", False) is False
    assert "limits" not in c["resources"], "no limit the spec did not ask for"
    for v in p["volumes"]:
        assert "hostPath" not in v, "no host path unless spec.store names one"


def test_fault09_the_token_and_an_account_only_when_the_spec_asks() -> None:
    p = pod(automountServiceAccountToken=True, serviceAccountName="reader")["spec"]
    assert p["automountServiceAccountToken"] is True
    assert p["serviceAccountName"] == "reader"


def test_fault09_limits_come_from_the_spec() -> None:
    ops = [
        {
            "name": "src",
            "reprocessingLatency": 1,
            "resources": {"cpu": "250m", "memory": "128Mi", "cpuLimit": 1, "memoryLimit": "1Gi"},
        }
    ]
    res = pod(operators=ops)["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {"cpu": "250m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"cpu": "500m", "cpuLimit": "250m"}, r"resources: cpuLimit 250m is below"),
        ({"memoryLimit": "lots"}, r"resources\.memoryLimit: 'lots'"),
    ],
)
def test_fault09_a_limit_below_its_request_is_refused(resources: Any, field: str) -> None:
    ops = [{"name": "src", "reprocessingLatency": 1, "resources": resources}]
    with pytest.raises(InvalidTopology, match=r"spec\.operators\[0\]\." + field):
        parse_spec({"image": "img", "recoveryLatencyBound": 2, "operators": ops})


def test_fault09_a_service_account_name_the_api_server_would_refuse_is_refused_here() -> None:
    spec = {
        "image": "img",
        "recoveryLatencyBound": 2,
        "operators": [{"name": "src", "reprocessingLatency": 1}],
        "serviceAccountName": "Not_An_Account",
    }
    with pytest.raises(InvalidTopology, match=r"spec\.serviceAccountName"):
        parse_spec(spec)
