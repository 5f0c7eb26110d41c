"""Promotion of active replicas: when a primary's node is lost, its replica takes over.

A task with an active replica (``spec.replication``) has one or more pods beside its
primary, each named ``<pod>--r<k>`` and each processing the same input
(:mod:`backstop_runtime.task`). When the primary's node is lost, the recovery does not
restart the task from its checkpoint: the operator *promotes* a replica on a node still
usable. In ``status.plan`` (written before any pod is touched):

* ``assignment[task]`` becomes the replica's node, and the node leaves ``replicas[task]``;
* ``promoted[task] = k``: the primary now runs in the pod ``<pod>--r<k>``, which keeps its
  manifest (its spec-hash is unchanged, so nothing restarts it); its labels say
  ``role: primary`` and its epoch annotation the new epoch, both patched in place;
* ``epochs[task]`` goes one further: the promoted copy claims the task's store epoch with
  it, which fences the old primary should it still run (a half-dead node).

The runtime learns it from the operator's ``PUT /peers`` (``"role": "primary"`` and the
epoch): it claims the epoch and takes the primary's duties with no restart and no replay
(:mod:`backstop_runtime.promotion`). The task is then not among the failed tasks of the
recovery session. A new replica for it is chosen when the session ends, on the capacity
left (:func:`replacement_replicas`), in a pod of another number; the old primary's pod,
on the lost node, is no longer desired and is removed.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from backstop.domain.constants import ANN_EPOCH, ANN_HASH, LABEL_ROLE
from backstop.domain.fencing import bump_epochs
from backstop.domain.status import PlanStatus
from planners import TaskGraph


def replica_numbers(promoted: int | None, count: int) -> list[int]:
    """The numbers ``k`` of a task's ``count`` replica pods (``<pod>--r<k>``), in the
    order of ``status.plan.replicas[task]``: every number but the one whose pod holds the
    promoted primary. A replica keeps its number when another one is promoted.

    Examples
    --------
    >>> replica_numbers(None, 2), replica_numbers(0, 2), replica_numbers(1, 1)
    ([0, 1], [1, 2], [0])
    """
    return list(itertools.islice((k for k in itertools.count() if k != promoted), count))


def promote(
    plan: PlanStatus, lost: Collection[str], usable: Collection[str]
) -> tuple[PlanStatus, dict[str, str]]:
    """``plan`` with each task whose primary is on a node of ``lost`` and that has a
    replica on a node of ``usable`` (and not lost) promoted to it, and ``{task: node}``
    of those promoted (see the module docstring).

    Examples
    --------
    >>> plan = PlanStatus(assignment={"a-0": "n1", "b-0": "n1", "c-0": "n2"},
    ...     replicas={"a-0": ["n2"], "b-0": ["n3"]})
    >>> new, moved = promote(plan, lost={"n1"}, usable={"n2"})
    >>> moved, new.assignment
    ({'a-0': 'n2'}, {'a-0': 'n2', 'b-0': 'n1', 'c-0': 'n2'})
    >>> new.replicas, new.promoted, new.epochs
    ({'b-0': ['n3']}, {'a-0': 0}, {'a-0': 1})
    """
    assignment = dict(plan.assignment or {})
    replicas = {t: list(ns) for t, ns in (plan.replicas or {}).items()}
    promoted = dict(plan.promoted)
    moved: dict[str, str] = {}
    for task, nodes in sorted(replicas.items()):
        if assignment.get(task) not in lost:
            continue
        ok = [i for i, n in enumerate(nodes) if n in usable and n not in lost]
        if not ok:
            continue
        i = ok[0]
        promoted[task] = replica_numbers(promoted.get(task), len(nodes))[i]
        assignment[task] = moved[task] = nodes.pop(i)
    if not moved:
        return plan, {}
    kept = {t: ns for t, ns in replicas.items() if ns}
    update = {
        "assignment": assignment,
        "replicas": kept,
        "replicated": sorted(kept),
        "promoted": dict(sorted(promoted.items())),
        "epochs": bump_epochs(plan.epochs, sorted(moved)),
    }
    return plan.model_copy(update=update), moved


def replacement_replicas(
    plan: PlanStatus,
    wanted: Collection[str],
    free: Mapping[str, float],
    cpu: Mapping[str, float],
) -> dict[str, str]:
    """``{task: node}``: a new replica for each task of ``wanted`` that has none, on the
    node with the most free CPU (``free``) that does not run its primary and has room for
    its request (``cpu``); tasks taken in order, each taking its CPU from ``free``.

    Examples
    --------
    >>> plan = PlanStatus(assignment={"a-0": "n2", "b-0": "n3"}, replicas={})
    >>> replacement_replicas(plan, ["a-0", "b-0"], {"n2": 1.0, "n3": 0.6}, {"a-0": 0.5,
    ...     "b-0": 0.5})
    {'a-0': 'n3', 'b-0': 'n2'}
    >>> replacement_replicas(plan, ["a-0"], {"n2": 4.0}, {"a-0": 0.5})
    {}
    """
    left = dict(free)
    out: dict[str, str] = {}
    have, assignment = plan.replicas or {}, plan.assignment or {}
    for task in sorted(wanted):
        if have.get(task) or task not in assignment:
            continue
        need = cpu.get(task, 0.0)
        room = [n for n, c in left.items() if n != assignment[task] and c >= need]
        if room:
            node = max(room, key=lambda n: (left[n], n))
            out[task] = node
            left[node] -= need
    return out


def with_new_replicas(
    graph: TaskGraph,
    plan: PlanStatus,
    free: Mapping[str, float],
    placed: Mapping[str, str] | None = None,
) -> PlanStatus:
    """``plan`` with a new replica for each promoted task left without one, where
    ``free`` CPU allows (:func:`replacement_replicas`, each task's CPU from ``graph``),
    less what the tasks ``placed`` on this tick take (a recovery step comes first).

    Examples
    --------
    >>> g = TaskGraph.build(["a", "b"], [("a", "b")], latency={"a": 1, "b": 1})
    >>> plan = PlanStatus(assignment={"a": "n1", "b": "n2"}, promoted={"b": 0})
    >>> with_new_replicas(g, plan, {"n1": 2.0, "n2": 2.0}).replicas
    {'b': ['n1']}
    """
    left = dict(free)
    for task, node in (placed or {}).items():
        if node in left and task in graph._index:
            left[node] -= graph.weight[graph.index(task)]
    cpu = {t: graph.weight[graph.index(t)] for t in plan.promoted if t in graph._index}
    more = replacement_replicas(plan, list(cpu), left, cpu)
    if not more:
        return plan
    replicas = {**(plan.replicas or {}), **{t: [n] for t, n in more.items()}}
    return plan.model_copy(update={"replicas": replicas, "replicated": sorted(replicas)})


def relabels(
    desired: Mapping[str, Mapping[str, Any]], existing: Iterable[Mapping[str, Any]]
) -> list[tuple[str, dict[str, dict[str, str]]]]:
    """``(pod name, metadata patch)`` for each pod of ``existing`` whose manifest is the
    desired one (the same spec-hash) but whose role label or epoch annotation is not: a
    promoted replica's pod, told in place that it holds the primary now.

    Examples
    --------
    >>> want = {"t--a-0--r0": {"metadata": {"labels": {LABEL_ROLE: "primary"},
    ...     "annotations": {ANN_HASH: "h", ANN_EPOCH: "1"}}}}
    >>> pod = {"metadata": {"name": "t--a-0--r0", "labels": {LABEL_ROLE: "replica"},
    ...     "annotations": {ANN_HASH: "h", ANN_EPOCH: "0"}}}
    >>> relabels(want, [pod])
    [('t--a-0--r0', {'labels': {'streams.backstop.dev/role': 'primary'}, \
'annotations': {'streams.backstop.dev/epoch': '1'}})]
    >>> relabels(want, [{**pod, "metadata": {**pod["metadata"], "annotations": {}}}])
    []
    """
    out = []
    for pod in existing:
        meta = pod.get("metadata") or {}
        want = desired.get(str(meta.get("name")))
        if want is None or meta.get("deletionTimestamp") is not None:
            continue
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        wanted_labels, wanted_notes = want["metadata"]["labels"], want["metadata"]["annotations"]
        if notes.get(ANN_HASH) != wanted_notes[ANN_HASH]:
            continue  # another manifest: replaced, not patched
        role, epoch = wanted_labels[LABEL_ROLE], wanted_notes[ANN_EPOCH]
        if labels.get(LABEL_ROLE) != role or notes.get(ANN_EPOCH) != epoch:
            patch = {"labels": {LABEL_ROLE: role}, "annotations": {ANN_EPOCH: epoch}}
            out.append((str(meta["name"]), patch))
    return out
