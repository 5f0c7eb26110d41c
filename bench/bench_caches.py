#!/usr/bin/env python3
"""What a reconcile's view of the cluster costs: a LIST of every pod vs the watch caches.

Why: a LIST per reconcile and restore of every node and every pod of the cluster
costs seconds and hundreds of MiB at thousands of pods, and so does deserializing a
listing into ``V1Pod`` models. The operator's view comes from the node index, the
capacity ledger and the pod index, and the pod feed reads its listing in pages of
plain JSON.

This measures both ways in-process, without an API server (the server's share is the
same for both: one LIST per relisting): ``pods`` task pods as the API server returns
them (built by the operator's own manifest builder, then given ``managedFields``, a
``nodeName`` and a status) on ``nodes`` nodes, as one JSON ``PodList``.

* **LIST → models** (the alternative, for comparison): the client's deserialization of
  the list into ``V1Pod`` models, back to dicts, ``nodes_from_manifests``.
* **pages → ledger** (the pod feed): ``json.loads`` page by page into
  :meth:`CapacityLedger.relisting`.
* **cache view** (a reconcile): :func:`backstop.controller.capacity.topology_view`.

CPU seconds (``time.process_time``, so the machine's load matters less) and the peak of
Python allocations (``tracemalloc``). Prints a markdown section; ``--out`` writes its
page, ``docs/benchmarks/caches.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client

from backstop.controller.capacity import topology_view
from backstop.domain.constants import ANN_NODE
from backstop.domain.incidents import for_topology, node_info
from backstop.domain.spec import expand, parse_spec
from backstop.k8s.ledger import CapacityLedger
from backstop.k8s.manifests import Owner, desired_pods
from backstop.k8s.nodes import nodes_from_manifests
from backstop_testkit.support.docsection import emit
from bench.opharness import chain_topology
from bench.procstat import cpu_and_peak, loadavg

HEADING = "## Operator: the cluster view, LIST vs watch caches"
DOC_PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "caches.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_caches.py --out"
PAGE = 500


def cluster(pods: int, nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(node dicts, pod dicts)``: task pods of 50-task topologies, round-robin on nodes."""
    node_docs = [
        {
            "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {"pool": "p"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(nodes)
    ]
    doc = chain_topology("t", "p", (5, 20, 20, 5), cpu="100m", bound=2.0)
    model = parse_spec(doc["spec"])
    graph = expand(model)
    out: list[dict[str, Any]] = []
    for t in range(pods // len(graph.tasks) + 1):
        owner = Owner(name=f"t{t}", namespace="ns", uid=f"u{t}")
        where = {task: f"n{(t + i) % nodes}" for i, task in enumerate(graph.tasks)}
        for manifest in desired_pods(owner, model, graph, frozenset(), where).values():
            pod = json.loads(json.dumps(manifest))
            node = pod["metadata"]["annotations"][ANN_NODE]
            pod["metadata"].update(
                uid=f"{pod['metadata']['name']}-uid",
                resourceVersion="1",
                creationTimestamp="2026-11-26T12:00:00Z",
                managedFields=[
                    {"manager": m, "operation": "Update", "fieldsV1": {"f:metadata": {}}}
                    for m in ("backstop", "kube-scheduler", "backstop-nodesim")
                ],
            )
            pod["spec"]["nodeName"] = node
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "podIP": "10.0.0.1",
                "containerStatuses": [
                    {"name": "task", "ready": True, "restartCount": 0, "image": "x",
                     "imageID": "", "state": {"running": {"startedAt": "2026-11-26T12:00:01Z"}}}
                ],
            }  # fmt: skip
            out.append(pod)
            if len(out) == pods:
                return node_docs, out
    return node_docs, out


def run(pods: int, nodes: int) -> dict[str, Any]:
    node_docs, pod_docs = cluster(pods, nodes)
    api = client.ApiClient()
    listing = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "9"},
                          "items": pod_docs})  # fmt: skip
    pages = [
        json.dumps({"metadata": {"resourceVersion": "9"}, "items": pod_docs[i : i + PAGE]})
        for i in range(0, len(pod_docs), PAGE)
    ]
    del pod_docs

    def old() -> int:
        items = api.deserialize(listing, "V1PodList", "application/json").items
        others = [api.sanitize_for_serialization(p) for p in items]
        for d in others:
            d["kind"] = "Pod"
        return len(nodes_from_manifests(node_docs, None, pods=others))

    ledger = CapacityLedger()

    def feed() -> int:
        with ledger.relisting() as observe:
            for page in pages:
                for pod in json.loads(page)["items"]:
                    observe(pod)
        return ledger.pod_count()

    doc = chain_topology("me", "p", (5, 20, 20, 5), cpu="100m", bound=2.0)
    model = parse_spec(doc["spec"])
    index = {d["metadata"]["name"]: node_info(d) for d in node_docs}
    me = Owner(name="me", namespace="ns", uid="me")

    def view() -> int:
        return len(topology_view(ledger, for_topology(index, model), model, me, []).nodes)

    return {
        "pods": pods,
        "nodes": nodes,
        "list_mib": len(listing) / 2**20,
        "old": cpu_and_peak(old)[:2],
        "feed": cpu_and_peak(feed)[:2],
        "view": cpu_and_peak(view)[:2],
    }


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        HEADING,
        "",
        "Generated by `python bench/bench_caches.py --out`, in-process "
        f"(2 cores shared; load average {loadavg()}). "
        "CPU seconds and peak Python allocations; the pods are the operator's own task "
        "pods with a server's `managedFields`, `nodeName` and status.",
        "",
        "| pods | nodes | PodList JSON | LIST → models → view (before): CPU s / peak MiB | "
        "pages → ledger (the feed now) | cache view (a reconcile now) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pods']} | {r['nodes']} | {r['list_mib']:.1f} MiB | "
            f"{r['old'][0]:.2f} / {r['old'][1]:.0f} | {r['feed'][0]:.2f} / {r['feed'][1]:.0f} | "
            f"{r['view'][0]:.4f} / {r['view'][1]:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--pods", type=int, nargs="+", default=[1000, 5000, 10000])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=DOC_PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    rows = [run(n, args.nodes) for n in args.pods]
    section = render(rows)
    return emit(section, args.out, HEADING, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
