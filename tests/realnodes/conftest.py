"""The word count's environment on three real nodes, started once for the package.

Every module here that runs the word count on real nodes (``test_runtime_real_*.py``)
shares one :class:`~tests.realnodes.wordcount_env.Env` and one reference run: the nodes,
the store and the operator start when the first of them asks and stop after the last
test of the package. Modules that start their own nodes do not ask for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from backstop_testkit.support.runtime_data import output_lines
from tests.realnodes.wordcount_env import REF_RATE, Env, host_directories, open_env


@pytest.fixture(scope="package")
def env(
    cluster: str, kube: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    with open_env(cluster, kube, tmp_path_factory.mktemp("wordcount")) as e:
        yield e


@pytest.fixture(scope="package")
def reference(env: Env) -> list[str]:
    """The sink's lines from a run without failure."""
    t0 = time.monotonic()
    env.create("wc-ref", REF_RATE)
    env.wait_end("wc-ref", 240)
    pods = env.pods("wc-ref")
    assert len(pods) == 7
    assert all(p.spec.node_name in env.nodes for p in pods), "every task on a real node"
    assert host_directories(pods) == []
    lines = output_lines(env.output("wc-ref"), env.s3)
    env.delete("wc-ref")
    print(f"reference run: {time.monotonic() - t0:.0f}s, {len(lines)} lines")
    return lines
