"""Merging pod templates into task pods, and which tainted nodes a topology may use.

The merge follows Flink's operator (``FlinkUtils.mergePodTemplates`` with
``kubernetes.operator.pod-template.merge-arrays-by-name``): objects are merged key by
key, the later template winning on scalars; lists whose elements all have a ``name``
(containers, env, volumes, volume mounts, ports, image pull secrets) are merged element
by element by name, keeping the first list's order and appending new names. One
difference: Flink merges lists without names (tolerations, ``envFrom``) by index, so a
per-operator toleration would overwrite the topology's first; here they are joined
(the first list, then what the second adds). Lists of scalars (``args``) are replaced.

The layers, first to last: the operator's pod (with its defaults: the restricted
security contexts, no service links, no ServiceAccount token), ``spec.podTemplate``,
``spec.operators[].podTemplate``, then the operator's own fields again, so they win
(:func:`build_pod_spec`). The operator's pod comes first so its task container stays
the pod's first container and its ``BACKSTOP_*`` variables come before the user's
(``$(BACKSTOP_TASK_ID)`` may be used in a value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from backstop.domain.podtemplate import TASK_CONTAINER, PodTemplate
from backstop.domain.quantity import parse_quantity

NODE_CONDITION_TAINTS = "node.kubernetes.io/"
"""Taints the node lifecycle controller and the kubelet set (``not-ready``,
``unreachable``, ``unschedulable``, memory/disk/PID pressure): a toleration does not make
such a node usable for a plan (not-ready and unreachable mean the node is lost)."""
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def _named(items: Sequence[Any]) -> bool:
    return all(isinstance(e, Mapping) and "name" in e for e in items)


def merge(base: Any, override: Any) -> Any:
    """``override`` merged into ``base`` (neither is changed).

    Examples
    --------
    >>> merge({"a": 1, "b": {"c": 1}}, {"b": {"d": 2}})
    {'a': 1, 'b': {'c': 1, 'd': 2}}
    >>> merge([{"name": "x", "v": 1}, {"name": "y"}], [{"name": "x", "v": 2}, {"name": "z"}])
    [{'name': 'x', 'v': 2}, {'name': 'y'}, {'name': 'z'}]
    >>> merge([{"key": "a"}], [{"key": "b"}, {"key": "a"}]), merge(["-v"], ["-q"])
    ([{'key': 'a'}, {'key': 'b'}], ['-q'])
    """
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(override, list):
        if _named(base) and _named(override):
            by_name: dict[Any, Any] = {e["name"]: e for e in base}
            for e in override:
                name = e["name"]
                by_name[name] = merge(by_name[name], e) if name in by_name else e
            return list(by_name.values())
        if all(isinstance(e, Mapping) for e in [*base, *override]):
            return [*base, *(e for e in override if e not in base)]
        return list(override)
    return override


def merge_templates(*templates: PodTemplate | None) -> dict[str, Any]:
    """The templates merged in order (later wins): ``{"metadata": ..., "spec": ...}``.

    Examples
    --------
    >>> top = PodTemplate.model_validate({"metadata": {"labels": {"team": "a"}},
    ...     "spec": {"containers": [{"name": "task", "env": [{"name": "X", "value": "1"}]}]}})
    >>> op = PodTemplate.model_validate({"spec": {"containers": [{"name": "task",
    ...     "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]}]}})
    >>> merged = merge_templates(top, op)
    >>> merged["metadata"], merged["spec"]["containers"][0]["env"]
    ({'labels': {'team': 'a'}}, [{'name': 'X', 'value': '2'}, {'name': 'Y', 'value': '3'}])
    """
    out: dict[str, Any] = {}
    for t in templates:
        if t is not None:
            out = merge(out, t.raw())
    return out


def build_pod_spec(
    base: Mapping[str, Any], template_spec: Mapping[str, Any], owned: Mapping[str, Any]
) -> dict[str, Any]:
    """The pod spec: the operator's ``base`` pod, the merged template, then ``owned``.

    ``owned`` is the part of ``base`` the template may not change: whatever the template
    set there is overwritten (validation refuses most of it before this runs).

    Examples
    --------
    >>> env = [{"name": "B", "value": "1"}]
    >>> base = {"restartPolicy": "Always", "securityContext": {"runAsNonRoot": True},
    ...         "containers": [{"name": "task", "image": "i", "env": env}]}
    >>> owned = {"restartPolicy": "Always", "containers": [{"name": "task", "image": "i"}]}
    >>> tpl = {"securityContext": {"fsGroup": 2}, "containers": [
    ...     {"name": "log", "image": "l"}, {"name": "task", "env": [{"name": "U", "value": "2"}]}]}
    >>> spec = build_pod_spec(base, tpl, owned)
    >>> [c["name"] for c in spec["containers"]], spec["securityContext"]
    (['task', 'log'], {'runAsNonRoot': True, 'fsGroup': 2})
    >>> [e["name"] for e in spec["containers"][0]["env"]]
    ['B', 'U']
    """
    merged: dict[str, Any] = merge(merge(base, template_spec), owned)
    return merged


def _quantity(value: Any) -> float:
    return float(parse_quantity(str(value)))


def _requests(container: Mapping[str, Any], kind: str) -> float:
    """A container's request as the API server defaults it (the limit when unset)."""
    res = container.get("resources") or {}
    value = (res.get("requests") or {}).get(kind, (res.get("limits") or {}).get(kind))
    return 0.0 if value is None else _quantity(value)


def pod_requests(
    template: Mapping[str, Any], task_cpu: float, task_memory: float
) -> tuple[float, float]:
    """``(cores, bytes)`` a task pod requests: the task's own plus its template's sidecars.

    As the scheduler counts it: the containers' sum, or the largest init container if
    that is larger. The planners use the CPU as the task's weight, so a sidecar's CPU
    is planned for.

    Examples
    --------
    >>> tpl = {"spec": {"containers": [{"name": "task"}, {"name": "log", "image": "l",
    ...     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}],
    ...     "initContainers": [{"name": "fetch", "image": "f",
    ...         "resources": {"requests": {"cpu": "2"}}}]}}
    >>> pod_requests(tpl, 0.25, 128 * 2**20)
    (2.0, 201326592.0)
    >>> pod_requests({}, 0.25, 1.0)
    (0.25, 1.0)
    """
    spec = template.get("spec") or {}
    sidecars = [c for c in spec.get("containers") or [] if c.get("name") != TASK_CONTAINER]
    init = spec.get("initContainers") or []
    out = []
    for kind, own in (("cpu", task_cpu), ("memory", task_memory)):
        running = own + sum(_requests(c, kind) for c in sidecars)
        out.append(max(running, max((_requests(c, kind) for c in init), default=0.0)))
    return out[0], out[1]


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether a toleration lets a pod stay on a node with ``taint`` (Kubernetes' rule).

    A ``NoExecute`` toleration with ``tolerationSeconds`` only delays the eviction, so
    it does not count.

    Examples
    --------
    >>> taint = {"key": "dedicated", "value": "stream", "effect": "NoSchedule"}
    >>> tolerates({"key": "dedicated", "value": "stream", "effect": "NoSchedule"}, taint)
    True
    >>> tolerates({"key": "dedicated", "operator": "Exists"}, taint)
    True
    >>> tolerates({"operator": "Exists"}, taint), tolerates({"key": "dedicated"}, taint)
    (True, False)
    >>> tolerates({"key": "dedicated", "value": "stream", "effect": "NoExecute"}, taint)
    False
    """
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    if taint.get("effect") == "NoExecute" and toleration.get("tolerationSeconds") is not None:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def hard_taints(taints: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The taints that keep pods off a node: ``NoSchedule`` and ``NoExecute``."""
    return [dict(t) for t in taints if t.get("effect") in HARD_EFFECTS]


def taints_tolerated(
    taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Sequence[Mapping[str, Any]]]
) -> bool:
    """Whether every pod kind (one toleration list each) tolerates every hard taint.

    The planners may put any task of a topology on any node they are given, so a
    tainted node is usable only if the pods of *every* operator tolerate its taints.
    The node condition taints (:data:`NODE_CONDITION_TAINTS`) are never tolerated here.

    Examples
    --------
    >>> dedicated = [{"key": "dedicated", "value": "s", "effect": "NoSchedule"}]
    >>> ok = [{"key": "dedicated", "operator": "Exists"}]
    >>> taints_tolerated(dedicated, [ok, ok]), taints_tolerated(dedicated, [ok, []])
    (True, False)
    >>> taints_tolerated([{"key": "x", "effect": "PreferNoSchedule"}], [[]])
    True
    >>> lost = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    >>> taints_tolerated(lost, [[{"operator": "Exists"}]])
    False
    """
    for taint in hard_taints(taints):
        if str(taint.get("key") or "").startswith(NODE_CONDITION_TAINTS):
            return False
        if not all(any(tolerates(t, taint) for t in pod) for pod in tolerations):
            return False
    return True


def operator_tolerations(
    topology: PodTemplate | None, operators: Iterable[PodTemplate | None]
) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The tolerations of each operator's pods (the two templates merged), one tuple each.

    >>> top = PodTemplate.model_validate({"spec": {"containers": [{"name": "task"}],
    ...     "tolerations": [{"key": "a", "operator": "Exists"}]}})
    >>> operator_tolerations(top, [None])
    (({'key': 'a', 'operator': 'Exists'},),)
    """
    out = []
    for op in operators:
        spec = merge_templates(topology, op).get("spec") or {}
        out.append(tuple(spec.get("tolerations") or ()))
    return tuple(out)


def merged_problem(
    template: Mapping[str, Any],
    *,
    requests: Mapping[str, str],
    owned_limits: Iterable[str] = (),
) -> str | None:
    """What is wrong with the merged template of one operator's pods, or ``None``.

    Checked after the merge, since a mount may name a volume of the other template: a
    volume mount must name a volume of the pod, and the task container's limits (those
    ``operators[].resources`` does not set, ``owned_limits``) must cover its requests.

    Examples
    --------
    >>> tpl = {"spec": {"containers": [{"name": "task", "resources": {"limits": {"cpu": "100m"}},
    ...     "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}]}}
    >>> req = {"cpu": "500m", "memory": "64Mi"}
    >>> merged_problem(tpl, requests=req)
    'container task: volumeMount /etc/cfg names no volume of the pod (cfg)'
    >>> tpl["spec"]["volumes"] = [{"name": "cfg", "emptyDir": {}}]
    >>> merged_problem(tpl, requests=req)
    'container task: resources.limits.cpu 100m is below the cpu request 500m'
    >>> merged_problem(tpl, requests=req, owned_limits=["cpu"]) is None
    True
    """
    spec = template.get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or []} | {"recovery", "store"}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                return (
                    f"container {c.get('name')}: volumeMount {m.get('mountPath')} names no "
                    f"volume of the pod ({m.get('name')})"
                )
        if c.get("name") != TASK_CONTAINER:
            continue
        limits = (c.get("resources") or {}).get("limits") or {}
        for kind, request in requests.items():
            if (
                kind in limits
                and kind not in owned_limits
                and _quantity(limits[kind]) < _quantity(request)
            ):
                return (
                    f"container task: resources.limits.{kind} {limits[kind]} is below the "
                    f"{kind} request {request}"
                )
    return None


def task_pod_requests(
    topology: PodTemplate | None, operator: PodTemplate | None, cpu: str, memory: str
) -> tuple[float, float]:
    """``(cores, bytes)`` of one operator's task pods (:func:`pod_requests`), from the
    operator's ``resources`` quantities and both templates."""
    return pod_requests(merge_templates(topology, operator), _quantity(cpu), _quantity(memory))


class _Operator(Protocol):
    """What of ``spec.operators[]`` the checks read (the spec module imports this one)."""

    @property
    def pod_template(self) -> PodTemplate | None: ...
    @property
    def resources(self) -> Any: ...


class _Topology(Protocol):
    @property
    def pod_template(self) -> PodTemplate | None: ...
    @property
    def operators(self) -> Sequence[_Operator]: ...


T = TypeVar("T", bound=_Topology)


def pod_weight(spec: _Topology, op: _Operator) -> float:
    """The CPU an operator's task pod requests: the planners' weight of its tasks."""
    r = op.resources
    return task_pod_requests(spec.pod_template, op.pod_template, r.cpu, r.memory)[0]


def check_templates(spec: T) -> T:
    """The spec's validator of the merged templates (:func:`merged_problem`), per operator."""
    for i, op in enumerate(spec.operators):
        r = op.resources
        why = merged_problem(
            merge_templates(spec.pod_template, op.pod_template),
            requests={"cpu": r.cpu, "memory": r.memory},
            owned_limits=[k for k, v in (("cpu", r.cpu_limit), ("memory", r.memory_limit)) if v],
        )
        if why:
            raise ValueError(f"operators[{i}].podTemplate (merged with podTemplate): {why}")
    return spec
