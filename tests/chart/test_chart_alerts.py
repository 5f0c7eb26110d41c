"""The chart's alerts (``metrics.prometheusRule``) and the task pods' PodMonitor
(``metrics.taskPodMonitor``): off by default, valid Prometheus Operator objects when on,
and every alert reads only series the operator or the task runtime exports.

The series names come from the registries themselves: the operator's
(:meth:`backstop.controller.metrics.OperatorMetrics.names`) and the runtime's
(:data:`backstop_runtime.httpmetrics.METRICS`, exported as ``backstop_task_<name>``); the
task pods' labels from the pod the operator builds (:func:`backstop.k8s.manifests.desired_pods`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backstop.controller.metrics import OperatorMetrics
from backstop.domain.spec import StreamTopologySpec, expand
from backstop.k8s.manifests import Owner, desired_pods
from backstop_runtime.httpmetrics import METRICS
from tests.chart.test_chart import CHART, Doc, helm, of_kind, one, render, run_helm, values_file
from tests.unit.test_dashboard import PROMQL_WORDS, series_named

__all__ = ["helm"]  # the fixture, shared with test_chart.py

pytestmark = pytest.mark.helm

RULE_ON: Doc = {
    "metrics": {
        "enabled": True,
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kps"}},
    }
}
ALERTS = {
    # alert: (the series it reads, how long it must hold)
    "BackstopBoundNotSatisfied": ("backstop_topology_bound_satisfied", "5m"),
    "BackstopTasksLost": ("backstop_recovery_tasks_lost", "2m"),
    "BackstopNoLeader": ("backstop_leader", "1m"),
    "BackstopRecoverySessionLong": ("backstop_recovery_session_active", "10m"),
    "BackstopReconcileErrors": ("backstop_reconcile_errors_total", "10m"),
}
"""The alerts an SRE needs on day two, each with its series and its ``for``."""
WORDS = PROMQL_WORDS | {"or", "and", "unless", "vector", "absent", "max_over_time"}


def exported() -> set[str]:
    """Every sample name the operator's registry or a task pod's /metrics exports."""
    return OperatorMetrics().names() | {f"backstop_task_{name}" for name, _, _ in METRICS}


def balanced(expr: str) -> bool:
    """Whether the brackets of ``expr`` (outside strings) nest properly."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


def rules(doc: Doc) -> dict[str, Doc]:
    groups = doc["spec"]["groups"]
    assert groups and all(g["name"] and g["rules"] for g in groups)
    return {r["alert"]: r for g in groups for r in g["rules"]}


def test_alerts_and_task_monitor_are_off_by_default(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path)
    assert of_kind(docs, "PrometheusRule") == []
    assert of_kind(docs, "PodMonitor") == []
    on = render(helm, tmp_path, {"metrics": {"enabled": True}})
    assert of_kind(on, "PrometheusRule") == [] and of_kind(on, "PodMonitor") == []


def test_the_rule_renders_the_alerts_on_exported_series(helm: str, tmp_path: Path) -> None:
    doc = one(render(helm, tmp_path, RULE_ON, namespace="mon"), "PrometheusRule")
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["metadata"]["namespace"] == "mon"
    assert doc["metadata"]["labels"]["release"] == "kps"
    assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"
    found = rules(doc)
    assert set(found) == set(ALERTS)
    names = exported()
    for alert, rule in found.items():
        series, hold = ALERTS[alert]
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, alert
        assert rule["for"] == hold, alert
        assert rule["labels"]["severity"] in ("warning", "critical"), alert
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], alert
        expr = rule["expr"]
        assert balanced(expr), expr
        named = series_named(expr) - WORDS
        assert series in named, f"{alert} does not read {series}: {expr}"
        assert named <= names, f"{alert}: {sorted(named - names)} are exported by no one"
    # the operator-wide alerts look at this release's replicas only
    assert 'namespace="mon"' in found["BackstopNoLeader"]["expr"]
    assert 'namespace="mon"' in found["BackstopReconcileErrors"]["expr"]


def test_the_name_check_catches_a_series_no_one_exports() -> None:
    invented = "sum(rate(backstop_reconcile_failures_total[5m])) > 0"
    assert not series_named(invented) - WORDS <= exported()
    assert not balanced('max(backstop_leader{namespace="x"}) or vector(0)) < 1')


def test_the_rule_needs_the_operator_metrics(helm: str, tmp_path: Path) -> None:
    values: Doc = {"metrics": {"prometheusRule": {"enabled": True}}}
    args = ["template", "rel", str(CHART), "-f", str(values_file(tmp_path, values))]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and "needs metrics.enabled" in proc.stderr
    bad: Doc = {"metrics": {"prometheusRule": {"enabled": True, "labels": {}}}}
    args = ["template", "rel", str(CHART), "-f", str(values_file(tmp_path, bad))]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0 and "labels" in proc.stderr


def task_pod() -> Doc:
    """A task pod as the operator builds it."""
    spec = StreamTopologySpec.model_validate(
        {
            "image": "registry.example/t:1",
            "recoveryLatencyBound": 10,
            "operators": [{"name": "src", "parallelism": 1, "reprocessingLatency": 1}],
        }
    )
    graph = expand(spec)
    owner = Owner(name="t", namespace="team", uid="u1")
    pods = desired_pods(owner, spec, graph, frozenset(), dict.fromkeys(graph.tasks, "n1"))
    pod: Doc = next(iter(pods.values()))
    return pod


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects ``labels``."""
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        op, key = e["operator"], e["key"]
        ok = {
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
            "In": labels.get(key) in (e.get("values") or []),
            "NotIn": key not in labels or labels[key] not in (e.get("values") or []),
        }[op]
        if not ok:
            return False
    return True


def test_the_task_pod_monitor_selects_the_task_pods_where_they_run(
    helm: str, tmp_path: Path
) -> None:
    values: Doc = {
        "watchNamespaces": ["team", "mon"],
        "metrics": {"taskPodMonitor": {"enabled": True, "labels": {"release": "kps"}}},
    }
    docs = render(helm, tmp_path, values, namespace="mon")
    pm = one(docs, "PodMonitor", "rel-backstop-tasks")
    assert pm["metadata"]["labels"]["release"] == "kps"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["mon", "team"]}
    pod = task_pod()
    labels: dict[str, str] = pod["metadata"]["labels"]
    assert selects(pm["spec"]["selector"], labels)
    operator_pod = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not selects(pm["spec"]["selector"], operator_pod)
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports") or []]
    assert "metrics" in ports  # the port the monitor scrapes, by name
    relabeled = {r["targetLabel"]: r["sourceLabels"][0] for r in endpoint["relabelings"]}
    meta = "__meta_kubernetes_pod_label_"
    for target, source in relabeled.items():
        key = next(k for k in labels if re.sub(r"[^A-Za-z0-9_]", "_", k) == source[len(meta) :])
        assert key.endswith("/" + target), (target, key)

    anywhere: Doc = {"watchAllNamespaces": True, "metrics": {"taskPodMonitor": {"enabled": True}}}
    every = render(helm, tmp_path, anywhere)
    assert one(every, "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}
