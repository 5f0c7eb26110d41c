"""Which spec edits a topology that has run can take: the data plane's wiring is fixed.

Every task keeps its state, its input positions and its output rounds under its own name
(``tasks/<task>/`` in the store), and every producer routes to ``parallelism`` consumer
tasks by a hash it was configured with. An edit that changes that wiring on a running
topology cannot be carried out by replacing pods:

- a new task (more ``parallelism``, a new operator) has no checkpoint, so it asks its
  producers for their output from the first round, which they trimmed long ago: the
  topology stops there, every task waiting on a round nobody can serve;
- fewer tasks, or a key routed by another modulus, would leave keyed state on tasks the
  keys no longer reach, and a changed input moves rounds between streams the consumer's
  checkpoint counts apart.

Flink carries the first kind out through a savepoint and key groups; Backstop's runtime
does not split or merge a task's state (the missing steps are listed in
``docs/replication.md``, "Dynamic replication"). So such an edit is refused, naming the
field, by the webhook (when the stored spec is the one running) and by the reconcile
(against the plan's spec), while the pods go on with the spec they run. Removing an
operator nothing reads, and every other field (image, resources, config, bounds), are
edits a rollout carries out.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from backstop.domain.groupings import KEY_GROUPINGS, Grouping
from backstop.domain.limits import OFFLINE
from backstop.domain.spec import Input, StreamTopologySpec

__all__ = ["rewired", "wiring_change"]

WHY = (
    "the tasks of a topology that has run keep their state and input positions per task, "
    "and the runtime does not split or merge them; to change the wiring, create the "
    "topology again (it starts from empty state) or keep"
)


def _routing(inp: Input) -> tuple[str, str]:
    """An input as the producer routes it: every name of the key hash is one."""
    grouping = Grouping.key if inp.grouping in KEY_GROUPINGS else inp.grouping
    return inp.operator, grouping.value


def wiring_change(old: StreamTopologySpec, new: StreamTopologySpec) -> str | None:
    """Why ``new`` cannot replace ``old`` on a topology whose tasks have run, in one line
    naming the field; ``None`` when a rollout can carry it out.

    Examples
    --------
    >>> def spec(par, *inputs, extra=()):
    ...     ops = [{"name": "src", "reprocessingLatency": 1},
    ...            {"name": "count", "reprocessingLatency": 1, "parallelism": par,
    ...             "inputs": [{"operator": "src", "grouping": g} for g in inputs]}]
    ...     return StreamTopologySpec.model_validate(
    ...         {"image": "x", "recoveryLatencyBound": 5, "operators": ops + list(extra)})
    >>> wiring_change(spec(2, "key"), spec(2, "shuffle")) is None
    True
    >>> wiring_change(spec(2, "key"), spec(3, "key"))  # doctest: +ELLIPSIS
    'spec.operators[1].parallelism: count runs 2 tasks, not 3: the tasks of ... keep 2'
    >>> wiring_change(spec(2, "key"), spec(2, "rebalance"))  # doctest: +ELLIPSIS
    'spec.operators[1].inputs: count reads src (key), not src (rebalance): ... keep them'
    >>> sink = {"name": "out", "reprocessingLatency": 1, "inputs": [{"operator": "count"}]}
    >>> wiring_change(spec(2, "key"), spec(2, "key", extra=[sink]))  # doctest: +ELLIPSIS
    'spec.operators[2]: out is a new operator: ... keep it out'
    >>> wiring_change(spec(2, "key", extra=[sink]), spec(2, "key")) is None
    True
    """
    before = {op.name: op for op in old.operators}
    for i, op in enumerate(new.operators):
        was = before.get(op.name)
        if was is None:
            return f"spec.operators[{i}]: {op.name} is a new operator: {WHY} it out"
        if was.parallelism != op.parallelism:
            tasks = "task" if was.parallelism == 1 else "tasks"
            return (
                f"spec.operators[{i}].parallelism: {op.name} runs {was.parallelism} {tasks}, "
                f"not {op.parallelism}: {WHY} {was.parallelism}"
            )
        read, reads = sorted(map(_routing, was.inputs)), sorted(map(_routing, op.inputs))
        if read != reads:
            shown = ", ".join(f"{o} ({g})" for o, g in read) or "nothing"
            now = ", ".join(f"{o} ({g})" for o, g in reads) or "nothing"
            return f"spec.operators[{i}].inputs: {op.name} reads {shown}, not {now}: {WHY} them"
    return None


def rewired(old_spec: Any, new: StreamTopologySpec) -> str | None:
    """:func:`wiring_change` from a stored spec (a plain mapping), read as the CLI reads a
    manifest (no cluster limits: it was admitted once); ``None`` too when it no longer
    parses, so that such an edit is planned as any other."""
    try:
        old = StreamTopologySpec.model_validate(old_spec, context=OFFLINE)
    except ValidationError:
        return None
    return wiring_change(old, new)
