"""The word count example on REAL nodes: exactly-once output when a node with tasks is killed.

``examples/wordcount.yaml`` (a copy: a bounded, rate-limited source on a fixed input log,
its own node pool) is run by the operator (a host process, as in the other operator tests)
as pods of the task-runtime image ``backstop/runtime:0.2.0`` on three real nodes (kubelet +
containerd each, ``hack/real-node.sh``). The store is SeaweedFS (S3 API) on this host,
outside the nodes, as a cloud's S3 is outside a cluster: the input segments, checkpoints,
batch logs, peer registry and the sink's output objects are all in its bucket, and no task
pod mounts a host directory (checked on every pod). The operator runs without the
single-host allowance for node-local stores. Each task asks for 400m CPU, so the plan
spreads them (at most four fit a 2-CPU node under the 0.8 utilization cap) and the tasks
left on the surviving nodes must find their recreated peers on another node. Once without
failure; once with the test kit's ``nodes kill`` of the node with the most tasks mid-stream:
its kubelet, containerd and every task container get SIGKILL (checked: their processes are
gone), the node-lifecycle controller turns it NotReady and the operator recreates the lost
pods on the other nodes, where they restore their checkpoints and replay. The same run with
each lost task's catch-up within the topology's ``recoveryLatencyBound`` asserted too
(:func:`kill_busiest` with ``bound=True``) is in ``test_runtime_real_zz_bound_open.py``,
open: it passes when the killed node held the tokenizers, counts and sink, and fails when
it held both sources with ``count-0`` and the sink (those two stay behind).
The sink's output (the set of lines) must be the same in both runs and equal to the counts
this test computes from the input itself (``tests/runtime_data.expected_counts``: a plain
Counter, lowercase words split on non-letters, 10-second tumbling event-time windows).

The environment (nodes, store, operator: ``wordcount_env.py``) is started once for the
package by ``conftest.py`` and shared with the other word count modules here.
The runtime image is built by ``hack/images.sh`` (warm: seconds; cold: about 1 min, which the
e2e then reuses). Needs root: outside CI the test skips without it, under ``CI=true`` it fails.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backstop.domain.constants import GROUP, VERSION
from backstop_runtime.input import put_files
from backstop_runtime.sources import owner
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import node_ready, wait_for
from backstop_testkit.support.realnodes import (
    containerd_socket,
    frozen_node,
    process_gone,
    process_stopped,
    task_pids,
)
from backstop_testkit.support.runtime_data import counts_of, expected_counts, write_input
from tests.realnodes.wordcount_env import (
    BOUND_RATE,
    BOUND_ROUNDS,
    KILL_RATE,
    PER_FILE,
    REF_RATE,
    ZOMBIE_RATE,
    Env,
    busiest,
    caught_up_within_bound,
    exact_output,
    host_directories,
    kill_node,
    under_way,
    wait_recreated,
    watch_lost,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


def test_wordcount_on_real_nodes_counts_every_word_once(reference: list[str], env: Env) -> None:
    assert reference, "the sink wrote nothing"
    assert len(reference) == len(set(reference)), "a line was written twice"
    assert counts_of(reference) == dict(expected_counts(env.input))


def test_killing_a_real_node_mid_stream_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    """The node with the most tasks is killed mid-stream: its tasks run again on the other
    nodes, and the output is exact. (That each is caught up within the bound R is
    asserted by :func:`kill_busiest` with ``bound=True`` in ``make test-bound-open``.)"""
    kill_busiest(env, reference, "wc-kill", bound=False)


def kill_busiest(env: Env, reference: list[str], name: str, *, bound: bool) -> None:
    """Run the word count ``name``, kill the node with the most tasks mid-stream, and
    assert the output exact; with ``bound``, also that every task lost with it is caught up
    again (:mod:`backstop_testkit.support.catchup`) within the topology's
    ``recoveryLatencyBound`` counted from the failure."""
    t0 = time.monotonic()
    if bound:  # the runs before are gone: the lost tasks may use the CPU they held
        env.settled()
    env.create(name, BOUND_RATE)
    pods = under_way(env, name, rounds=BOUND_ROUNDS)
    victim, lost, spread = busiest(pods)
    assert spread > 1, f"every task on {victim}: nothing survived the kill"
    catch = watch_lost(env, name, [p.metadata.labels[f"{GROUP}/task"] for p in pods], lost)
    pids = list(task_pids(containerd_socket(env.cluster, victim)).values())
    assert pids, f"no containers on {victim}"

    failure = kill_node(env, victim)
    try:
        wait_for(lambda: all(process_gone(p) for p in pids), 10, f"{victim}'s containers gone")
        assert not env.status(name, "sink-0").get("eos"), "the node was killed after the end"
        if bound:
            caught_up_within_bound(env, name, catch, failure)
        wait_for(lambda: not node_ready(env.core, victim), 90, f"{victim} NotReady")
        wait_recreated(env, name, lost, victim)
        env.wait_end(name, 300)
        for t in lost:  # the lost tasks really ran again (a new epoch), on another node
            assert env.status(name, t).get("epoch", 0) > catch.epochs[t], t
        n = exact_output(env, name, reference)
    finally:  # the node boots again (its containers gone): the runs after this have three
        env.delete(name)
        result = CliRunner().invoke(app, ["nodes", "revive", victim, "--kubeconfig", env.cluster])
        assert result.exit_code == 0, result.output
        wait_for(lambda: node_ready(env.core, victim), 120, f"{victim} Ready again")
    took = ", ".join(f"{t} {s:.2f}s" for t, s in catch.since(failure).items())
    print(
        f"killed {victim} with {lost}: caught up after {took or '(not watched)'} (steady "
        f"lags {catch.steady}); run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_a_half_dead_node_whose_tasks_write_on_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    """The node's kubelet and containerd are frozen (SIGSTOP) for 60 s while its task
    containers run on: the node turns NotReady, the operator recreates its tasks elsewhere,
    and the old copies (zombies: alive, connected to the store, fenced by the new copies'
    epoch claims) go on until the node comes back and its kubelet stops them."""
    name = "wc-zombie"
    t0 = time.monotonic()
    env.create(name, ZOMBIE_RATE)
    victim, lost, spread = busiest(under_way(env, name))
    assert spread > 1, f"every task on {victim}"
    sock = containerd_socket(env.cluster, victim)
    zombies = list(task_pids(sock).values())
    assert zombies, f"no containers on {victim}"
    epochs = {t: env.status(name, t).get("epoch") for t in lost}
    with frozen_node(sock, victim) as stopped:
        frozen_at = time.monotonic()
        # a signal is delivered asynchronously: the state turns T a moment later
        wait_for(lambda: all(process_stopped(p) for p in stopped), 5, f"{victim} frozen")
        wait_for(lambda: not node_ready(env.core, victim), 90, f"{victim} NotReady")
        wait_recreated(env, name, lost, victim)

        def claimed() -> bool:  # the new copies run: each claimed a newer epoch
            return all(env.status(name, t).get("epoch", 0) > (epochs[t] or 0) for t in lost)

        wait_for(claimed, 60, f"the new copies of {lost} running")
        alive = [p for p in zombies if not process_gone(p)]
        assert alive == zombies, "the frozen node's containers must run on (a half-dead node)"
        time.sleep(max(0.0, 60 - (time.monotonic() - frozen_at)))
    resumed_at = time.monotonic()
    env.wait_end(name, 300)
    wait_for(lambda: all(process_gone(p) for p in zombies), 120, "the zombies stopped")
    n = exact_output(env, name, reference)
    print(
        f"froze {victim} with {lost} for {resumed_at - frozen_at:.0f}s; the zombies lived "
        f"{time.monotonic() - frozen_at:.0f}s; run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_the_object_store_stopped_for_10_s_mid_stream_changes_no_output_line(
    reference: list[str], env: Env
) -> None:
    """The store goes away for 10 s while every task writes checkpoints, batch logs and
    output into it, and comes back with its data: the tasks wait (each call retries up to
    its deadline, 30 s) or restart and restore, and the output is the same."""
    name = "wc-outage"
    t0 = time.monotonic()
    env.create(name, KILL_RATE)
    under_way(env, name)
    env.store.down()
    down_at = time.monotonic()
    time.sleep(10)
    env.store.up()
    outage = time.monotonic() - down_at
    env.wait_end(name, 300)
    restarts = sum(
        c.restart_count for p in env.pods(name) for c in p.status.container_statuses or []
    )
    n = exact_output(env, name, reference)
    print(
        f"store down {outage:.1f}s; {restarts} task restarts; "
        f"run {time.monotonic() - t0:.0f}s, {n} lines"
    )


def test_a_new_input_segment_sorting_between_two_others_is_counted_once(
    env: Env, tmp_path: Path
) -> None:
    """A fourth segment whose name sorts between two others appears in the bucket while the
    stream runs: each of its lines is counted once and no other segment is read again."""
    name = "wc-newfile"
    assert {owner(f"part-{k:02d}.jsonl", 2) for k in (0, 2, 3)} == {0, 1}
    staging, inp = tmp_path / "staging", tmp_path / "input"
    write_input(staging, files=4, per_file=PER_FILE // 2)
    inp.mkdir()
    for k in (0, 2, 3):
        os.replace(staging / f"part-{k:02d}.jsonl", inp / f"part-{k:02d}.jsonl")
    docs = [json.loads(line) for p in inp.glob("*.jsonl") for line in p.read_text().splitlines()]
    end = max(d["ts"] for d in docs)  # the new segment goes on from there: no line is late
    late = [json.loads(line) for line in (staging / "part-01.jsonl").read_text().splitlines()]
    (staging / "part-01.jsonl").write_text(
        "".join(json.dumps({**d, "ts": d["ts"] + end}) + "\n" for d in late)
    )
    location = f"{env.bucket}/{name}/input"
    put_files(location, sorted(inp.glob("*.jsonl")), env=env.s3)
    env.create(name, KILL_RATE / 2, inp=location)
    under_way(env, name, rounds=3)
    reader = f"source-{owner('part-01.jsonl', 2)}"  # sources.owner: its choice, not the test's
    assert not env.status(name, reader).get("eos"), f"too late: {reader} is at its end"
    put_files(location, [staging / "part-01.jsonl"], env=env.s3)
    os.replace(staging / "part-01.jsonl", inp / "part-01.jsonl")
    env.wait_end(name, 300)
    expected = expected_counts(inp)
    assert sum(expected[k] for k in expected if k[0] >= end // 10 * 10 + 10) > 0  # it counts
    n = exact_output(env, name, [], inp)
    assert n == len(expected)


def test_a_task_config_error_and_a_peer_that_never_answers_show_in_the_topology_status(
    env: Env,
) -> None:
    """``count``'s config is invalid: the runtime exits with a configuration error, the
    kubelet restarts it (CrashLoopBackOff, while the pod phase stays Running), and the sink,
    whose producers never answer, turns unready (its readiness probe). The topology's Ready
    condition (``kubectl get st``, ``kubectl describe st``) names both pods and why: the
    runtime's own log line (the termination message) and the producers the sink waits for."""
    name = "wc-bad"
    env.create(name, REF_RATE, broken_count=True)

    def reported() -> dict[str, Any] | None:
        env.alive()
        st = env.custom.get_namespaced_custom_object(
            GROUP, VERSION, env.namespace, "streamtopologies", name
        )
        conds = {c["type"]: c for c in (st.get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready") or {}
        both = "NotAnswering" in ready.get("message", "") and "exit 2" in ready["message"]
        return ready if ready.get("reason") == "TaskFailing" and both else None

    ready = wait_for(reported, 120, f"{name}: Ready=False, reason TaskFailing, both pods")
    assert ready is not None and ready["status"] == "False"
    message = ready["message"]
    # each count task is between two restarts now and then (exited, or waiting to restart)
    assert re.search(rf"{name}--count-[01]: (CrashLoopBackOff|Error) \(exit 2\)", message), message
    assert "config.windowSeconds must be a positive number" in message, message
    assert f"{name}--sink-0: NotAnswering: no answer from count-0: " in message, message
    env.delete(name)


def test_no_task_pod_of_any_run_mounts_a_host_directory(env: Env) -> None:
    """Every task pod the runs above created, the recreated ones included (the module's
    tests run first): the state is in the bucket only."""
    pods = list(env.seen.values())
    assert len(pods) >= 7 + 7 + 4, f"only {len(pods)} task pods seen: did the runs above run?"
    assert host_directories(pods) == []
