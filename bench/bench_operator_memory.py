#!/usr/bin/env python3
"""Where the operator's memory goes with many task pods: each pod cache measured, in-process.

Why (the target: the operator's RSS under 300 MiB with 10k pods): the end-to-end run
(``bench_scale.py``) saw 1.5 GiB with 10k pods, and which cache held how much was
inferred, never measured. This feeds ``--pods`` task pods of one topology (``--operators``
× parallelism, forward chains; the operator's own manifests given a server's
``managedFields``, ``nodeName`` and status, as ``bench_caches.py`` does) through the
REAL code of each cache, one stage after the other, each stage kept alive:

* **Kopf's pod index**: :func:`backstop.controller.handlers.pods_by_topology` on a
  ``kopf.Body`` of each watch event, stored in a ``kopf`` ``Index`` as Kopf stores it;
* **Kopf's per-object memory**: ``ResourceMemories.recall`` with the operator's memo
  (Kopf keeps one per watched object, pods included);
* **the capacity ledger** via the pod feed's event path (:meth:`PodFeed.apply`);
* **the planned-pods cache** of a tick (:func:`backstop.controller.tick.planned_pods`);
* **a supervisor tick's transients** over the indexed pods: what converge reads when
  the pods do not match the plan (``fenced_tasks`` and ``diff_pods``; on a tree whose
  ``kubeio.pod_models`` exists, after making ``V1Pod`` models of every indexed pod, as
  that tree does), and ``pod_states``.

The watch events themselves are parsed one at a time and dropped (as the watch does).
Reported per stage: what it retains (``tracemalloc``, traced pass) with its top
allocation sites, its transient peak, and the process's RSS after it (untraced pass,
after ``gc.collect()``). ``--imports`` adds the RSS after importing what the operator
imports at start, before any pod. Prints markdown; ``--out`` writes its page,
``docs/benchmarks/operator-memory.md`` (``--out FILE``: that file).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop_testkit.support.docsection import emit
from bench.procstat import loadavg, rss_mib

HEADING = "## Operator memory with many pods (in-process, per cache)"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "operator-memory.md"
"""This benchmark's generated page (``--out`` with no path writes it)."""
COMMAND = "python bench/bench_operator_memory.py --out"


def server_pod(manifest: dict[str, Any], node: str) -> dict[str, Any]:
    """``manifest`` as the API server sends it back once scheduled and Running."""
    pod: dict[str, Any] = json.loads(json.dumps(manifest))
    name = pod["metadata"]["name"]
    pod["metadata"].update(
        uid=f"{name}-uid",
        resourceVersion="12345",
        creationTimestamp="2026-11-26T12:00:00Z",
        managedFields=[
            {"manager": m, "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-26T12:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:status": {}}}
            for m in ("backstop", "kube-scheduler", "backstop-nodesim")
        ],
    )  # fmt: skip
    pod["spec"].update(nodeName=node, schedulerName="default-scheduler",
                       serviceAccountName="default", dnsPolicy="ClusterFirst",
                       restartPolicy="Always", terminationGracePeriodSeconds=30)  # fmt: skip
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2026-11-26T12:00:01Z"}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": "10.0.0.2",
        "podIP": "10.89.0.7",
        "podIPs": [{"ip": "10.89.0.7"}],
        "startTime": "2026-11-26T12:00:01Z",
        "qosClass": "Burstable",
        "containerStatuses": [
            {"name": "task", "ready": True, "started": True, "restartCount": 0,
             "image": "backstop-runtime:dev", "imageID": "docker://sha256:0123",
             "containerID": "containerd://0123",
             "lastState": {}, "state": {"running": {"startedAt": "2026-11-26T12:00:01Z"}}}
        ],
    }  # fmt: skip
    return pod


def topology(operators: int, parallelism: int) -> tuple[Any, Any, Any, dict[str, str]]:
    """``(owner, model, graph, assignment)`` of a forward-chain topology on 32-CPU nodes."""
    from backstop.domain.spec import expand, parse_spec
    from backstop.k8s.manifests import Owner

    ops = [
        {
            "name": f"op{i}",
            "parallelism": parallelism,
            "resources": {"cpu": "100m", "memory": "32Mi"},
            "reprocessingLatency": 0.5,
            "inputs": [] if i == 0 else [{"operator": f"op{i - 1}", "grouping": "forward"}],
        }
        for i in range(operators)
    ]
    model = parse_spec({"image": "backstop-runtime:dev", "recoveryLatencyBound": 3.0,
                        "operators": ops})  # fmt: skip
    graph = expand(model)
    assignment = {t: f"n{i // 250:03d}" for i, t in enumerate(graph.tasks)}
    return Owner("big", "ns", "uid-big"), model, graph, assignment


