"""The operator's I/O: reading nodes and pods, applying pod diffs, writing status.

Handlers decide *what* to do with pure functions (:mod:`backstop.domain.planning`,
:mod:`backstop.k8s.manifests`); this module is the only place that *does* it, so the
decisions stay testable without a cluster and the API calls stay in one place.
API errors that may pass (conflicts, throttling, a restarting API server) become
``kopf.TemporaryError`` in the handlers; nothing here swallows them silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import ANN_NODE, GROUP, LABEL_TOPOLOGY, VERSION
from backstop.domain.planning import PodDiff
from backstop.domain.podmerge import taints_tolerated
from backstop.k8s.apierrors import api_message, pod_refusal
from backstop.k8s.nodes import node_is_ready, nodes_from_manifests
from backstop.k8s.podfeed import readable_pods
from backstop.k8s.podrecord import slim_pod
from planners.placement import Node

DONE_PHASES = ("Succeeded", "Failed")
API_CONCURRENCY = 8
"""Pod creations/deletions in flight at once (bounded by the client's connection pool)."""
RECOVERYPLAN_HISTORY = 20
"""RecoveryPlans kept per topology (the newest); older ones are deleted as new ones come."""


def plan_age(plan: Mapping[str, Any]) -> tuple[str, int, int, str]:
    """The sort key that orders one topology's RecoveryPlans oldest first.

    By creation time, then session number (``s<epoch>``, ``r<epoch>``, ...), then step:
    the creation timestamps have one-second granularity, and every session numbers its
    steps from 1, so the step alone does not order two sessions.

    Examples
    --------
    >>> def plan(name, ts, session, step):
    ...     return {"metadata": {"name": name, "creationTimestamp": ts},
    ...             "spec": {"session": session, "step": step}}
    >>> plans = [plan("t-s9-1", "T1", "s9", 1), plan("t-s5-2", "T0", "s5", 2),
    ...          plan("t-s5-1", "T0", "s5", 1), plan("t-s7-1", "T0", "s7", 1)]
    >>> [p["metadata"]["name"] for p in sorted(plans, key=plan_age)]
    ['t-s5-1', 't-s5-2', 't-s7-1', 't-s9-1']
    """
    spec = plan.get("spec") or {}
    session = str(spec.get("session") or "")
    number = int(session[1:]) if session[1:].isdigit() else 0
    meta = plan["metadata"]
    return (
        str(meta.get("creationTimestamp") or ""),
        number,
        int(spec.get("step") or 0),
        str(meta["name"]),
    )


def plans_to_prune(plans: Sequence[Mapping[str, Any]], keep: int) -> list[str]:
    """Names of all but the ``keep`` newest RecoveryPlans of one topology (:func:`plan_age`).

    Examples
    --------
    >>> def plan(name, ts, session, step):
    ...     return {"metadata": {"name": name, "creationTimestamp": ts},
    ...             "spec": {"session": session, "step": step}}
    >>> plans = [plan("t-s9-2", "T1", "s9", 2), plan("t-s9-1", "T1", "s9", 1),
    ...          plan("t-s5-1", "T0", "s5", 1)]
    >>> plans_to_prune(plans, keep=2), plans_to_prune(plans, keep=3)
    (['t-s5-1'], [])
    """
    ordered = sorted(plans, key=plan_age)
    return [str(p["metadata"]["name"]) for p in ordered[: max(0, len(ordered) - keep)]]


T = TypeVar("T")
FaultHook = Callable[[Literal["mid-pod-batch"]], None]
"""Called between the two halves of a pod batch when fault injection is armed
(:mod:`backstop.controller.faults`; this layer may not import the controller)."""


@dataclass
class ClusterView:
    """What the planner may use: Ready schedulable nodes and this topology's pods.

    ``ready`` names every node the topology's ``nodeSelector`` selects (usable or not)
    and whether its Ready condition is True.
    """

    nodes: list[Node]
    own_pods: list[Mapping[str, Any]]
    """The topology's pods as the operator keeps them (:func:`~backstop.k8s.podrecord.slim_pod`)."""
    ready: dict[str, bool]

    def usable_names(self) -> set[str]:
        """Names of the nodes a plan may use now (Ready, schedulable, CPU left)."""
        return {n.name for n in self.nodes}

    def dead(self) -> set[str]:
        """Selected nodes whose Ready condition is not True."""
        return {n for n, ok in self.ready.items() if not ok}


def pod_node(pod: Any) -> str | None:
    """The node whose CPU a pod holds: where it is bound, or where a task pod is pinned.

    A task pod waits for the scheduler for a few seconds after it is created, but its
    required node affinity allows only its planned node; counting it there at once
    keeps a plan made meanwhile (another topology's, or the next recovery step) from
    handing out the same CPU.
    """
    return pod.spec.node_name or (pod.metadata.annotations or {}).get(ANN_NODE) or None


def _pod_stub(pod: Any) -> dict[str, Any]:
    """The fields of a pod that capacity accounting needs, as a manifest dict."""
    containers = [
        {"resources": {"requests": dict((c.resources and c.resources.requests) or {})}}
        for c in pod.spec.containers or []
    ]
    return {
        "kind": "Pod",
        "metadata": {"name": pod.metadata.name},
        "spec": {"nodeName": pod_node(pod), "containers": containers},
        "status": {"phase": pod.status.phase if pod.status else None},
    }


class Kube:
    """Thin wrapper over the API groups the operator uses."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        fault: FaultHook | None = None,
        recoveryplan_history: int = RECOVERYPLAN_HISTORY,
    ) -> None:
        self.api = api
        self.fault = fault
        self.recoveryplan_history = recoveryplan_history
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        pool_size = int(getattr(api.configuration, "connection_pool_maxsize", 1) or 1)
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, min(API_CONCURRENCY, pool_size // 2)),
            thread_name_prefix="backstop-api",
        )

    # ------------------------------------------------------------------ reading
    def pod_rejection(self, namespace: str, manifest: Mapping[str, Any]) -> str | None:
        """Why the API server refuses to create this pod (a server-side dry run), or ``None``.

        Only a refusal of the pod itself (400 Bad Request, 422 Invalid) is an answer; a
        refusal of the namespace (:func:`pod_refusal`) is raised as :class:`PodRefused`,
        any other error as it is (the handlers retry).
        """
        meta = dict(manifest["metadata"])
        meta["generateName"] = meta.pop("name") + "-"  # never collides with the real pod
        try:
            self.core.create_namespaced_pod(
                namespace, {**manifest, "metadata": meta}, dry_run="All"
            )
        except ApiException as err:
            if err.status in (400, 422):
                return api_message(err)
            raise pod_refusal(err) or err from None
        return None

    def view(
        self,
        namespace: str,
        topology: str,
        topology_key: str | None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Sequence[Mapping[str, Any]]] = ((),),
    ) -> ClusterView:
        """Nodes with the CPU left for this topology (other pods' requests subtracted).

        Lists every node and pod of the cluster (the pods of ``namespace`` alone when
        the caller may not list pods cluster-wide): for the CLI's one-off questions
        (``backstop place``). The controller builds the same view from its watch
        caches instead (:func:`backstop.controller.capacity.cluster_view`).
        A node with NoSchedule/NoExecute taints is left out unless every operator's pods
        tolerate them (``tolerations``: one list per operator,
        :func:`backstop.domain.incidents.topology_tolerations`).
        """
        node_list = [
            n
            for n in self.core.list_node().items
            if selected(n.metadata.labels or {}, node_selector or {})
        ]
        node_dicts = [self.api.sanitize_for_serialization(n) for n in node_list]
        for d in node_dicts:
            d["kind"] = "Node"
        others: list[dict[str, Any]] = []
        own: list[Mapping[str, Any]] = []
        for pod in readable_pods(self.core, namespace):
            labels = pod.metadata.labels or {}
            if pod.metadata.namespace == namespace and labels.get(LABEL_TOPOLOGY) == topology:
                own.append(slim_pod(self.api.sanitize_for_serialization(pod)))
            elif pod_node(pod):
                others.append(_pod_stub(pod))
        nodes = nodes_from_manifests(node_dicts, topology_key, pods=others)
        tainted = {
            d["metadata"]["name"]
            for d in node_dicts
            if not taints_tolerated((d.get("spec") or {}).get("taints") or [], tolerations)
        }
        usable = [n for n in nodes if n.name not in tainted]
        return ClusterView(usable, own, {n.metadata.name: node_is_ready(n) for n in node_list})

    # ------------------------------------------------------------------ writing
    def apply_pod_diff(self, namespace: str, diff: PodDiff) -> tuple[int, int]:
        """Delete outdated pods, then create missing ones. Returns (deleted, created).

        Pods that are outdated are deleted first; a pod is recreated under the same
        name only once the old one is gone (the caller retries until then). The
        calls of each phase run concurrently (:meth:`_each`): one by one, a plan of
        hundreds of pods would wait seconds for the round trips alone. A creation the
        namespace refuses raises :class:`PodRefused` (after every other call is made).
        """
        self.force_delete(namespace, diff.force)
        deleted = len(diff.force)

        def delete(name: str) -> int:
            try:
                self.core.delete_namespaced_pod(name, namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
                return 0
            return 1

        todo_delete = list(diff.delete)
        blocked = set(diff.delete) | set(diff.terminating)

        def create(manifest: dict[str, Any]) -> int:
            try:
                # the answer is read but not made a V1Pod: nothing reads it, and that
                # parse is the client's largest cost per creation
                resp = self.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
                resp.read()
                resp.release_conn()
            except ApiException as err:
                if err.status != 409:  # already exists: a previous attempt created it
                    raise pod_refusal(err) or err from None
                return 0
            return 1

        todo = [m for m in diff.create if m["metadata"]["name"] not in blocked]
        midway = None  # which phase an armed fault injection interrupts
        if self.fault is not None:
            midway = "create" if len(todo) >= 2 else "delete" if len(todo_delete) >= 2 else None
        deleted += self._batch(delete, todo_delete, stop_midway=midway == "delete")
        return deleted, self._batch(create, todo, stop_midway=midway == "create")

    def _batch(self, call: Callable[[T], int], items: Sequence[T], *, stop_midway: bool) -> int:
        """:meth:`_each`, summed; with ``stop_midway``, the ``mid-pod-batch`` fault point
        is reached after the first half (only when fault injection is armed)."""
        if not stop_midway or self.fault is None:
            return sum(self._each(call, items))
        cut = len(items) // 2
        done = sum(self._each(call, items[:cut]))
        self.fault("mid-pod-batch")
        return done + sum(self._each(call, items[cut:]))

    def _each(self, call: Callable[[T], int], items: Sequence[T]) -> list[int]:
        """``call`` on every item, at most :data:`API_CONCURRENCY` at a time process-wide.

        One executor serves every handler and daemon thread, so concurrent
        reconciles share the client's connection pool instead of overflowing it.
        Every call is attempted; the first error is raised after all have finished
        (the handlers retry, and creating or deleting twice is harmless).
        """
        if len(items) <= 1:
            return [call(i) for i in items]
        futures = [self._executor.submit(call, i) for i in items]
        wait(futures)
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise errors[0]
        return [f.result() for f in futures]

    def topology_gone(self, namespace: str, name: str) -> bool:
        """Whether the StreamTopology no longer exists."""
        try:
            self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "streamtopologies", name
            )
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the topology's status subresource (the write-ahead log)."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "streamtopologies", name, {"status": dict(status)}
        )

    def stop_pods(self, namespace: str, names: Iterable[str], grace_seconds: float) -> None:
        """Delete pods gracefully with ``grace_seconds`` to stop (SIGTERM: the task takes
        its final checkpoint, :mod:`backstop.domain.lifecycle`)."""
        grace = max(1, round(grace_seconds))

        def stop(name: str) -> int:
            try:
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
            except ApiException as err:
                if err.status != 404:
                    raise
            return 1

        self._each(stop, list(names))

    def force_delete(self, namespace: str, names: Iterable[str]) -> None:
        """Remove pods stuck Terminating on a dead node (no kubelet will confirm)."""

        def remove(name: str) -> int:
            try:
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException as err:
                if err.status != 404:
                    raise
            return 1

        self._each(remove, list(names))

    def patch_pod_metadata(
        self, namespace: str, changes: Iterable[tuple[str, Mapping[str, Mapping[str, str]]]]
    ) -> None:
        """Patch the labels and annotations of pods in place (``(name, metadata)`` pairs;
        a pod gone meanwhile is skipped): a promoted replica's role and epoch."""

        def patch(change: tuple[str, Mapping[str, Mapping[str, str]]]) -> int:
            try:
                self.core.patch_namespaced_pod(change[0], namespace, {"metadata": change[1]})
            except ApiException as err:
                if err.status != 404:
                    raise
            return 1

        self._each(patch, list(changes))

    def put_recoveryplan(self, manifest: Mapping[str, Any], phase: str) -> None:
        """Create the RecoveryPlan (or, if a crashed attempt left one, replace its spec).

        A new one pushes the oldest of its topology out beyond
        :attr:`recoveryplan_history` (:meth:`prune_recoveryplans`).
        """
        ns = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, "recoveryplans", dict(manifest)
            )
        except ApiException as err:
            if err.status != 409:
                raise
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, "recoveryplans", name, {"spec": manifest["spec"]}
            )
        self.set_recoveryplan_phase(ns, name, phase)
        self.prune_recoveryplans(ns, manifest["metadata"]["labels"][LABEL_TOPOLOGY])

    def prune_recoveryplans(self, namespace: str, topology: str) -> int:
        """Delete all but the newest :attr:`recoveryplan_history` RecoveryPlans of a topology."""
        found = self.custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "recoveryplans",
            label_selector=f"{LABEL_TOPOLOGY}={topology}",
        )
        names = plans_to_prune(found.get("items") or [], self.recoveryplan_history)

        def delete(name: str) -> int:
            try:
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "recoveryplans", name
                )
            except ApiException as err:
                if err.status != 404:
                    raise
                return 0
            return 1

        return sum(self._each(delete, names))

    def set_recoveryplan_phase(self, namespace: str, name: str, phase: str) -> None:
        """Set ``status.phase`` of a RecoveryPlan (Issued, Applied, ...)."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "recoveryplans", name, {"status": {"phase": phase}}
        )

    def put_configmap(self, manifest: Mapping[str, Any]) -> None:
        """Create or update a ConfigMap."""
        ns = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        try:
            self.core.patch_namespaced_config_map(name, ns, {"data": manifest["data"]})
        except ApiException as err:
            if err.status != 404:
                raise
            self.core.create_namespaced_config_map(ns, dict(manifest))

    def configmap_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's ``data``, or ``None`` when there is no such ConfigMap."""
        try:
            cm = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return dict(cm.data or {})

    def put_pdb(self, manifest: Mapping[str, Any]) -> str:
        """Create or update a PodDisruptionBudget; returns the ``policy`` version used.

        ``policy/v1`` where the API server has it (1.21+), else ``policy/v1beta1`` (the
        local control plane is 1.20).
        """
        ns = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        for version in ("v1", "v1beta1"):
            try:
                self.custom.patch_namespaced_custom_object(
                    "policy", version, ns, "poddisruptionbudgets", name, {"spec": manifest["spec"]}
                )
                return version
            except ApiException as err:
                if err.status != 404:
                    raise
            body = {**manifest, "apiVersion": f"policy/{version}"}
            try:
                self.custom.create_namespaced_custom_object(
                    "policy", version, ns, "poddisruptionbudgets", body
                )
                return version
            except ApiException as err:
                if err.status != 404:  # 404: no policy/<version> on this server
                    raise
        raise ApiException(status=404, reason="the API server serves no PodDisruptionBudgets")

    def patch_status_returning(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch the status and return the updated object.

        With ``resource_version`` the patch is conditional: the API server answers
        409 Conflict if the object changed since that version was read.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        obj: dict[str, Any] = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "streamtopologies", name, body
        )
        return obj

    def get_topology(self, namespace: str, name: str) -> dict[str, Any]:
        """The StreamTopology as the API server holds it now."""
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "streamtopologies", name
        )
        return obj


def selected(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """Whether node ``labels`` satisfy a ``nodeSelector``."""
    return all(labels.get(k) == v for k, v in selector.items())
