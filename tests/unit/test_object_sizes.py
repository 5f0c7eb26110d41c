"""Objects that stay under the API's size limits at the largest topology the spec admits.

The limits are Kubernetes', not ours (see ``docs/scale.md``): a ConfigMap's data holds at
most 1 MiB (https://kubernetes.io/docs/concepts/configuration/configmap/: "The data stored
in a ConfigMap cannot exceed 1 MiB"), and etcd refuses a request over 1.5 MiB
(``--max-request-bytes`` default 1572864, https://etcd.io/docs/v3.5/dev-guide/limit/),
which bounds every object, a custom resource with its status included. The largest
topologies admitted are 10,000 tasks and 100,000 task-to-task edges
(:data:`backstop.domain.constants.MAX_TASKS`, ``MAX_TASK_EDGES``): a 300x300 shuffle fits.

The runtime decodes what the operator encodes: every recovered task's replay sources, as
the task runtime reads them from the ConfigMap, are what the failure-effect model says
(:func:`backstop.domain.incidents.replay_sources`), and the published epochs are the status's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backstop.domain import spec as spec_mod
from backstop.domain import tasksets
from backstop.domain.admission import admission_problem
from backstop.domain.incidents import replay_sources
from backstop.domain.spec import expand
from backstop.domain.status import (
    StepRecord,
    parse_status,
    status_patch,
    with_changes,
)
from backstop.k8s.manifests import build_recoveryplan
from backstop.k8s.sessionmap import build_session_configmap
from backstop_runtime import fencing as runtime_fencing
from backstop_runtime import session as runtime_session
from backstop_runtime import tasksets as runtime_tasksets
from backstop_testkit.cases.object_sizes import (
    CONFIGMAP_DATA_MAX,
    ETCD_REQUEST_MAX,
    OWNER,
    chains,
    gke_node,
    mid_recovery_status,
    session,
    shuffle,
    stored_size,
)
from planners import InvalidTopology, TaskGraph

op_names = st.sampled_from(["a", "map", "stage-2", "x9"])
task_ids = st.builds(lambda o, i: f"{o}-{i}", op_names, st.integers(0, 1200))


@given(st.lists(task_ids, max_size=60))
def test_any_list_of_task_ids_round_trips_through_the_operator_and_the_runtime(
    tasks: list[str],
) -> None:
    text = tasksets.encode_tasks(tasks)
    assert text is not None
    assert tasksets.decode_tasks(text) == tasks
    assert runtime_tasksets.decode(text) == tasks
    for t in set(tasks):
        assert runtime_tasksets.contains(text, t)
    assert not runtime_tasksets.contains(text, "absent-0")


@given(st.dictionaries(task_ids, st.sampled_from(["n1", "node-2.zone", 3, 7]), max_size=60))
def test_any_task_map_round_trips_keeping_its_order(mapping: dict[str, Any]) -> None:
    packed = tasksets.encode_task_map(mapping)
    assert packed is not None and tasksets.is_task_map(json.loads(json.dumps(packed)))
    back = tasksets.decode_task_map(json.loads(json.dumps(packed)))
    assert list(back.items()) == list(mapping.items())


def test_a_name_that_is_no_task_id_has_no_compact_form() -> None:
    assert tasksets.encode_tasks(["a-0", "a-01"]) is None  # a leading zero: not task_id's
    assert tasksets.encode_task_map({"Node-A": "x"}) is None
    with pytest.raises(ValueError):
        tasksets.decode_tasks("a:3-1")


def _check_runtime_reads(
    cm: dict[str, Any], graph: TaskGraph, backups: list[str], failed: list[str], tasks: list[str]
) -> None:
    doc = json.loads(cm["data"]["session.json"])
    for t in tasks:  # what a task's runtime reads of its own replay = the model's sources
        s = runtime_session.parse(doc, t)
        assert s.recovering(t) and s.replay[t] == replay_sources(graph, backups, failed, t), t


def test_the_session_configmap_of_a_300x300_shuffle_whose_every_task_failed_fits() -> None:
    """Both operators lost, no backups: every reducer is recovered and replays all 300
    map logs (90,000 sources, 1.9 MB as lists of names); half the maps are pending."""
    graph = expand(shuffle(300, 300))
    failed = list(graph.tasks)
    recovered = [t for i, t in enumerate(graph.tasks) if i % 2 == 0 or i >= 300]
    pending = [t for t in failed if t not in set(recovered)]
    epochs = {t: 1 + i % 3 for i, t in enumerate(failed)}
    cm = build_session_configmap(
        OWNER, graph, [], session(graph, failed, recovered, pending), epochs
    )
    assert len(cm["data"]["session.json"]) < CONFIGMAP_DATA_MAX
    assert len(json.dumps(cm)) < ETCD_REQUEST_MAX
    _check_runtime_reads(cm, graph, [], failed, recovered[::9])  # maps and reducers
    doc = json.loads(cm["data"]["session.json"])
    assert runtime_session.parse(doc).replay.keys() == set(recovered)
    for t in failed[::37]:
        assert runtime_fencing.published_epoch(doc, t) == epochs[t]
    assert runtime_fencing.published_epoch(doc, "map-300") == 0
    assert runtime_tasksets.decode(doc["pendingTasks"]) == sorted(pending)


def test_the_session_configmap_of_10k_tasks_mid_recovery_fits() -> None:
    """10 forward chains of 1000 (10,000 tasks): 4,000 failed, backups on every third
    operator, so some recovered tasks replay from a buffer and some from a source log."""
    graph = expand(chains(10, 1000))
    backups = [t for t in graph.tasks if int(t.split("-")[0][2:]) % 3 == 1]
    failed = [t for t in graph.tasks if int(t.rsplit("-", 1)[1]) % 5 < 2]
    recovered = failed[::2]
    pending = failed[1::2]
    epochs = dict.fromkeys(failed, 1)
    cm = build_session_configmap(
        OWNER, graph, backups, session(graph, failed, recovered, pending), epochs
    )
    assert len(cm["data"]["session.json"]) < CONFIGMAP_DATA_MAX
    _check_runtime_reads(cm, graph, backups, failed, recovered[::7])
    doc = json.loads(cm["data"]["session.json"])
    assert len(doc["replayGroups"]) < 50  # forward chains share groups (relative "@")


def test_a_configmap_written_by_an_older_operator_is_still_read() -> None:
    doc = {"phase": "Recovering", "replay": {"b-0": ["a-0"]}, "epochs": {"b-0": 2}}
    assert runtime_session.parse(doc, "b-0").replay == {"b-0": ["a-0"]}
    assert runtime_fencing.published_epoch(doc, "b-0") == 2


def test_limits_refuse_oversized_topologies_at_admission_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A legal 2 x 1000 shuffle was a million edges (10 s, 488 MiB to expand): refused by
    the model, before any graph is built."""

    def no_expand(_: Any) -> None:
        raise AssertionError("expanded a topology the limits refuse")

    monkeypatch.setattr(spec_mod, "expand", no_expand)
    with pytest.raises(InvalidTopology) as err:
        shuffle(1000, 1000)
    assert str(err.value) == (
        "spec: operators[1].inputs[0] (shuffle of 1000 x 1000 tasks: 1000000 edges) makes "
        "1000000 task-to-task edges, more than the limit of 100000 per topology "
        "(docs/scale.md)"
    )
    with pytest.raises(InvalidTopology) as err:
        chains(11, 1000)
    assert str(err.value) == (
        "spec: operators[*].parallelism sums to 11000 tasks, more than the limit of 10000 "
        "per topology (docs/scale.md)"
    )
    # the admission webhook's answer: the same one line
    ops = [{"name": f"op{k}", "parallelism": 1000, "reprocessingLatency": 1} for k in range(11)]
    spec = {"image": "x", "recoveryLatencyBound": 100, "operators": ops}
    assert admission_problem(spec, name="t", annotations={}) == str(err.value)


