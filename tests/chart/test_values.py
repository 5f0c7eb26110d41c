"""The chart tells the truth: every value is used, every env var is read.

Two chains can break silently, and each has a test:

- **values.yaml → templates.** A value no template references does nothing; the user who
  sets it is misled. :func:`test_every_value_is_referenced_by_a_template` walks the keys of
  ``values.yaml`` and finds each in the templates (``.Values.a.b``, or ``$x.b`` after
  ``$x := .Values.a``). A value the templates hand on whole (``toYaml``) covers its keys
  only if it is in :data:`PASSED_THROUGH`, with the reason.
- **chart env → operator.** An env var the operator never reads is the same lie one step
  later. :func:`test_every_env_var_the_chart_sets_is_read_by_the_operator` renders the chart
  with its defaults and with every optional feature switched on and checks each variable of
  the operator container against what the code reads: the ``Settings`` env mapping
  (:data:`backstop.controller.settings.ENV_VARS`), the ``envvar`` of every option of
  ``backstop operator``, and the Lease identity (:data:`backstop.k8s.leader.POD_NAME_ENV`).

:data:`AWAITING` lists the variables the chart sets ahead of the operator reading them, each
with what makes it real; the test fails as soon as one of them is read, so its entry goes with it.
The schema (``values.schema.json``) and the docs must name the same keys as ``values.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from backstop.cli import app
from backstop.controller.settings import ENV_VARS
from backstop.k8s.leader import POD_NAME_ENV
from backstop_testkit.support.kubetools import ROOT
from tests.chart.test_chart import (  # noqa: F401
    CHART,
    LOCAL_IMAGES,
    container,
    env_of,
    helm,
    render,
)

VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA: dict[str, Any] = yaml.safe_load((CHART / "values.schema.json").read_text())

PASSED_THROUGH: dict[str, str] = {
    "imagePullSecrets": "the pod's imagePullSecrets, as given",
    "resources": "the operator container's resources, as given",
    "podSecurityContext": "the pod's securityContext, as given",
    "podAnnotations": "annotations of the operator pod, as given",
    "nodeSelector": "the operator pod's nodeSelector, as given",
    "tolerations": "added to the operator pod's own tolerations, as given",
    "affinity": "the operator pod's affinity, as given (replaces podAntiAffinity)",
    "serviceAccount.annotations": "the ServiceAccount's annotations, as given",
    "reoptimization.resources": "JSON in BACKSTOP_SPARK_RESOURCES (the Job container's)",
    "reoptimization.sparkConf": "JSON in BACKSTOP_SPARK_CONF (the Job's --conf settings)",
    "metrics.dashboard.labels": "labels of the dashboard ConfigMap (Grafana's sidecar), as given",
    "metrics.taskDashboard.labels": "labels of the task dashboard's ConfigMap, as given",
}
"""Values the templates hand on whole: Kubernetes (or the operator) reads their keys."""

AWAITING: dict[str, str] = {}
"""Env vars the chart sets that the operator does not read yet, each with the change
that makes it real."""

PROCESS_ENV: dict[str, str] = {
    "HOME": "Python and Spark/Ivy want a writable home; the root filesystem is read-only",
}
"""Variables for the process's runtime, not for Backstop's code."""

# Values that switch a feature on without being an `enabled` flag.
FEATURES_ON: dict[str, Any] = {
    "reoptimization": {
        "mode": "job",
        "sparkMaster": "k8s://https://kubernetes.default.svc",
        "executorNamespace": "backstop-spark",
        "sparkImage": "registry.example/spark:1",
        "sparkConf": {"spark.executor.instances": "1"},
        "driverServiceAccount": {"name": "spark-driver"},
        "metricsVolume": {"existingClaim": "backstop-store"},
        "objectStoreSecret": "reopt-s3",
    },
    "imagePullSecrets": [{"name": "pull"}],
    "podAnnotations": {"a": "b"},
    "nodeSelector": {"pool": "ops"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "priorityClassName": "system-cluster-critical",
    "serviceAccount": {"annotations": {"a": "b"}},
    "watchNamespaces": ["team-a"],
}


def all_on(values: Any = VALUES) -> Any:
    """``values`` with every ``enabled`` flag true (whatever feature added it)."""
    if isinstance(values, dict):
        return {k: True if k == "enabled" else all_on(v) for k, v in values.items()}
    return values


def merged(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merged(base.get(k), v) for k, v in over.items()}}
    return over


def leaves(values: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the values' leaves (an empty map or a list is a leaf)."""
    if isinstance(values, dict) and values:
        for k, v in values.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def template_references() -> set[str]:
    """Every ``.Values`` path the templates read, with ``$x := .Values.a`` aliases followed."""
    refs: set[str] = set()
    for path in sorted((CHART / "templates").iterdir()):
        text = path.read_text()
        aliases = dict(re.findall(r"\$(\w+)\s*:=\s*\.Values((?:\.\w+)+)", text))
        refs.update(p[1:] for p in re.findall(r"\.Values((?:\.\w+)+)", text))
        for var, suffix in re.findall(r"\$(\w+)((?:\.\w+)+)", text):
            if var in aliases:
                refs.add(aliases[var][1:] + suffix)
    return refs


