"""Object sizes at the ceiling, before and after the compact encodings, and the session
ConfigMap's build time (it is rebuilt on every supervision tick while a session runs).

The scenarios are :mod:`backstop_testkit.cases.object_sizes`
(``tests/unit/test_object_sizes.py`` asserts the limits on them; this prints the figures of
``docs/scale.md``). "Before" is the plain form the operator
wrote until then: the status's dump, and ``session.json`` format 1 (names, indented),
rebuilt here from the same replay sources. Sizes count what etcd stores: the JSON plus,
for the status, the ``managedFields`` entry per map key.

    python bench/bench_object_sizes.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backstop.domain.incidents import replay_sources
from backstop.domain.spec import expand
from backstop.k8s.sessionmap import build_session_configmap
from backstop_testkit.cases import object_sizes as cases


def _format1(
    graph: Any, backups: list[str], session: dict[str, Any], epochs: dict[str, int]
) -> int:
    """The size of ``session.json`` as format 1 wrote it (every task by name, indented)."""
    failed = set(session["sessionFailed"])
    doc = {
        "session": session["session"],
        "phase": "Recovering",
        "step": session["step"],
        "lostNodes": sorted(session["lost"]),
        "checkpoint": {"restore": "latest-before", "before": session["startedAt"]},
        "adaptiveBuffering": True,
        "orderPreserving": True,
        "replay": {
            t: replay_sources(graph, backups, failed, t) for t in sorted(session["recovered"])
        },
        "pending": sorted(session["failed"]),
        "epochs": dict(sorted(epochs.items())),
    }
    return len(json.dumps(doc, indent=2, sort_keys=True))


def _session_case(
    name: str, spec: Any, backups_of: Any, failed_of: Any, recovered_of: Any, epochs_of: Any
) -> dict[str, Any]:
    graph = expand(spec)
    failed = failed_of(graph)
    backups = backups_of(graph)
    recovered = recovered_of(graph, failed)
    kept = set(recovered)
    session = cases.session(graph, failed, recovered, [t for t in failed if t not in kept])
    epochs = epochs_of(failed)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        cm = build_session_configmap(cases.OWNER, graph, backups, session, epochs)
        times.append(time.perf_counter() - t0)
    return {
        "case": name,
        "before": _format1(graph, backups, session, epochs),
        "after": len(cm["data"]["session.json"]),
        "build_s": statistics.median(times),
    }


def main() -> None:
    rows = [
        _session_case(
            "session ConfigMap, 300x300 shuffle, all lost, no backups",
            cases.shuffle(300, 300),
            lambda g: [],
            lambda g: list(g.tasks),
            lambda g, f: [t for i, t in enumerate(f) if i % 2 == 0 or i >= 300],
            lambda f: {t: 1 + i % 3 for i, t in enumerate(f)},
        ),
        _session_case(
            "session ConfigMap, 10,000 tasks (10 x 1000 forward), 4,000 lost",
            cases.chains(10, 1000),
            lambda g: [t for t in g.tasks if int(t.split("-")[0][2:]) % 3 == 1],
            lambda g: [t for t in g.tasks if int(t.rsplit("-", 1)[1]) % 5 < 2],
            lambda g, f: f[::2],
            lambda f: dict.fromkeys(f, 1),
        ),
    ]
    status = cases.mid_recovery_status()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load}, {os.cpu_count()} CPUs\n")
    print("| object | before (bytes) | after (bytes) | limit | build (median of 5) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['before']:,} | {r['after']:,} | "
              f"{cases.CONFIGMAP_DATA_MAX:,} | {r['build_s']:.3f} s |")  # fmt: skip
    print(f"| status, 10,000 tasks mid-recovery (with managedFields) | "
          f"{cases.stored_size(status.dump()):,} | {cases.stored_size(status.wire()):,} | "
          f"{cases.ETCD_REQUEST_MAX:,} | |")  # fmt: skip


if __name__ == "__main__":
    main()