def test_the_largest_admitted_topologies_are_admitted() -> None:
    assert len(expand(chains(10, 1000))) == 10_000
    assert len(expand(shuffle(300, 300))) == 600


# ------------------------------------------------------------------ the topology's status


def test_the_status_of_10k_tasks_mid_recovery_fits_and_reads_back() -> None:
    status = mid_recovery_status()
    wire = status.wire()
    assert stored_size(wire) < ETCD_REQUEST_MAX
    assert stored_size(status.dump()) > ETCD_REQUEST_MAX  # what the operator wrote before
    parsed = parse_status(json.loads(json.dumps(wire)))
    assert parsed.dropped == () and parsed.status == status


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch (written from the RFC's text)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out


def test_a_patch_turns_either_stored_form_into_the_new_status() -> None:
    """The API may hold the plain form (an older operator wrote it) or the compact one:
    the patch computed from the typed statuses brings either to the new status."""
    old = mid_recovery_status()
    plan = old.plan
    assert plan is not None and plan.assignment is not None
    smaller = dict(list(plan.assignment.items())[:100])  # back under the compact size
    new_plan = plan.model_copy(update={"assignment": {**plan.assignment, "op0-1": "n-new"}})
    for new in (
        with_changes(old, plan=new_plan, rollout=None),
        with_changes(old, plan=plan.model_copy(update={"assignment": smaller})),
    ):
        patch = status_patch(old, new)
        for stored in (old.dump(), old.wire()):
            result = parse_status(apply_merge_patch(stored, patch)).status
            assert result.plan == new.plan and result.rollout == new.rollout


def test_the_largest_recoveryplan_fits() -> None:
    """One step that recovers all 10,000 tasks (every node replaced at once)."""
    tasks = list(expand(chains(10, 1000)).tasks)
    step = StepRecord(step=1, trigger="NodeReady", algorithm="best-density",
                      recover={t: gke_node(i % 400) for i, t in enumerate(tasks)},
                      recovered_queries=[t for t in tasks if t.startswith("op9-")])  # fmt: skip
    plan = build_recoveryplan(
        OWNER, session="s1", step_no=1, trigger="NodeReady", lost=[], step=step.dump()
    )
    assert len(json.dumps(plan, separators=(",", ":"))) < ETCD_REQUEST_MAX
