"""A StreamTopology's tasks configured as local processes, exactly as their pods would be.

``backstop run`` (local mode, as Storm's ``LocalCluster`` and Flink's local MiniCluster)
starts each task of a manifest as a ``python -m backstop_runtime`` process on this
machine. Each process gets the environment of the pod the operator would create
(:func:`backstop.k8s.manifests.build_task_pod`: the task's id, operators, groupings,
config, checkpoint and batch settings), with what a kubelet would fill in (the pod's IP,
its node) set for localhost, ports chosen by the OS, and a directory store: the runtime
contract is the same as on a cluster, so what runs here runs there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from backstop.domain.spec import StreamTopologySpec, expand
from backstop.k8s.manifests import Owner, build_task_pod, task_roles

NAMESPACE = "local"
"""The namespace a local run's keys are under (``<store>/local/<name>/uid/...``)."""
UID = "uid"
NODE = "local"


def status_path(store: Path, name: str, task: str) -> Path:
    """Where task ``task`` of a local run writes its ``status.json`` in the store.

    >>> status_path(Path("/s"), "wc", "sink-0").as_posix()
    '/s/local/wc/uid/tasks/sink-0/status.json'
    """
    return store / NAMESPACE / name / UID / "tasks" / task / "status.json"


def local_task_envs(
    name: str,
    spec: StreamTopologySpec,
    store: Path | str,
    work: Path,
    base: Mapping[str, str],
    backups: Iterable[str] = (),
) -> dict[str, dict[str, str]]:
    """``{task: its environment}``: ``base`` (this process's, say) overlaid with the task
    pod's environment for topology ``name``, its state in ``store`` (a directory, or an
    ``s3://`` location whose settings are in ``base``), the recovery session's file (the
    operator's ConfigMap on a cluster) under the directory ``work``; ``backups``: the tasks
    that keep an upstream backup for their consumers.

    >>> ops = [{"name": "src", "reprocessingLatency": 1},
    ...        {"name": "out", "reprocessingLatency": 1, "inputs": [{"operator": "src"}]}]
    >>> spec = StreamTopologySpec.model_validate(
    ...     {"image": "x", "recoveryLatencyBound": 9, "operators": ops})
    >>> envs = local_task_envs("t", spec, "/tmp/s", Path("/tmp/w"), {})
    >>> sorted(envs), envs["src-0"]["BACKSTOP_STORE"], envs["out-0"]["BACKSTOP_POD_IP"]
    (['out-0', 'src-0'], '/tmp/s', '127.0.0.1')
    """
    graph = expand(spec)
    owner = Owner(name, NAMESPACE, UID)
    roles = task_roles(graph, frozenset(backups), {t: NODE for t in graph.tasks})
    out: dict[str, dict[str, str]] = {}
    for role in roles:
        pod = build_task_pod(owner, spec, role)
        env = dict(base)
        for e in pod["spec"]["containers"][0]["env"]:
            env[e["name"]] = str(e.get("value", ""))  # the downward API's are set below
        env.update(
            BACKSTOP_STORE=str(store),
            BACKSTOP_PORT="0",
            BACKSTOP_METRICS_PORT="0",
            BACKSTOP_POD_IP="127.0.0.1",
            BACKSTOP_NODE_NAME=NODE,
            BACKSTOP_RECOVERY_DIR=str(work / "recovery"),
        )
        out[role.task] = env
    return out
