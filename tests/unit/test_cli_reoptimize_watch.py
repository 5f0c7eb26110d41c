"""``backstop reoptimize NAME``: the phases it prints as the watched status changes.

The watch itself (a Kubernetes watch on the one object) runs against the API server in
``tests/cluster/test_reopt_job_approve.py`` (``--approve``); here a stand-in object feeds
:func:`backstop.cli._watch.run` the statuses a run goes through, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from backstop.cli import _watch


class FakeTopology(_watch.Topology):
    """Records the patch and replays statuses to the watch's predicate, as events would."""

    def __init__(self, states: list[dict[str, Any]]) -> None:
        self.name, self.namespace = "tw", "prod"
        self.states = states
        self.patched: list[Mapping[str, Any]] = []

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.patched.append(body)
        return {}

    def watch(self, until: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        nonce = self.patched[-1]["spec"]["reoptimization"]["nonce"]
        obj: dict[str, Any] = {}
        for state in self.states:
            obj = {"status": {"reoptimization": {**state, "nonce": state.get("nonce", nonce)}}}
            if until(obj):
                return obj
        raise AssertionError("the run never finished")


def test_run_prints_each_phase_once_with_a_timestamp(capsys: pytest.CaptureFixture[str]) -> None:
    rec = {"id": "abc123", "nodesUsed": 2, "backupCount": 3, "worstRecoveryLatency": 3.5,
           "moved": 4, "current": {"nodesUsed": 3, "backupCount": 5,
                                   "worstRecoveryLatency": 4.0}}  # fmt: skip
    topo = FakeTopology([
        {"nonce": "an-older-run", "running": True, "phase": "Running", "message": "old"},
        {"running": True, "phase": "Starting", "message": "a run (nonce) is starting"},
        {"running": True, "phase": "Queued", "message": "waiting for another topology's run"},
        {"running": True, "phase": "Queued", "message": "waiting for another topology's run"},
        {"running": True, "phase": "Running", "message": "Job ops/reopt-tw-1"},
        {"result": "Suggested", "message": "fewer backups", "recommendation": rec},
    ])  # fmt: skip
    state = _watch.run(topo, 10)
    assert state["result"] == "Suggested" and _watch.exit_code(state, False) == 0
    lines = capsys.readouterr().err.splitlines()
    stamped = [ln for ln in lines if re.match(r"\[\d\d:\d\d:\d\d\] ", ln)]
    said = [ln[11:] for ln in stamped]
    assert said[0].startswith("requested a run of prod/tw (nonce ")
    assert said[1:] == [
        "starting: a run (nonce) is starting",
        "queued: waiting for another topology's run",
        "running: Job ops/reopt-tw-1",
        "result Suggested: fewer backups",
    ]  # the older run's status and the repeated phase are not printed
    text = "\n".join(lines)
    assert "recommendation abc123: nodes 3 -> 2, backups 5 -> 3" in text
    assert "backstop reoptimize tw -n prod --approve" in text


def test_a_failed_run_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    topo = FakeTopology([{"result": "Failed", "message": "the Job's pod cannot start"}])
    state = _watch.run(topo, 10)
    assert _watch.exit_code(state, False) == 1
    assert "result Failed: the Job's pod cannot start" in capsys.readouterr().err