def operator_reads() -> set[str]:
    """The env vars Backstop's operator reads, from the code itself."""
    group: Any = typer.main.get_command(app)
    cli: set[str] = set()
    for param in group.commands["operator"].params:
        envvar = param.envvar
        cli.update([envvar] if isinstance(envvar, str) else list(envvar or []))
    return set(ENV_VARS.values()) | cli | {POD_NAME_ENV}


def test_every_value_is_referenced_by_a_template() -> None:
    refs = template_references()
    unused = []
    for leaf in leaves(VALUES):
        parts = leaf.split(".")
        prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        whole = [p for p in prefixes if p in PASSED_THROUGH and p in refs]
        if leaf not in refs and not whole:
            unused.append(leaf)
    assert unused == [], f"values.yaml keys no template reads: {unused}"
    stale = [p for p in PASSED_THROUGH if p not in refs]
    assert stale == [], f"PASSED_THROUGH names values the templates do not use: {stale}"


@pytest.mark.helm
@pytest.mark.parametrize("features", ["defaults", "all-on"])
def test_every_env_var_the_chart_sets_is_read_by_the_operator(
    helm: str,  # noqa: F811
    tmp_path: Path,
    features: str,
) -> None:
    local = yaml.safe_load(LOCAL_IMAGES.read_text())  # values.yaml's registry is empty
    values = None if features == "defaults" else merged(merged(all_on(), FEATURES_ON), local)
    c = container(render(helm, tmp_path, values))
    reads = operator_reads()
    unread = sorted(set(env_of(c)) - reads - set(PROCESS_ENV) - set(AWAITING))
    assert unread == [], f"the chart sets env vars the operator never reads: {unread}"
    now_read = sorted(set(AWAITING) & reads)
    assert now_read == [], f"read now: drop them from AWAITING: {now_read}"
    # every flag the chart passes is one of `backstop operator`'s (it refuses unknown ones)
    group: Any = typer.main.get_command(app)
    group.commands["operator"].make_context("operator", list(c["args"][1:]))
    if features == "all-on":
        missing = sorted(set(AWAITING) - set(env_of(c)))
        assert missing == [], f"AWAITING names env vars the chart no longer sets: {missing}"


def _schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if "properties" in node:
        yield path, node
        for key, sub in node["properties"].items():
            yield from _schema_nodes(sub, f"{path}.{key}" if path else key)


def _at(values: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        values = values.get(part) if isinstance(values, dict) else None
    return values


def test_schema_and_values_name_the_same_keys() -> None:
    for path, node in _schema_nodes(SCHEMA):
        here = _at(VALUES, path)
        if not isinstance(here, dict) or path in PASSED_THROUGH:
            continue
        where = path or "the top level"
        assert sorted(set(node["properties"]) - set(here)) == [], (
            f"values.schema.json allows keys at {where} that values.yaml does not have"
        )
        assert sorted(set(here) - set(node["properties"])) == [], (
            f"values.yaml has keys at {where} that values.schema.json does not describe"
        )


def helm_sections(text: str) -> Iterator[str]:
    """The markdown sections whose heading names Helm or the chart."""
    for section in re.split(r"(?m)^(?=#)", text):
        heading = section.split("\n", 1)[0]
        if heading.startswith("#") and re.search(r"helm|chart", heading, re.I):
            yield section


def test_docs_name_only_values_the_chart_has() -> None:
    """In a Helm section of README/docs, a backticked ``a.b`` with ``a`` a top-level value
    is a value path (``spec.recovery`` has fields of the same names outside those)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    known = set(leaves(VALUES))
    prefixes = {".".join(leaf.split(".")[:i]) for leaf in known for i in range(1, 8)}
    wrong, seen = [], 0
    for doc in docs:
        text = "".join(helm_sections(doc.read_text()))
        for token in re.findall(r"`([A-Za-z][\w]*(?:\.[A-Za-z]\w*)+)`", text):
            head = token.split(".")[0]
            if head not in VALUES or not isinstance(VALUES[head], dict):
                continue
            seen += 1
            under = any(token.startswith(p + ".") for p in PASSED_THROUGH)
            if token not in prefixes and not under:
                wrong.append(f"{doc.relative_to(ROOT)}: {token}")
    assert seen > 10, "no Helm value found in the docs' Helm sections: is the scan broken?"
    assert wrong == [], "docs name Helm values the chart does not have:\n" + "\n".join(wrong)
