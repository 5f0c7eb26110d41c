"""Every image the chart names is under the one registry the user sets.

``image.registry`` has no default (a default would name a namespace the user does not own):
``helm template`` without it fails with one message naming the value. With it, the operator,
the task runtime (the operator's default task image, ``BACKSTOP_TASK_IMAGE``) and the Spark
image are ``<registry>/operator``, ``<registry>/runtime`` and ``<registry>/spark``, and no
other image appears in the rendered manifests, hooks included, whatever feature is on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.test_chart import CHART, container, env_of, helm, run_helm, values_file

__all__ = ["helm"]  # fixtures used here

Doc = dict[str, Any]
REGISTRY = "registry.example.com/team"
EVERYTHING_ON: Doc = {  # every feature that adds a pod, a container or an image setting
    "image": {"registry": REGISTRY},
    "reoptimization": {
        "enabled": True,
        "mode": "job",
        "sparkMaster": "k8s://https://kubernetes.default.svc:443",
        "executorNamespace": "backstop-spark",
        "createExecutorNamespace": True,
    },
    "metrics": {"enabled": True},
}


def _images(node: Any) -> Iterator[str]:
    """Every ``image`` field and every ``*_IMAGE`` env value or ``*.image`` Spark setting."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and (key == "image" or key.endswith(".image")):
                yield value
            else:
                yield from _images(value)
        name, value = node.get("name"), node.get("value")
        if isinstance(name, str) and name.endswith("_IMAGE") and isinstance(value, str):
            yield value
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def _render(helm: str, tmp_path: Path, values: Doc | None) -> subprocess.CompletedProcess[str]:
    args = ["template", "rel", str(CHART), "--namespace", "ops"]
    if values is not None:
        args += ["-f", str(values_file(tmp_path, values))]
    return run_helm(helm, *args, check=False, local_images=False)


@pytest.mark.helm
def test_helm_template_without_values_fails_naming_the_registry_value(
    helm: str, tmp_path: Path
) -> None:
    proc = _render(helm, tmp_path, None)
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert "image.registry is required" in errors[0]
    assert "--set image.registry=" in errors[0]  # and what to set


@pytest.mark.helm
@pytest.mark.parametrize("values", [{"image": {"registry": REGISTRY}}, EVERYTHING_ON],
                         ids=["defaults", "everything-on"])  # fmt: skip
def test_every_image_is_under_the_registry_the_user_sets(
    helm: str, tmp_path: Path, values: Doc
) -> None:
    proc = _render(helm, tmp_path, values)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    images = set(_images(docs))
    outside = sorted(i for i in images if not i.startswith(REGISTRY + "/"))
    assert outside == [], f"images outside {REGISTRY}: {outside}"
    env = env_of(container(docs))
    assert container(docs)["image"] == f"{REGISTRY}/operator:{version}"
    assert env["BACKSTOP_TASK_IMAGE"] == f"{REGISTRY}/runtime:{version}"
    expected = {f"{REGISTRY}/operator:{version}", f"{REGISTRY}/runtime:{version}"}
    if values is EVERYTHING_ON:
        assert env["BACKSTOP_SPARK_IMAGE"] == f"{REGISTRY}/spark:{version}"
        expected.add(f"{REGISTRY}/spark:{version}")
    assert images == expected


@pytest.mark.helm
def test_the_overrides_and_the_tag_apply_and_a_trailing_slash_is_dropped(
    helm: str, tmp_path: Path
) -> None:
    values = {
        "image": {"registry": REGISTRY + "/", "tag": "1.2.3", "repository": "mirror/op"},
        "reoptimization": {"enabled": True, "sparkImage": "mirror/spark:9"},
    }
    proc = _render(helm, tmp_path, values)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    c = container(docs)
    assert c["image"] == "mirror/op:1.2.3"
    assert env_of(c)["BACKSTOP_TASK_IMAGE"] == f"{REGISTRY}/runtime:1.2.3"
    assert env_of(c)["BACKSTOP_SPARK_IMAGE"] == "mirror/spark:9"
