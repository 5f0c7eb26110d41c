"""The size ceilings of a topology in a cluster, and the offline context that lifts them.

A StreamTopology is one object that etcd stores whole, its annotations share 256 KiB, and
the operator writes a status and a session ConfigMap that grow with it (``docs/scale.md``).
So in a cluster the spec's model (:class:`backstop.domain.spec.StreamTopologySpec`, which
the admission webhook and the reconcile both run) refuses, naming the field:

- more than :data:`~backstop.domain.constants.MAX_OPERATORS` operators, ``MAX_INPUTS``
  inputs of one operator or ``MAX_PARALLELISM`` tasks of one (the CRD's schema states these
  too, as ``maxItems`` and ``maximum``, so the API server refuses them first);
- more than :data:`~backstop.domain.constants.MAX_TASKS` tasks or
  :data:`~backstop.domain.constants.MAX_TASK_EDGES` task-to-task edges, sums over fields
  that no Kubernetes 1.20 CRD schema can state, from the operators alone: a legal-looking
  1000 x 1000 shuffle is a million edges, seconds and hundreds of MiB to build.

A spec of more than :data:`~backstop.domain.constants.MAX_SPEC_BYTES` as stored
(:func:`check_spec_bytes`) is refused at admission only
(:func:`backstop.domain.admission.admission_problem`): an object etcd already holds is
never refused for its bytes, so the operator keeps supervising and recovering it.

The ``backstop`` CLI plans a manifest offline, where nothing is stored: it validates with
:data:`OFFLINE` as the validation context, and none of these ceilings apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationInfo

from backstop.domain.constants import (
    MAX_INPUTS,
    MAX_OPERATORS,
    MAX_PARALLELISM,
    MAX_SPEC_BYTES,
    MAX_TASK_EDGES,
    MAX_TASKS,
)

OFFLINE = MappingProxyType({"offline": True})
"""The validation context of a manifest planned offline (the CLI): no cluster ceiling."""


class _Spec(Protocol):
    @property
    def operators(self) -> Any: ...


S = TypeVar("S", bound=_Spec)
L = TypeVar("L", bound=Sized)


def in_cluster(info: ValidationInfo) -> bool:
    """Whether a validation is for a cluster (the default) rather than offline planning."""
    context = info.context
    return not (isinstance(context, Mapping) and context.get("offline"))


def _over(what: str, count: int, limit: int, per: str) -> str:
    return f"{count} {what}, more than the limit of {limit} per {per} in a cluster (docs/scale.md)"


def check_operator_count(operators: L, info: ValidationInfo) -> L:
    """``spec.operators``' validator of its length (the CRD's ``maxItems``), in a cluster."""
    if in_cluster(info) and len(operators) > MAX_OPERATORS:
        raise ValueError(_over("operators", len(operators), MAX_OPERATORS, "topology"))
    return operators


def check_input_count(inputs: L, info: ValidationInfo) -> L:
    """An operator's ``inputs``' validator of its length (the CRD's ``maxItems``)."""
    if in_cluster(info) and len(inputs) > MAX_INPUTS:
        raise ValueError(_over("inputs", len(inputs), MAX_INPUTS, "operator"))
    return inputs


def check_parallelism(parallelism: int, info: ValidationInfo) -> int:
    """An operator's ``parallelism``'s validator (the CRD's ``maximum``), in a cluster."""
    if in_cluster(info) and parallelism > MAX_PARALLELISM:
        raise ValueError(_over("tasks", parallelism, MAX_PARALLELISM, "operator"))
    return parallelism


def task_edges(grouping: str, upstream: int, parallelism: int) -> int:
    """How many task-to-task edges an input of ``upstream`` tasks into an operator of
    ``parallelism`` tasks makes (:func:`backstop.domain.spec.expand`'s rules).

    >>> task_edges("key", 2, 3), task_edges("global", 2, 3), task_edges("forward", 3, 3)
    (6, 2, 3)
    """
    if grouping == "forward":
        return parallelism
    if grouping == "global":
        return upstream
    return upstream * parallelism


def check_size_limits(spec: S) -> S:
    """The spec's validator of its task and edge counts: one line naming the field, or the
    spec.

    Raises
    ------
    ValueError
        ``operators[*].parallelism`` (too many tasks) or the input that contributes the
        most edges (too many edges).
    """
    tasks = sum(op.parallelism for op in spec.operators)
    if tasks > MAX_TASKS:
        raise ValueError(
            f"operators[*].parallelism sums to {tasks} tasks, more than the limit of "
            f"{MAX_TASKS} per topology (docs/scale.md)"
        )
    par = {op.name: op.parallelism for op in spec.operators}
    edges = [
        (task_edges(inp.grouping.value, par[inp.operator], op.parallelism), i, j)
        for i, op in enumerate(spec.operators)
        for j, inp in enumerate(op.inputs)
        if inp.operator in par  # an unknown input is expand()'s to name
    ]
    total = sum(e[0] for e in edges)
    if total > MAX_TASK_EDGES:
        most, i, j = max(edges)
        op = spec.operators[i]
        inp = op.inputs[j]
        raise ValueError(
            f"operators[{i}].inputs[{j}] ({inp.grouping.value} of "
            f"{par[inp.operator]} x {op.parallelism} tasks: {most} edges) makes "
            f"{total} task-to-task edges, more than the limit of {MAX_TASK_EDGES} per "
            "topology (docs/scale.md)"
        )
    return spec


def stored_bytes(model: BaseModel) -> int:
    """The most a model's object takes as the API server stores it: compact JSON, camelCase,
    every default written (the CRD's defaults are the model's), no ``null``.

    >>> from backstop.domain.spec import Input
    >>> stored_bytes(Input(operator="a"))  # {"operator":"a","grouping":"key"}
    33
    """
    return len(model.model_dump_json(by_alias=True, exclude_none=True).encode())


def _largest_part(spec: BaseModel) -> str:
    """The field of the spec that takes the most bytes, down to one operator."""
    fields = type(spec).model_fields
    sizes = {
        name: len(spec.model_dump_json(by_alias=True, exclude_none=True, include={name}))
        for name in fields
    }
    name = max(sizes, key=lambda n: sizes[n])
    alias = fields[name].alias or name
    if name != "operators":
        return f"spec.{alias} ({sizes[name]} bytes)"
    ops: list[BaseModel] = list(getattr(spec, name))
    i = max(range(len(ops)), key=lambda k: stored_bytes(ops[k]))
    return f"spec.operators[{i}] ({stored_bytes(ops[i])} bytes of {sizes[name]} in operators)"


def check_spec_bytes(spec: S) -> S:
    """The check of a spec's stored size at admission: one line naming its largest part, or
    the spec.

    The ceiling (:data:`~backstop.domain.constants.MAX_SPEC_BYTES`) accounts for the copies
    of the spec one StreamTopology holds (the spec, its ``managedFields`` entry, kubectl's
    last-applied annotation) and for the spec ConfigMap, which holds one more on its own.

    Raises
    ------
    ValueError
        The spec's size and the ceiling, and the field that takes the most of it.
    """
    model = cast(BaseModel, spec)
    size = stored_bytes(model)
    if size > MAX_SPEC_BYTES:
        raise ValueError(
            f"the spec takes {size} bytes as stored, more than the limit of {MAX_SPEC_BYTES} "
            f"({MAX_SPEC_BYTES // 1024} KiB) per topology in a cluster; the largest part is "
            f"{_largest_part(model)} (docs/scale.md)"
        )
    return spec


def cluster_size(spec: S, info: ValidationInfo) -> S:
    """The spec's validator of its tasks and edges in a cluster, before the task graph is
    built; offline (:data:`OFFLINE`), none."""
    return check_size_limits(spec) if in_cluster(info) else spec
