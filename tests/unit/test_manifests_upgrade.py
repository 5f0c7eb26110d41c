"""An operator upgrade restarts no task pod: the pods it wants keep the spec-hash that the
previous operator wrote on the running ones.

The expected hashes were written by the operator at commit 6044a17 (whose pods pinned by the
``kubernetes.io/hostname`` label and named the hash grouping ``shuffle``) for the topology
below; the operator compares a running pod's hash with the wanted one and replaces the pod
when they differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from backstop.domain.constants import ANN_HASH, ANN_NODE
from backstop.domain.pinning import pinned_node
from backstop.domain.spec import expand, parse_spec
from backstop.k8s.manifests import Owner, desired_pods

PREVIOUS = {
    "wc--count-0": "527a707aa2b506dd",
    "wc--count-0--r0": "f2aaba47eb7ad369",
    "wc--count-1": "219d76d5f2e47ee3",
    "wc--sink-0": "39edbe7f0906de2e",
    "wc--src-0": "47e9c214aa7a83b2",
    "wc--src-1": "a3612e5d89dd59fe",
}


def pods(grouping: str) -> dict[str, dict[str, Any]]:
    spec = parse_spec({
        "image": "img", "recoveryLatencyBound": 10,
        "operators": [
            {"name": "src", "parallelism": 2, "reprocessingLatency": 1},
            {"name": "count", "parallelism": 2, "reprocessingLatency": 1,
             "inputs": [{"operator": "src", "grouping": grouping}]},
            {"name": "sink", "reprocessingLatency": 1,
             "inputs": [{"operator": "count", "grouping": "global"}]},
        ],
    })  # fmt: skip
    graph = expand(spec)
    where = {t: f"node-{i % 2}" for i, t in enumerate(graph.tasks)}
    return desired_pods(
        Owner("wc", "ns", "uid-1"), spec, graph, frozenset({"src-1"}), where,
        replicas={"count-0": ["node-1"]}, epochs={"count-1": 2},
    )  # fmt: skip


@pytest.mark.parametrize("grouping", ["shuffle", "key", "fields"])
def test_pods_pinned_by_name_keep_the_hash_of_pods_pinned_by_hostname(grouping: str) -> None:
    """... and a stored ``shuffle`` renamed ``key`` or ``fields`` restarts no pod either."""
    wanted = pods(grouping)
    assert {n: p["metadata"]["annotations"][ANN_HASH] for n, p in wanted.items()} == PREVIOUS
    for pod in wanted.values():  # pinned by the Node's name now, on the node planned
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [list(t) for t in terms] == [["matchFields"]]
        assert pinned_node(pod["spec"]) == pod["metadata"]["annotations"][ANN_NODE]
