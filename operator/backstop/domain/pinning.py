"""How a task pod is pinned to its planned node, and what of the pin its spec-hash covers.

The planners decide a node for every task; the pod carries that decision as a *required*
node affinity, so the real scheduler binds it there and nowhere else. The pin names the
Node's ``metadata.name`` (the name the plan, the pod's ``spec.nodeName`` and the Node
object use), never its ``kubernetes.io/hostname`` label, which may differ from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backstop.domain.constants import HOSTNAME, NODE_NAME_FIELD


def pinned(node: str) -> dict[str, Any]:
    """The required node affinity that lets the scheduler bind a task pod only to ``node``.

    It matches the Node's ``metadata.name`` (``matchFields``), the name the plan and the
    pod's ``spec.nodeName`` use: a node's ``kubernetes.io/hostname`` label may differ from
    its name (cloud nodes named by their DNS name, kubelets started with
    ``--hostname-override``), and a pin on the label would then match no node.
    """
    term = {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}
    return _required(term)


def pinned_by_hostname(node: str) -> dict[str, Any]:
    """The same pin on the ``kubernetes.io/hostname`` label: the form the spec-hash covers,
    and the form pods made by earlier operators carry (:func:`pinned_node` reads both)."""
    return _required({"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]})


def _required(term: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def hashed_pod_spec(pod_spec: Mapping[str, Any], node: str) -> Mapping[str, Any]:
    """What a pod's ``spec-hash`` covers: its spec with the pin in the hostname-label form.

    The hash covers the pinned node, not how the pin is written: a pod pinned by the label
    has the very hash of its equal pinned by name, so an operator upgrade restarts no task
    pod over the form of its pin.
    """
    return {**pod_spec, "affinity": pinned_by_hostname(node)}


def pinned_node(pod_spec: Mapping[str, Any]) -> str | None:
    """The node a task pod is pinned to, from either form of its pin (``None``: none).

    >>> pinned_node({"affinity": pinned("n1")}), pinned_node({"affinity": pinned_by_hostname("n2")})
    ('n1', 'n2')
    """
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for kind, key in (("matchFields", NODE_NAME_FIELD), ("matchExpressions", HOSTNAME)):
            for expr in term.get(kind) or []:
                if expr.get("key") == key and expr.get("operator") == "In" and expr["values"]:
                    return str(expr["values"][0])
    return None