class Stages:
    """Run named stages in order; each returns what it keeps alive (or ``None``)."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced
        self.kept: list[Any] = []
        self.rows: list[dict[str, Any]] = []

    def run(self, name: str, fn: Callable[[], Any], transient: bool = False) -> Any:
        gc.collect()
        if self.traced:
            tracemalloc.reset_peak()
            before = tracemalloc.take_snapshot()
            base = tracemalloc.get_traced_memory()[0]
        t = time.process_time()
        out = fn()
        cpu = time.process_time() - t
        if transient:
            out = None  # dropped, as the tick drops it
        gc.collect()
        row: dict[str, Any] = {"stage": name, "cpu": cpu, "rss": rss_mib()}
        if self.traced:
            cur, peak = tracemalloc.get_traced_memory()
            row["kept"] = (cur - base) / 2**20
            row["peak"] = (peak - base) / 2**20
            if not transient:
                diff = tracemalloc.take_snapshot().compare_to(before, "lineno")
                row["top"] = [
                    (s.traceback[0].filename, s.traceback[0].lineno, s.size_diff / 2**20)
                    for s in diff[:3]
                ]
        self.rows.append(row)
        self.kept.append(out)
        return out


def events(pods: list[str]) -> Iterator[dict[str, Any]]:
    """The watch's events: each pod parsed from its JSON text, one at a time."""
    for text in pods:
        yield json.loads(text)


def done(coro: Any) -> Any:
    """The result of a coroutine that never waits (Kopf's async index functions)."""
    if not asyncio.iscoroutine(coro):
        return coro
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the index function waited")


def _pod_index(texts: list[str]) -> Any:
    """Kopf's pod index, filled by ``pods_by_topology`` from every watch event."""
    import kopf
    from kopf._core.engines.indexing import Index

    from backstop.controller import handlers

    idx: Any = Index()
    for raw in events(texts):
        body = kopf.Body(cast(kopf.RawBody, raw))
        meta = raw["metadata"]
        value = done(
            handlers.pods_by_topology(  # type: ignore[call-arg]
                namespace=meta["namespace"], labels=body.metadata.labels, body=body
            )
        )
        idx._replace((meta["namespace"], meta["name"]), value)
    return idx


def _memories(texts: list[str]) -> Any:
    """Kopf's per-object memory, one recalled per watch event."""
    import kopf
    from kopf._core.reactor.inventory import ResourceMemories

    mem = ResourceMemories()
    memobase: Any = kopf.Memo(ledger=None, metrics=None)

    async def recall() -> None:
        for raw in events(texts):
            await mem.recall(cast(Any, raw), memobase=memobase, noticed_by_listing=True)

    asyncio.run(recall())
    return mem


def _ledger(api: Any, texts: list[str]) -> Any:
    """The capacity ledger, fed every watch event through the pod feed."""
    from backstop.k8s.ledger import CapacityLedger
    from backstop.k8s.podfeed import PodFeed

    led = CapacityLedger()
    feed = PodFeed(api, led)
    for raw in events(texts):
        feed.apply("ADDED", raw)
    return led


def _tick_stages(
    s: Stages, top: tuple[Any, Any, Any, dict[str, str]], api: Any, idx: Any, texts: list[str]
) -> None:
    """A tick's planned-pods cache, then its transients over the indexed pods."""
    from backstop.controller.memo import TopologyMemo
    from backstop.controller.tick import Tick, planned_pods, pod_states
    from backstop.domain.constants import LABEL_TOPOLOGY
    from backstop.domain.fencing import fenced_tasks
    from backstop.domain.planning import diff_pods
    from backstop.domain.status import PlanStatus, TopologyStatus
    from backstop.k8s import kubeio

    owner, model, graph, assignment = top
    key = (owner.namespace, owner.name)
    plan = PlanStatus(generation=1, assignment=assignment, backups=[], bound=3.0)
    tick = Tick(
        kube=None,  # type: ignore[arg-type]
        owner=owner, model=model, graph=graph, generation=1,
        status=TopologyStatus(plan=plan), nodes={}, emit=lambda *_: None,
        ledger=None,  # type: ignore[arg-type]
        memory=TopologyMemo(),
    )  # fmt: skip
    s.run("planned-pods cache (`tick.planned_pods`)", lambda: planned_pods(tick, plan) and tick)
    indexed = list(idx.get(key, []))
    desired = planned_pods(tick, plan)

    def converge_reads() -> Any:
        # what converge reads when the pods do not match the plan; a tree whose kubeio
        # has ``pod_models`` converts the indexed pods into ``V1Pod`` models first
        models = getattr(kubeio, "pod_models", None)
        existing = indexed if models is None else models(api, indexed)
        dead = {"n000"}
        return (fenced_tasks(existing, desired, dead), diff_pods(desired, existing, dead))

    s.run("tick: converge's reads of the indexed pods (transient)", converge_reads, transient=True)
    s.run("tick: `pod_states` (transient)", lambda: pod_states(indexed), transient=True)
    assert len(indexed) == len(texts), (len(indexed), len(texts), LABEL_TOPOLOGY)


