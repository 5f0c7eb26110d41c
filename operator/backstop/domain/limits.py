"""The size ceiling of a topology: limits no CRD schema can state, checked before expanding.

The CRD caps what one field holds (operators, inputs, parallelism: ``maxItems`` and
``maximum``), not sums over fields, and Kubernetes 1.20's structural schemas have no
expressions for them. So the spec's model (:class:`backstop.domain.spec.
StreamTopologySpec`, which the admission webhook and the reconcile both run) refuses a
topology of more than :data:`~backstop.domain.constants.MAX_TASKS` tasks or
:data:`~backstop.domain.constants.MAX_TASK_EDGES` task-to-task edges, from the operators
alone: a legal-looking 1000 x 1000 shuffle is a million edges, seconds and hundreds of
MiB to build, and no status or ConfigMap of it is tested to fit (``docs/scale.md``).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from backstop.domain.constants import MAX_TASK_EDGES, MAX_TASKS


class _Spec(Protocol):
    @property
    def operators(self) -> Any: ...


S = TypeVar("S", bound=_Spec)


def task_edges(grouping: str, upstream: int, parallelism: int) -> int:
    """How many task-to-task edges an input of ``upstream`` tasks into an operator of
    ``parallelism`` tasks makes (:func:`backstop.domain.spec.expand`'s rules).

    >>> task_edges("shuffle", 2, 3), task_edges("global", 2, 3), task_edges("forward", 3, 3)
    (6, 2, 3)
    """
    if grouping == "forward":
        return parallelism
    if grouping == "global":
        return upstream
    return upstream * parallelism


def check_size_limits(spec: S) -> S:
    """The spec's validator of its size: one line naming the field, or the spec.

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
