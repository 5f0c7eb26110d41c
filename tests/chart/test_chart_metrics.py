"""The chart's ``metrics.*`` values: every one changes what is rendered,
and what is rendered points at what the operator serves.

The port the chart gives the pod (``BACKSTOP_METRICS_PORT``) is the one the operator's
settings read and the one the Service, the monitors and the scrape annotations name;
the dashboard ConfigMap carries the repository's dashboard file byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backstop.controller import settings as config
from tests.chart.test_chart import (
    CHART,
    Doc,
    container,
    env_of,
    helm,
    of_kind,
    one,
    render,
    run_helm,
    values_file,
)

__all__ = ["helm"]  # the fixture, shared with test_chart.py

pytestmark = pytest.mark.helm

ALL_ON: Doc = {
    "metrics": {
        "enabled": True,
        "port": 9464,
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kps"}},
        "podMonitor": {"enabled": True, "scrapeTimeout": "5s"},
        "dashboard": {"enabled": True},
    }
}


def test_metrics_values_render_port_service_monitors_and_dashboard(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path, ALL_ON, namespace="mon")
    c = container(docs)
    port = config.Settings.from_env(env_of(c)).metrics_port
    assert port == 9464
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == port
    pod = one(docs, "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9464",
        "prometheus.io/path": "/metrics",
    }
    svc = one(docs, "Service", "rel-backstop-metrics")
    assert "annotations" not in svc["metadata"], "only the pods carry scrape annotations"
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics"}]

    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["mon"]}
    selected = sm["spec"]["selector"]["matchLabels"]
    assert selected.items() <= svc["metadata"]["labels"].items()
    # honorLabels: a per-topology series keeps its topology's `namespace` label
    endpoint = {"port": "metrics", "path": "/metrics", "honorLabels": True}
    assert sm["spec"]["endpoints"] == [{**endpoint, "interval": "15s", "scrapeTimeout": "10s"}]
    pm = one(docs, "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pm["spec"]["podMetricsEndpoints"] == [
        {**endpoint, "interval": "30s", "scrapeTimeout": "5s"}
    ]
    cm = one(docs, "ConfigMap", "rel-backstop-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (CHART / "dashboards" / "backstop.json").read_text()
    assert json.loads(cm["data"]["backstop.json"]) == json.loads(shipped)


def metrics_services(docs: list[Doc]) -> list[Doc]:
    """Services other than the admission webhook's (always there with webhook.enabled)."""
    return [d for d in of_kind(docs, "Service") if not d["metadata"]["name"].endswith("-webhook")]


def test_each_metrics_switch_turns_its_part_off(helm: str, tmp_path: Path) -> None:
    off = render(helm, tmp_path)
    assert "BACKSTOP_METRICS_PORT" not in env_of(container(off))
    assert metrics_services(off) == [] and of_kind(off, "ConfigMap") == []
    assert "annotations" not in one(off, "Deployment")["spec"]["template"]["metadata"]

    quiet: Doc = {
        "metrics": {"enabled": True, "scrapeAnnotations": False, "service": {"enabled": False}}
    }
    docs = render(helm, tmp_path, quiet)
    assert env_of(container(docs))["BACKSTOP_METRICS_PORT"] == "9090"
    assert "annotations" not in one(docs, "Deployment")["spec"]["template"]["metadata"]
    assert metrics_services(docs) == []
    assert of_kind(docs, "ServiceMonitor") == of_kind(docs, "PodMonitor") == []


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"metrics": {"podMonitor": {"enabled": True}}}, "need metrics.enabled"),
        (
            {
                "metrics": {
                    "enabled": True,
                    "service": {"enabled": False},
                    "serviceMonitor": {"enabled": True},
                }
            },
            "set metrics.service.enabled",
        ),
        ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
        ({"metrics": {"podMonitor": {"labels": {"a": 1}}}}, "labels"),
        ({"metrics": {"dashboard": {"folder": "x"}}}, "folder"),
    ],
    ids=["monitor-without-metrics", "servicemonitor-without-service", "interval", "label", "key"],
)
def test_inconsistent_metrics_values_are_refused(
    helm: str, tmp_path: Path, values: Doc, needle: str
) -> None:
    args = ["template", "rel", str(CHART), "-f", str(values_file(tmp_path, values))]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0, f"accepted {values}"
    assert needle in proc.stderr
