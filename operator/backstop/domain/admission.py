"""What the admission webhook decides about a StreamTopology: one line naming the field, or
nothing.

The webhook (:mod:`backstop.controller.admission`) runs the very checks the operator runs
when it reconciles (:func:`~backstop.domain.spec.parse_spec`: the pydantic model, then the
graph checks of :func:`~backstop.domain.spec.expand`), so ``kubectl apply`` of a spec the
operator would mark ``InvalidSpec`` fails at once instead, with the same words. It also
refuses a spec too large to store safely (:func:`bytes_problem`), which the operator runs
all the same once stored, so that a recovery never stops for its size. The API
server shows one line of the answer per refusal, so several problems are joined with
``; `` on one line.

A store the tasks cannot share (:func:`node_local_problem`: an ``emptyDir``, or a
``hostPath`` of tasks that may run on several nodes) is refused as well, unless the operator
allows node-local stores (a single-host development cluster).

Unknown fields: the CRD's schema is structural, so the API server prunes what it does not
know *before* any webhook sees the object. What the user wrote is still in the
``kubectl apply`` annotation (client-side apply writes it), and the webhook refuses a spec
whose last-applied form names a field the model does not know. ``kubectl apply`` refuses
such a manifest itself first (its schema validation); the webhook catches
``--validate=false``. A client that writes no such annotation (``kubectl create``,
server-side apply, a program) still gets unknown fields pruned silently: the docs say so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from backstop.domain.constants import ANN_LAST_APPLIED, HOSTNAME
from backstop.domain.groupings import grouping_warnings
from backstop.domain.limits import OFFLINE, check_spec_bytes
from backstop.domain.names import field_path, format_validation_error
from backstop.domain.spec import StreamTopologySpec, parse_spec
from backstop.domain.wiring import rewired
from planners import InvalidTopology


def unknown_fields(annotations: Mapping[str, str]) -> list[str]:
    """Fields of the last ``kubectl apply`` (its annotation) that the spec does not know.

    The CRD's schema is structural, so the API server silently prunes unknown fields
    (``kubectl apply`` refuses them first, unless ``--validate=false``); the pruned
    object is all the operator sees. The client-side apply annotation still holds what
    the user wrote, so the webhook can refuse it and the operator can name the dropped
    fields in a Warning Event.

    Examples
    --------
    >>> doc = {"spec": {"image": "x", "recoveryLatencyBound": 1, "placementAlgoritm": "auto",
    ...     "operators": [{"name": "a", "reprocessingLatency": 1, "paralelism": 2}]}}
    >>> unknown_fields({ANN_LAST_APPLIED: json.dumps(doc)})
    ['spec.operators[0].paralelism', 'spec.placementAlgoritm']
    >>> unknown_fields({})
    []
    """
    try:
        applied = json.loads(annotations.get(ANN_LAST_APPLIED) or "{}")
    except ValueError:
        return []
    if not isinstance(applied, dict) or not isinstance(applied.get("spec"), dict):
        return []
    try:
        StreamTopologySpec.model_validate(applied["spec"], context=OFFLINE)  # fields only
    except ValidationError as err:
        found = {
            field_path(e["loc"], "spec") for e in err.errors() if e["type"] == "extra_forbidden"
        }
        return sorted(found)
    return []


def one_line(message: str) -> str:
    """Several problems (one per line, each naming its field) as one line, ``; `` apart.

    >>> one_line("spec.a: bad\\nspec.b: worse")
    'spec.a: bad; spec.b: worse'
    """
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def bytes_problem(spec: StreamTopologySpec) -> str | None:
    """Why a spec is too large to store, in one line naming its largest part; ``None``: it
    fits (:func:`backstop.domain.limits.check_spec_bytes`)."""
    try:
        check_spec_bytes(spec)
    except ValueError as err:
        return f"spec: {err}"
    return None


def cluster_problem(spec: StreamTopologySpec) -> str | None:
    """Why a cluster would refuse a spec validated offline (its size: operators, inputs,
    tasks, edges, bytes), in one line naming the field; ``None``: a cluster admits it.

    The CLI plans any size offline and says this beside the plan.

    >>> ops = [{"name": f"o{i}", "reprocessingLatency": 1} for i in range(401)]
    >>> doc = {"image": "x", "recoveryLatencyBound": 2, "operators": ops}
    >>> spec = StreamTopologySpec.model_validate(doc, context=OFFLINE)
    >>> cluster_problem(spec)  # doctest: +ELLIPSIS
    'spec.operators: 401 operators, more than the limit of 400 per topology in a cluster ...'
    """
    try:
        model = StreamTopologySpec.model_validate(spec.model_dump(by_alias=True, exclude_none=True))
    except ValidationError as err:
        return one_line(format_validation_error(err, "spec"))
    return bytes_problem(model)


def admission_problem(
    spec: Any,
    *,
    name: str | None,
    annotations: Mapping[str, str],
    old_spec: Any = None,
    old_annotations: Mapping[str, str] | None = None,
    old_running: bool = False,
    allow_node_local_store: bool = False,
    default_image: str | None = None,
) -> str | None:
    """Why a create/update of a StreamTopology must be refused, in one line; ``None``: admit.

    An update that changes neither the spec nor the last-applied manifest (the operator's own
    annotations and finalizer, a label) is always admitted, so an object stored before the
    webhook or the CRD's limits existed can still be patched, finalized and deleted. A spec
    too large to store safely (:func:`bytes_problem`) is refused here, not by the model: an
    object already stored is supervised whatever its size.

    Examples
    --------
    >>> spec = {"image": "x", "recoveryLatencyBound": 2, "operators": [
    ...     {"name": "a", "reprocessingLatency": 1, "inputs": [{"operator": "foo"}]}]}
    >>> admission_problem(spec, name="t", annotations={})
    "spec.operators[0].inputs[0].operator: operator 'a' reads from unknown operator 'foo'"
    >>> admission_problem(spec, name="t", annotations={}, old_spec=spec, old_annotations={})
    >>> admission_problem({**spec, "operators": [{"name": "a", "reprocessingLatency": -1,
    ...     "resources": {"cpu": "-1"}}]}, name="t", annotations={})  # doctest: +ELLIPSIS
    "spec.operators[0].resources.cpu: '-1' must be positive; spec.operators[0].reproc...
    """
    old_applied = (old_annotations or {}).get(ANN_LAST_APPLIED)
    unchanged = old_spec == spec and old_applied == annotations.get(ANN_LAST_APPLIED)
    if old_spec is not None and unchanged:
        return None
    dropped = unknown_fields(annotations)
    if dropped:
        return "; ".join(f"{path}: unknown field" for path in dropped)
    try:
        model = parse_spec(spec, name)
    except InvalidTopology as err:
        return one_line(str(err))
    wiring = rewired(old_spec, model) if old_running else None
    if wiring is not None:
        return wiring
    no_image = image_problem(model, default_image)
    if no_image is not None:
        return no_image
    too_large = bytes_problem(model)
    if too_large is not None or allow_node_local_store:
        return too_large
    return node_local_problem(model)


def admission_warnings(spec: Any, *, old_spec: Any = None) -> list[str]:
    """The Warnings an admitted create/update gets (``kubectl`` prints them): one per input
    whose grouping is named ``shuffle`` (:func:`~backstop.domain.groupings.grouping_warnings`).

    None for an update that leaves the spec alone (the operator's own patches) or a spec the
    model refuses (the refusal says why).

    >>> spec = {"image": "x", "recoveryLatencyBound": 2, "operators": [
    ...     {"name": "a", "reprocessingLatency": 1},
    ...     {"name": "b", "reprocessingLatency": 1, "inputs": [{"operator": "a",
    ...      "grouping": "shuffle"}]}]}
    >>> admission_warnings(spec)  # doctest: +ELLIPSIS
    ['spec.operators[1].inputs[0].grouping: shuffle hashes by the record key ...']
    >>> admission_warnings(spec, old_spec=spec)
    []
    """
    if old_spec is not None and old_spec == spec:
        return []
    try:
        model = StreamTopologySpec.model_validate(spec, context=OFFLINE)
    except ValidationError:
        return []
    return grouping_warnings([i.grouping for i in op.inputs] for op in model.operators)


def _spread(spec: StreamTopologySpec) -> str | None:
    """Why the topology's pods may run on several nodes (``None``: one node at most).

    Kept simple on purpose: one task without replicas runs in one pod, and a
    ``nodeSelector`` on ``kubernetes.io/hostname`` pins every pod to one node; anything
    else may be spread by the placement (and moved by recovery) across nodes.
    """
    tasks = sum(op.parallelism for op in spec.operators)
    if HOSTNAME in spec.node_selector:
        return None
    if tasks > 1:
        return f"its {tasks} tasks may run on different nodes"
    if spec.replication is not None:
        return "its replicas run on other nodes"
    return None


ADVICE = (
    "use spec.store.objectStore or a ReadWriteMany persistentVolumeClaim "
    "(a single-host development cluster: run the operator with "
    "BACKSTOP_ALLOW_NODE_LOCAL_STORE=true)"
)


def image_problem(spec: StreamTopologySpec, default_image: str | None) -> str | None:
    """Why some task of ``spec`` has no image, in one line; ``None``: each has one (its
    operator's ``image``, ``spec.image``, or the operator's default task image).

    >>> spec = parse_spec({"recoveryLatencyBound": 2, "operators": [
    ...     {"name": "a", "reprocessingLatency": 1, "image": "a:1"},
    ...     {"name": "b", "reprocessingLatency": 1}]})
    >>> image_problem(spec, None)  # doctest: +ELLIPSIS
    "spec.image: required: operator 'b' names no image, and the Backstop operator has ..."
    >>> image_problem(spec, "registry.example.com/team/runtime:1") is None
    True
    """
    if spec.image is not None or default_image is not None:
        return None
    bare = [op.name for op in spec.operators if op.image is None]
    if not bare:
        return None
    return (
        f"spec.image: required: operator {bare[0]!r} names no image, and the Backstop operator "
        "has no default task image (BACKSTOP_TASK_IMAGE; the chart sets <image.registry>/runtime)"
    )


def node_local_problem(spec: StreamTopologySpec) -> str | None:
    """Why the store cannot be shared by the topology's tasks, in one line; ``None``: it can.

    An ``emptyDir`` (also the store when ``spec.store`` is unset) is private to one pod, so
    two tasks never see each other's state, wherever they run; a ``hostPath`` is a
    different directory on every node, which is enough only when every pod runs on one node.
    """
    kind = spec.store.kind()
    tasks = sum(op.parallelism for op in spec.operators)
    if kind == "emptyDir" and (tasks > 1 or spec.replication is not None):
        unset = "" if spec.store.volume else " (the default when spec.store is unset)"
        return (
            f"spec.store: an emptyDir{unset} is private to each pod; {tasks} tasks cannot "
            f"share state: {ADVICE}"
        )
    why = _spread(spec) if kind == "hostPath" else None
    if why is not None:
        return (
            f"spec.store: a hostPath is a different directory on every node, and {why}; "
            f"tasks on different nodes cannot share state: {ADVICE}"
        )
    return None
