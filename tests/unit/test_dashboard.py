"""The Grafana dashboards (charts/backstop/dashboards/: backstop.json for the operator,
backstop-tasks.json for the task pods) against Grafana's dashboard model and against what
the operator and the task runtime export.

The schema (tests/support/grafana-dashboard.schema.json) is a minimal, hand-written
JSON schema of Grafana's classic dashboard model (its ``$comment`` names the source).
Every PromQL expression, in panels and in template variables, may name only series the
operator's registry (:class:`backstop.controller.metrics.OperatorMetrics`) exports, or, in
the task dashboard, only series a task's ``/metrics`` serves (read back from the runtime's
own :func:`backstop_runtime.httpmetrics.prometheus`); every series has a panel. The labels
the task dashboard selects on are checked against the chart's task PodMonitor in
tests/chart/test_chart_taskdash.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from backstop.controller.metrics import OperatorMetrics
from backstop_runtime.httpmetrics import prometheus
from backstop_testkit.support.exposition import parse

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "charts" / "backstop" / "dashboards"
DASHBOARD = DASHBOARDS / "backstop.json"
TASK_DASHBOARD = DASHBOARDS / "backstop-tasks.json"
SCHEMA = ROOT / "tests" / "support" / "grafana-dashboard.schema.json"

PROMQL_WORDS = {
    # aggregations, their modifiers, and the functions the dashboard uses
    "sum", "min", "max", "avg", "count", "by", "without", "on", "ignoring",
    "rate", "increase", "histogram_quantile", "deriv",
}  # fmt: skip
"""Identifiers of PromQL itself; any other bare identifier must be an exported series."""


def _dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def task_series() -> dict[str, set[str]]:
    """What a task's ``/metrics`` serves, ``{name: its labels}``, read back from the
    runtime's own exposition of a task that has set no value yet."""
    out: dict[str, set[str]] = {}
    for s in parse(prometheus("count-0", {})):
        out.setdefault(s.name, set()).update(s.labels)
    return out


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in doc["panels"]:
        out.append(p)
        out.extend(p.get("panels") or [])
    return out


def expressions(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression: panel targets and query variables."""
    exprs = [t["expr"] for p in _panels(doc) for t in p.get("targets") or []]
    for v in doc.get("templating", {}).get("list", []):
        if v["type"] == "query":
            q = v["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def series_named(expr: str) -> set[str]:
    """The series an expression names: its bare identifiers minus PromQL's own words,
    after removing strings, label matchers, ranges, ``by (...)`` groups and numbers.

    Examples
    --------
    >>> sorted(series_named('sum by (le) (rate(a_b{x=~"$y"}[5m])) / c'))
    ['a_b', 'c']
    >>> series_named('label_values(m{namespace=~"$n"}, topology)')
    {'m'}
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", r"\1", text)
    text = re.sub(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*\w+\s*\)", r"\1", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "", text)
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text)) - PROMQL_WORDS


@pytest.mark.parametrize("path", [DASHBOARD, TASK_DASHBOARD], ids=lambda p: p.name)
def test_dashboard_is_a_grafana_dashboard(path: Path) -> None:
    doc = _dashboard(path)
    errors = sorted(_validator().iter_errors(doc), key=str)
    assert errors == [], "\n".join(e.message for e in errors)
    ids = [p["id"] for p in _panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in _panels(doc):  # no two panels overlap on Grafana's 24-column grid
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
    cells = [
        (p["gridPos"]["x"] + dx, p["gridPos"]["y"] + dy)
        for p in _panels(doc)
        for dx in range(p["gridPos"]["w"])
        for dy in range(p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells)), "panels overlap"


@pytest.mark.parametrize(
    "break_it",
    [
        lambda d: d.pop("schemaVersion"),
        lambda d: d["panels"][1]["gridPos"].update(w=25),
        lambda d: d["panels"][1].update(type=""),
        lambda d: d["panels"][0].pop("collapsed"),
        lambda d: d["templating"]["list"][0].update(type="dropdown"),
        lambda d: d["panels"][1]["targets"][0].pop("refId"),
    ],
    ids=["no-schemaVersion", "too-wide", "no-panel-type", "row-without-collapsed",
         "bad-variable-type", "target-without-refId"],
)  # fmt: skip
@pytest.mark.parametrize("path", [DASHBOARD, TASK_DASHBOARD], ids=lambda p: p.name)
def test_the_schema_rejects_what_grafana_rejects(break_it: Any, path: Path) -> None:
    doc = copy.deepcopy(_dashboard(path))
    break_it(doc)
    assert list(_validator().iter_errors(doc)), "accepted a broken dashboard"


def test_every_expression_names_only_exported_series_and_every_series_is_shown() -> None:
    exported = OperatorMetrics().names()
    exprs = expressions(_dashboard())
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        named = series_named(expr)
        assert named, f"no series in {expr!r}"
        assert named <= exported, f"{sorted(named - exported)} not exported: {expr!r}"
        used |= named
    families = {f.name for f in OperatorMetrics().registry.collect()}
    shown = {f for f in families if any(u == f or u.startswith(f + "_") for u in used)}
    assert shown == families, f"no panel for {sorted(families - shown)}"


def test_the_dashboards_are_two_and_the_task_one_is_in_the_same_model() -> None:
    ops, tasks = _dashboard(), _dashboard(TASK_DASHBOARD)
    assert ops["uid"] != tasks["uid"] and ops["title"] != tasks["title"]
    assert tasks["schemaVersion"] == ops["schemaVersion"]
    variables = [v["name"] for v in tasks["templating"]["list"]]
    assert variables == ["datasource", "namespace", "topology", "task"]


def test_the_task_dashboard_names_only_what_a_task_serves_and_shows_all_of_it() -> None:
    served = set(task_series())
    assert {"backstop_task_tuples_in_total", "backstop_task_lag_seconds"} <= served
    exprs = expressions(_dashboard(TASK_DASHBOARD))
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        named = series_named(expr)
        assert named, f"no series in {expr!r}"
        assert named <= served, f"{sorted(named - served)} not served by a task: {expr!r}"
        used |= named
    assert used == served, f"no panel for {sorted(served - used)}"


def test_the_series_check_catches_what_no_task_serves() -> None:
    invented = 'rate(backstop_task_records_in_total{task=~"$task"}[5m])'
    assert not series_named(invented) <= set(task_series())
