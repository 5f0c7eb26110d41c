"""The capacity ledger's pod feed over several namespaces (:mod:`backstop.k8s.podfeed`).

An operator that serves some namespaces reads pods there only: one list/watch per
namespace, merged in the ledger. The watches run through the real
:class:`backstop.k8s.listwatch.ListWatch` loop against the fake API server of
``tests/unit/test_listwatch.py`` (JSON pages, JSON-line watch streams decoded by the
kubernetes client's own ``Watch``). Expected capacities are the test's own sums of
the requests it scripted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client

from backstop.k8s.ledger import CapacityLedger, Resources
from backstop.k8s.podfeed import PodFeed, pod_sources
from tests.unit.test_ledger import GI, pod
from tests.unit.test_listwatch import Server, page

ALLOC = {"n0": Resources(1.0, GI, 110), "n1": Resources(1.0, GI, 110)}


def versioned(p: dict[str, Any], version: str) -> dict[str, Any]:
    return {**p, "metadata": {**p["metadata"], "resourceVersion": version}}


def test_each_namespace_gets_its_own_pod_list_and_watch() -> None:
    """Served namespaces: the client's namespaced pod list, once per namespace (a name
    given twice is watched once); no namespace: the cluster-wide list."""
    core = client.CoreV1Api(client.ApiClient())
    sources = pod_sources(core, ["a", "b", "a"])
    assert list(sources) == ["a", "b"]
    for ns, source in sources.items():
        assert source.call.__func__ is client.CoreV1Api.list_namespaced_pod  # type: ignore[attr-defined]
        assert source.selectors == {"namespace": ns}
    (everywhere,) = pod_sources(core, ()).values()
    assert everywhere.call.__func__ is client.CoreV1Api.list_pod_for_all_namespaces  # type: ignore[attr-defined]
    assert everywhere.selectors == {}


class GatedServer(Server):
    """A :class:`Server` whose listings wait for ``gate``: a namespace that lists late."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.gate = threading.Event()

    def list_pods(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            assert self.gate.wait(10)
        return super().list_pods(**kwargs)


def free_cpu(ledger: CapacityLedger) -> dict[str, float]:
    return {n: round(f.cpu, 6) for n, f in ledger.free(ALLOC).items()}


def test_the_namespaces_watches_merge_into_one_ledger() -> None:
    """Each namespace's list then watch feeds the one ledger; planners may book only once
    every namespace has listed (a booking before would miss the late namespace's pods);
    a namespace's new listing replaces its own pods and leaves the others'."""
    p1 = versioned(pod("a", "p1", "n0", "300m", "1Mi"), "3")
    p2 = versioned(pod("a", "p2", "n1", "200m", "1Mi"), "6")
    q1 = versioned(pod("b", "q1", "n0", "500m", "1Mi"), "4")
    late = GatedServer([[page("5", [q1])]], [[]])
    servers: dict[str | None, Server] = {
        "a": Server([[page("5", [p1])]], [[{"type": "ADDED", "object": p2}]]),
        "b": late,
    }
    ledger = CapacityLedger()
    feed = PodFeed(client.ApiClient(), ledger, ["a", "b"])
    for ns, source in feed.sources.items():
        source.call, source.retry_after = servers[ns].list_pods, 60.0
    feed.start()
    try:
        deadline = time.monotonic() + 10
        while free_cpu(ledger) != {"n0": 0.7, "n1": 0.8} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert free_cpu(ledger) == {"n0": 0.7, "n1": 0.8}, "namespace a's list and watch"
        assert not ledger.synced.is_set(), "synced before namespace b listed"
        late.gate.set()
        assert ledger.synced.wait(10)
        assert free_cpu(ledger) == pytest.approx({"n0": 0.2, "n1": 0.8})
    finally:
        feed.stop()
        for thread in feed._threads:  # no watch thread outlives the test (nor logs after it)
            thread.join(10)
    assert not any(t.is_alive() for t in feed._threads), "a watch ignored the stop"
    for ns, server in servers.items():
        assert server.calls and all(c["namespace"] == ns for c in server.calls)
    feed.relist(iter([]), "a")  # namespace a lists empty: b's pod stays
    assert free_cpu(ledger) == pytest.approx({"n0": 0.5, "n1": 1.0})