def run_stages(args: argparse.Namespace, texts: list[str], traced: bool) -> Stages:
    from kubernetes import client

    s = Stages(traced)
    api = client.ApiClient()
    idx = s.run("Kopf's pod index (`pods_by_topology`)", lambda: _pod_index(texts))
    top = topology(args.operators, args.parallelism)
    s.run("Kopf's per-object memory (`ResourceMemories`)", lambda: _memories(texts))
    s.run("capacity ledger (pod feed events)", lambda: _ledger(api, texts))
    _tick_stages(s, top, api, idx, texts)
    return s


def build_pods(args: argparse.Namespace) -> list[str]:
    from backstop.domain.constants import ANN_NODE
    from backstop.k8s.manifests import desired_pods

    owner, model, graph, assignment = topology(args.operators, args.parallelism)
    manifests = desired_pods(owner, model, graph, frozenset(), assignment)
    return [
        json.dumps(server_pod(m, m["metadata"]["annotations"][ANN_NODE]))
        for m in manifests.values()
    ]


def render(args: argparse.Namespace, imports: float | None, start: float, plain: Stages,
           traced: Stages, texts: list[str], loads: tuple[str, str]) -> str:  # fmt: skip
    n = len(texts)
    avg = sum(len(t) for t in texts) / n
    lines = [
        HEADING,
        "",
        f"Generated by `python bench/bench_operator_memory.py --operators {args.operators} "
        f"--parallelism {args.parallelism}`: {n} task pods of one topology, each "
        f"{avg / 1024:.1f} KiB of JSON as the API server sends it (`managedFields`, node, "
        "Running status), fed through each cache's real code one stage after the other, "
        "every stage kept alive. RSS: untraced pass, after `gc.collect()`; kept / peak and "
        "the top allocation sites: `tracemalloc`, a second pass. "
        f"Load average before: {loads[0]}; after: {loads[1]} (2 cores shared).",
        "",
    ]
    if imports is not None:
        lines += [f"RSS at start: {start:.0f} MiB; after importing the operator's modules "
                  f"(`backstop.cli.operator`'s imports): {imports:.0f} MiB.", ""]  # fmt: skip
    lines += [
        "| stage | kept MiB | transient peak MiB | per pod (bytes) | RSS after (MiB) | CPU s "
        "| top allocation sites (MiB) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for p, t in zip(plain.rows, traced.rows, strict=True):
        top = "; ".join(
            f"`{Path(f).parent.name}/{Path(f).name}:{ln}` {mib:.1f}"
            for f, ln, mib in t.get("top", [])
        )
        lines.append(
            f"| {p['stage']} | {t['kept']:.1f} | {t['peak']:.1f} | "
            f"{t['kept'] * 2**20 / n:,.0f} | {p['rss']:.0f} | {p['cpu']:.2f} | {top} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--operators", type=int, default=10)
    p.add_argument("--parallelism", type=int, default=1000)
    p.add_argument(
        "--out",
        type=Path,
        nargs="?",
        const=PAGE,
        help="write its page (no path: its own under docs/benchmarks/)",
    )
    args = p.parse_args(argv)
    load0 = loadavg()
    start = rss_mib()
    import backstop.cli.operator  # noqa: F401  (what `backstop operator` imports)
    from backstop.controller import handlers  # noqa: F401

    imports = rss_mib()
    texts = build_pods(args)
    gc.collect()
    plain = run_stages(args, texts, traced=False)
    del plain.kept[:]
    gc.collect()
    tracemalloc.start()
    traced = run_stages(args, texts, traced=True)
    tracemalloc.stop()
    section = render(args, imports, start, plain, traced, texts, (load0, loadavg()))
    return emit(section, args.out, HEADING, command=COMMAND)


if __name__ == "__main__":
    raise SystemExit(main())
