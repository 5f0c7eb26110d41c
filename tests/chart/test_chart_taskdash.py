"""The task pods' dashboard as the chart ships it (``metrics.taskDashboard``), and the labels
it selects on against the series Prometheus stores from the chart's task PodMonitor.

A task's series carry the labels its ``/metrics`` writes (read back from the runtime's own
:func:`backstop_runtime.httpmetrics.prometheus`), the ones the rendered PodMonitor's
``relabelings`` add, and the ones the Prometheus Operator gives every PodMonitor target
(:data:`TARGET_LABELS`). Every label a panel, a legend or a variable of the dashboard names
must be one of them, or the panel would show nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.chart.test_chart import Doc, helm, of_kind, one, render
from tests.unit.test_dashboard import TASK_DASHBOARD, _dashboard, _panels, task_series

__all__ = ["helm"]  # the fixture, shared with test_chart.py

pytestmark = pytest.mark.helm

TARGET_LABELS = frozenset({"namespace", "pod", "container", "endpoint", "job", "instance"})
"""What a PodMonitor's target carries without any relabeling of ours: the scrape
configuration the Prometheus Operator generates for a PodMonitor sets ``namespace``,
``container`` and ``pod`` from the pod's metadata, ``job`` and ``endpoint`` from the monitor
(prometheus-operator, pkg/prometheus/promcfg.go, the PodMonitor scrape config), and
Prometheus itself sets ``instance`` to the target's address."""

BOTH_ON: Doc = {
    "metrics": {"taskPodMonitor": {"enabled": True}, "taskDashboard": {"enabled": True}}
}


def labels_used(expr: str) -> set[str]:
    """The labels a PromQL expression (or a ``label_values`` query) names: in matchers,
    in ``by``/``without``/``on``/``ignoring`` lists, and as ``label_values``' label.

    >>> sorted(labels_used('max by (task) (rate(m{namespace=~"$n", pod!="x"}[5m]))'))
    ['namespace', 'pod', 'task']
    >>> sorted(labels_used('label_values(m{namespace=~"$n", topology=~"$t"}, task)'))
    ['namespace', 'task', 'topology']
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    found = set()
    for body in re.findall(r"\{([^}]*)\}", text):
        found |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", body))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        found |= {g.strip() for g in group.split(",") if g.strip()}
    found |= set(re.findall(r"label_values\(\s*[\w:]+\s*(?:\{[^}]*\})?\s*,\s*(\w+)\s*\)", text))
    return found


def carried(monitor: Doc) -> set[str]:
    """The labels a task's series carry once Prometheus scraped it through ``monitor``."""
    written = set().union(*task_series().values())
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    relabeled = {r["targetLabel"] for r in endpoint.get("relabelings") or []}
    return written | relabeled | TARGET_LABELS


def test_the_task_dashboard_ships_as_its_own_configmap(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, BOTH_ON, namespace="mon")
    cm = one(docs, "ConfigMap", "rel-backstop-task-dashboard")
    assert cm["metadata"]["namespace"] == "mon"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"
    assert list(cm["data"]) == ["backstop-tasks.json"]
    assert json.loads(cm["data"]["backstop-tasks.json"]) == json.loads(TASK_DASHBOARD.read_text())
    # without metrics.enabled (the task pods serve /metrics anyway), apart from the operator's
    assert "BACKSTOP_METRICS_PORT" not in json.dumps(docs)
    assert [c["metadata"]["name"] for c in of_kind(docs, "ConfigMap")] == [
        "rel-backstop-task-dashboard"
    ]
    labelled: Doc = {"metrics": {"taskDashboard": {"enabled": True, "labels": {"team": "a"}}}}
    cm = one(render(helm, tmp_path, labelled), "ConfigMap", "rel-backstop-task-dashboard")
    assert cm["metadata"]["labels"]["team"] == "a"  # next to the sidecar's label


def test_both_dashboards_ship_side_by_side(helm: str, tmp_path: Path) -> None:
    values: Doc = {
        "metrics": {
            "enabled": True,
            "dashboard": {"enabled": True},
            "taskDashboard": {"enabled": True},
        }
    }
    docs = render(helm, tmp_path, values)
    keys = {c["metadata"]["name"]: list(c["data"]) for c in of_kind(docs, "ConfigMap")}
    assert keys == {
        "rel-backstop-dashboard": ["backstop.json"],
        "rel-backstop-task-dashboard": ["backstop-tasks.json"],
    }
    only_ops = render(
        helm, tmp_path, {"metrics": {"enabled": True, "dashboard": {"enabled": True}}}
    )
    assert [c["metadata"]["name"] for c in of_kind(only_ops, "ConfigMap")] == [
        "rel-backstop-dashboard"
    ]


def test_every_label_the_task_dashboard_names_is_on_the_scraped_series(
    helm: str, tmp_path: Path
) -> None:
    monitor = one(render(helm, tmp_path, BOTH_ON), "PodMonitor", "rel-backstop-tasks")
    labels = carried(monitor)
    assert {"task", "topology", "namespace"} <= labels
    doc = _dashboard(TASK_DASHBOARD)
    for panel in _panels(doc):
        for t in panel.get("targets") or []:
            used = labels_used(t["expr"]) | set(
                re.findall(r"\{\{\s*(\w+)\s*\}\}", t["legendFormat"])
            )
            assert used <= labels, f"{panel['title']}: {sorted(used - labels)} on no task series"
            for v in ("namespace", "topology", "task"):  # every panel follows the variables
                assert f'{v}=~"${v}"' in t["expr"], (panel["title"], v)
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            used = labels_used(var["query"]["query"])
            assert var["name"] in used and used <= labels, var["name"]


def test_the_label_check_catches_a_label_no_series_carries(helm: str, tmp_path: Path) -> None:
    monitor = one(render(helm, tmp_path, BOTH_ON), "PodMonitor", "rel-backstop-tasks")
    assert not labels_used('max by (operator_name) (backstop_task_round{task=~"$t"})') <= carried(
        monitor
    )
    unlabelled = {"spec": {"podMetricsEndpoints": [{"port": "metrics"}]}}
    assert "topology" not in carried(unlabelled)  # the relabeling is what gives `topology`
