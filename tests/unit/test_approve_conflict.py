"""Applying an approved plan while other writers change the topology's status.

On real nodes the supervisor writes the status every few seconds (task readiness,
conditions). The approval's write is guarded by ``resourceVersion``; a 409 caused by such an
unrelated write must be retried from a fresh read, and only a changed plan or generation
refuses the recommendation (found by ``make test-spark-job``: every approval on real nodes
was refused as ``PlanChanged``).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from backstop.controller import approve, context
from backstop.domain.constants import ANN_APPLIED

SPEC: dict[str, Any] = {"operators": [{"name": "a", "parallelism": 1}]}
OLD_PLAN = {"assignment": {"a-0": "n1"}, "backups": [], "generation": 3}
NEW_PLAN = {"assignment": {"a-0": "n2"}, "backups": []}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies a status merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class FakeCustom:
    """A StreamTopology held in memory, with ``resourceVersion`` checked on status patches.

    ``interleave`` lists status changes another writer makes, one right after each read
    of the approval (the race seen on real nodes)."""

    def __init__(self, interleave: list[dict[str, Any]]) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"name": "t", "namespace": "ns", "generation": 3,
                         "resourceVersion": "10", "annotations": {}},
            "spec": SPEC,
            "status": {"plan": copy.deepcopy(OLD_PLAN), "conditions": []},
        }  # fmt: skip
        self.interleave = interleave
        self.status_patches = 0

    def _bump(self) -> None:
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        seen = copy.deepcopy(self.obj)
        if self.interleave:  # another writer changes the status after this read
            self.obj["status"].update(self.interleave.pop(0))
            self._bump()
        return seen

    def patch_namespaced_custom_object_status(self, *args: Any) -> None:
        body = args[-1]
        self.status_patches += 1
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != self.obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.obj["status"] = _merge(self.obj["status"], body["status"])
        self._bump()

    def patch_namespaced_custom_object(self, *args: Any) -> None:
        self.obj["metadata"]["annotations"].update(args[-1]["metadata"]["annotations"])
        self._bump()


class FakeKube:
    def __init__(self, custom: FakeCustom) -> None:
        self.custom = custom


def _apply(custom: FakeCustom, monkeypatch: pytest.MonkeyPatch) -> str | None:
    monkeypatch.setattr(context, "kube", lambda: FakeKube(custom))
    return asyncio.run(approve.apply_plan("ns", "t", 3, OLD_PLAN, NEW_PLAN, {"result": "Applied"}))


def test_an_unrelated_status_write_between_read_and_patch_does_not_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    custom = FakeCustom(interleave=[ready])
    assert _apply(custom, monkeypatch) is None
    status = custom.obj["status"]
    assert status["plan"]["assignment"] == {"a-0": "n2"}
    assert status["plan"]["generation"] == 3
    assert status["reoptimization"] == {"result": "Applied"}
    assert status["conditions"] == ready["conditions"]  # the other writer's change kept
    assert ANN_APPLIED in custom.obj["metadata"]["annotations"]
    assert custom.status_patches == 2  # one conflict, then the write


def test_a_plan_changed_by_another_writer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    moved = {"plan": {"assignment": {"a-0": "n3"}, "backups": [], "generation": 3}}
    custom = FakeCustom(interleave=[moved])
    assert _apply(custom, monkeypatch) == "the topology changed while the job ran"
    assert custom.obj["status"]["plan"]["assignment"] == {"a-0": "n3"}
    assert ANN_APPLIED not in custom.obj["metadata"]["annotations"]


def test_a_status_that_never_stays_still_ends_in_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    churn = [{"conditions": [{"type": "Ready", "status": str(i)}]} for i in range(50)]
    custom = FakeCustom(interleave=churn)
    reason = _apply(custom, monkeypatch)
    assert reason is not None and "changed" in reason
    assert custom.obj["status"]["plan"]["assignment"] == {"a-0": "n1"}
    assert custom.status_patches == approve.CONFLICT_RETRIES
