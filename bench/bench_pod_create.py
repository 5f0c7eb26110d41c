#!/usr/bin/env python3
"""How fast the API server takes task pods, by how many are created at once.

Why: the operator creates a 10k-task topology's pods 8 at a time
(``backstop.k8s.kubeio.API_CONCURRENCY``); the question is whether more at once would
be faster, i.e. whether the width or the API server limits the rate. This creates the
operator's own task pods (``desired_pods`` of ``bench_scale``'s topology) with the
operator's client, ``--widths`` at a time, the answer read but not parsed (as the
operator does), with a ``schedulerName`` no scheduler serves, so only the creations are
measured (no binding, no simulated kubelet). Prints one line per width.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client

from backstop.domain.spec import expand, parse_spec
from backstop.k8s.cluster import api_client
from backstop.k8s.manifests import Owner, desired_pods
from bench.bench_scale import default_kubeconfig, scale_topology


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", default=default_kubeconfig())
    p.add_argument("--pods", type=int, default=300, help="pods per width")
    p.add_argument("--widths", default="8,16,32", help="creations at once, comma-separated")
    args = p.parse_args(argv)
    core = client.CoreV1Api(api_client(args.kubeconfig))
    ns = f"bench-create-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": ns}})
    shape = argparse.Namespace(
        operators=10,
        parallelism=max(1, args.pods // 10),
        cpu="100m",
        latency=0.5,
        bound=3.0,
        algorithm="rtap-ff",
        grace=1.0,
    )
    model = parse_spec(scale_topology("t", "pool", shape)["spec"])
    graph = expand(model)
    owner = Owner(name="t", namespace=ns, uid="u")
    try:
        time.sleep(2)  # the namespace's default ServiceAccount
        for width in (int(w) for w in args.widths.split(",")):
            pods = desired_pods(owner, model, graph, frozenset(), dict.fromkeys(graph.tasks, "x"))
            manifests: list[dict[str, Any]] = []
            for m in pods.values():
                meta = {**m["metadata"], "name": m["metadata"]["name"] + f"-w{width}"}
                meta.pop("ownerReferences", None)
                spec = {**m["spec"], "schedulerName": "none"}
                manifests.append({**m, "metadata": meta, "spec": spec})

            def create(m: dict[str, Any]) -> None:
                resp = core.create_namespaced_pod(ns, m, _preload_content=False)
                resp.read()
                resp.release_conn()

            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            cpu, t0 = time.process_time(), time.perf_counter()
            with ThreadPoolExecutor(width) as pool:
                list(pool.map(create, manifests))
            took = time.perf_counter() - t0
            print(
                f"{width} at a time: {len(manifests)} pods in {took:.2f} s = "
                f"{len(manifests) / took:.0f}/s (client CPU {time.process_time() - cpu:.2f} s; "
                f"load before {load})",
                flush=True,
            )
    finally:
        core.delete_namespace(ns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
