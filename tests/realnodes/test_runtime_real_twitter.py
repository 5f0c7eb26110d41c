"""The twitter-sentiment example on REAL nodes: every task lost with a node back within R.

The package's shared environment (``wordcount_env.py``: three real nodes, SeaweedFS outside
them, the operator as a host process) runs a copy of ``examples/twitter-sentiment.yaml`` (14
tasks, its own recovery terms and bound; its state, tweet log and both queries' output in
the store's bucket) while a tweet generator appends one segment per partition each second
(``python -m backstop_runtime.examples.tweets ... --follow``, as ``make demo`` and the e2e
run it). Once every task has caught up with its input and the stream has run steady for a
few seconds (each task's median lag), the node with the most tasks is killed with the test
kit's ``nodes kill``. Counted from the moment its first container process is gone, each task
lost with it must be caught up again (a new store epoch, a round past its restored one, its
lag within its steady median plus 0.5 s: :mod:`backstop_testkit.support.catchup`) within the
topology's ``recoveryLatencyBound``, as the README promises for any single-node failure.

The operator restores a bound the recovery left broken only once R has passed since the
loss (a moved ``merge-0`` would make the tasks that replay through it wait again), and the
run starts once the pods of the runs before it are gone (their CPU would leave the lost
tasks no room: ``Env.settled``). When a task is not caught up in time, the pods' logs are
saved under the test's ``tmp_path`` and the failure names the recovery's record and Events.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from backstop.domain.constants import GROUP
from backstop_testkit.cli import app
from backstop_testkit.support.kubetools import node_ready, wait_for
from backstop_testkit.support.runtime_data import ROOT, bucket_manifest, follow_tweets
from tests.realnodes.wordcount_env import (
    POOL,
    SECRET,
    STATE,
    Env,
    busiest,
    caught_up_within_bound,
    kill_node,
    watch_lost,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

TWITTER = ROOT / "examples" / "twitter-sentiment.yaml"
NAME, TASKS = "tw-kill", 14
RATE = 50.0  # tweets a second, in all (half the bench's: less CPU on a shared host)


def running(env: Env) -> list[Any] | None:
    """Every task pod Running; else ``None``."""
    env.alive()
    pods = [p for p in env.pods(NAME) if p.status.phase == "Running"]
    return pods if len(pods) == TASKS else None


def caught_up_once(env: Env, tasks: list[str]) -> None:
    """Wait until every task has caught up with the tweet log once (``recoverySeconds``
    set: the backlog from before it started worked off), so the steady stream follows."""
    behind: dict[str, Any] = {}  # task: its lag, while it has not caught up once

    def started() -> bool:
        env.alive()
        now = {t: env.status(NAME, t) for t in tasks}
        behind.clear()
        behind.update({t: s.get("lag") for t, s in now.items() if s.get("recoverySeconds") is None})
        return not behind

    try:
        wait_for(started, 180, f"every task of {NAME} caught up with its input", 0.5)
    except AssertionError as err:
        raise AssertionError(f"{err}; behind (task: lag): {behind}") from None


def test_every_task_lost_with_the_busiest_node_is_caught_up_within_the_bound(
    env: Env, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    doc = bucket_manifest(
        TWITTER, NAME, env.s3["BACKSTOP_S3_BUCKET"], (STATE, SECRET), {POOL: env.nodes[0]}
    )
    errors = tmp_path / "tweets.log"
    gen = follow_tweets(f"{env.bucket}/{NAME}/input", env.s3, RATE, 600, errors)
    victim = ""
    try:
        env.settled()  # the runs before are gone: the lost tasks may use the CPU they held
        env.submit(doc)
        pods = wait_for(lambda: running(env), 240, f"the {TASKS} tasks of {NAME} running", 0.5)
        assert pods is not None
        assert all(p.spec.node_name in env.nodes for p in pods), "every task on a real node"
        victim, lost, _ = busiest(pods)
        tasks = [p.metadata.labels[f"{GROUP}/task"] for p in pods]
        caught_up_once(env, tasks)
        catch = watch_lost(env, NAME, tasks, lost)
        assert gen.poll() is None, f"the tweet generator exited:\n{errors.read_text()}"
        failure = kill_node(env, victim)
        try:
            bound = caught_up_within_bound(env, NAME, catch, failure)
        except AssertionError:
            print(f"the pods' logs: {env.save_logs(NAME, tmp_path / 'logs')}")
            raise
        assert gen.poll() is None, f"the tweet generator exited:\n{errors.read_text()}"
        took = ", ".join(f"{t} {s:.2f}s" for t, s in catch.since(failure).items())
        print(f"\nkilled {victim} with {len(lost)} of {TASKS} tasks: caught up after {took} "
              f"(R {bound:g}s; steady lags {catch.steady})")  # fmt: skip
    finally:
        gen.terminate()
        gen.wait()
        env.delete(NAME)
        if victim:
            result = CliRunner().invoke(
                app, ["nodes", "revive", victim, "--kubeconfig", env.cluster]
            )
            assert result.exit_code == 0, result.output
            wait_for(lambda: node_ready(env.core, victim), 120, f"{victim} Ready again")
    print(f"run {time.monotonic() - t0:.0f}s")
