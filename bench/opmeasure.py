"""What the operator benchmarks measure on their recorders: timelines, duplicates, problems.

``bench/bench_operator.py`` (one big topology, a fleet) and ``bench/fleetloss.py`` (a fleet
and a node loss) read the same API watches (:mod:`bench.opharness`' recorders) and report
the same figures; the helpers live here so that neither script imports the other's.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any

from bench.opharness import PodRecorder, TopologyRecorder, log

SMALL = (5, 20, 20, 5)
"""A fleet topology's operators: 50 tasks."""


def wait_until(pred: Any, timeout: float, what: str) -> bool:
    """Poll ``pred`` every 0.1 s until it holds (True) or ``timeout`` passes (logged, False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    log(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def last_at(times: list[float | None], n: int) -> float | None:
    """The time the ``n``-th event happened, or None if fewer than ``n`` did."""
    got = sorted(t for t in times if t is not None)
    return got[n - 1] if len(got) >= n else None


def timeline(
    t0: float, name: str, tasks: int, pods: PodRecorder, topos: TopologyRecorder
) -> dict[str, Any]:
    """Seconds from ``t0`` to each phase of topology ``name``: planned, pods, bound, Ready."""
    mine = pods.of(name)
    tt = topos.get(name)

    def rel(t: float | None) -> float | None:
        return None if t is None else t - t0

    added = [p.added for p in mine]
    return {
        "planned": rel(tt.planned),
        "first_pod": rel(min((t for t in added if t is not None), default=None)),
        "all_pods": rel(last_at(added, tasks)),
        "all_bound": rel(last_at([p.bound for p in mine], tasks)),
        "all_running": rel(last_at([p.running for p in mine], tasks)),
        "ready": rel(tt.ready),
        "pods_seen": len(mine),
    }


def duplicates(pods: PodRecorder, name: str, tasks: int) -> dict[str, int]:
    """Tasks with more than one pod name, pod names created more than once, missing tasks."""
    mine = [p for p in pods.of(name) if not p.deleted]
    per_task = Counter(p.task for p in mine)
    return {
        "tasks_with_2+_pods": sum(1 for c in per_task.values() if c > 1),
        "names_created_twice": sum(1 for p in pods.of(name) if len(p.uids) > 1),
        "missing_tasks": tasks - len(per_task),
    }


def sum_dups(dups: list[dict[str, int]]) -> dict[str, int]:
    """The :func:`duplicates` counts of several topologies, added up."""
    return {k: sum(d[k] for d in dups) for k in dups[0]}


def sub(a: float | None, b: float | None) -> float | None:
    """``a - b``, or None when either time is missing."""
    return None if a is None or b is None else a - b


def median(xs: list[float]) -> float | None:
    """The median, or None of nothing."""
    return statistics.median(xs) if xs else None


def dup_text(d: dict[str, int]) -> str:
    """The :func:`duplicates` counts as one line of text."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in d.items())


def problem_lines(found: list[str]) -> list[str]:
    """The operator log's distinct warning/error lines, most frequent first (markdown)."""
    if not found:
        return []
    counts = Counter(found)
    out = ["Distinct warning/error lines:", ""]
    out += [f"- {c}× `{msg}`" for msg, c in counts.most_common(8)]
    return [*out, ""]
