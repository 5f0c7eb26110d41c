"""The task's configuration, read once from the environment the operator sets on the pod.

Everything a task knows about the topology comes from here, so a task started by hand
(tests, ``hack/`` scripts) and a task started by the operator behave the same. A missing
or malformed variable or config field raises :class:`ConfigError` naming it; the entry
point turns that into a one-line message and exit code 2, so the pod's status shows the
cause instead of a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUPINGS = ("forward", "key", "fields", "shuffle", "rebalance", "broadcast", "global")
"""``BACKSTOP_DOWNSTREAM``'s groupings: ``key``, ``fields`` and ``shuffle`` name the hash of
the record key (the operator writes ``shuffle``, which every runtime version reads so);
``rebalance`` spreads evenly, not by key (:class:`backstop_runtime.engine.Partitioner`)."""
DEFAULT_PORT = 7077
DEFAULT_STORE = "/var/lib/backstop"  # where manifests.py mounts spec.store
NO_UID = "local"
"""The uid part of the store path of a task started without ``BACKSTOP_TOPOLOGY_UID``."""


class ConfigError(Exception):
    """A missing or invalid setting; the message names the variable or config field."""


class Fenced(Exception):
    """A newer copy of this task (a higher epoch) has started; this copy must stop writing."""


@dataclass(frozen=True)
class Downstream:
    """One consumer operator of this task's operator, and how it partitions its input."""

    operator: str
    parallelism: int
    grouping: str

    def tasks(self) -> list[str]:
        return [f"{self.operator}-{i}" for i in range(self.parallelism)]


REPLICA_MARK = "#r"
"""Separates a task id from a replica's number in a copy's name (never in a task id)."""


def copy_name(task: str, replica: int) -> str:
    """The name a replica copy of ``task`` goes by on the data plane.

    >>> copy_name("count-0", 0), base_task("count-0#r0"), base_task("count-0")
    ('count-0#r0', 'count-0', 'count-0')
    """
    return f"{task}{REPLICA_MARK}{replica}"


def base_task(copy: str) -> str:
    """The task a copy's name belongs to (see :func:`copy_name`)."""
    return copy.split(REPLICA_MARK, 1)[0]


@dataclass(frozen=True)
class TaskConfig:
    """Who the task is and where it keeps its state; see the README's runtime contract."""

    topology: str
    task: str
    operator: str
    index: int
    parallelism: int
    upstream: tuple[str, ...]
    downstream: tuple[Downstream, ...]
    keeps_backup: bool
    role: str
    config: Mapping[str, Any]
    store: str
    """``BACKSTOP_STORE``: ``s3://bucket/prefix`` or a directory (see :func:`store_location`)."""
    host: str
    port: int
    recovery_dir: Path | None
    checkpoint_interval: float = 4.0
    batch_interval: float = 0.1
    metrics_interval: float = 5.0
    epoch: int = 0
    """``BACKSTOP_EPOCH``: this copy's fencing epoch decided by the operator (0 if unset)."""
    namespace: str = "default"
    """``BACKSTOP_NAMESPACE``: the StreamTopology's namespace."""
    topology_uid: str = ""
    """``BACKSTOP_TOPOLOGY_UID``: the StreamTopology's ``metadata.uid`` ("" by hand)."""
    extra: Mapping[str, str] = field(default_factory=dict)
    replica: int = 0
    """``BACKSTOP_REPLICA``: which active replica of the task this copy is (a replica)."""

    @property
    def is_source(self) -> bool:
        return not self.upstream

    @property
    def is_replica(self) -> bool:
        """An active replica: it follows its primary's input and serves the same output,
        but owns no state (no epoch, checkpoint, status or output of its own)."""
        return self.role == "replica"

    @property
    def copy(self) -> str:
        """This copy's name among the task's copies: the task id for the primary,
        ``<task>#r<k>`` for its ``k``-th replica (:func:`copy_name`)."""
        return copy_name(self.task, self.replica) if self.is_replica else self.task

    @property
    def root(self) -> str:
        """This topology's part of the store, a key prefix: ``<namespace>/<topology>/<uid>``.

        Keyed by namespace and uid, so two topologies of one name in two namespaces
        sharing a store, or a topology deleted and created again (a new uid), never read
        each other's checkpoints, epochs or peers. A task started by hand without
        ``BACKSTOP_TOPOLOGY_UID`` uses :data:`NO_UID` for the uid.
        """
        return f"{self.namespace}/{self.topology}/{self.topology_uid or NO_UID}"

    @property
    def task_key(self) -> str:
        """The key prefix of this task's checkpoints, epochs and logs (no trailing ``/``)."""
        return self.task_key_of(self.task)

    def task_key_of(self, task: str) -> str:
        """The key prefix of ``task`` of this topology."""
        return f"{self.root}/tasks/{task}"

    @property
    def peers_key(self) -> str:
        """The address registry: one ``<peers_key>/<task>.json`` per task."""
        return f"{self.root}/peers"

    @property
    def metrics_key(self) -> str:
        """The metrics rows: ``<metrics_key>/{tasks,nodes}/*.jsonl``."""
        return f"{self.root}/metrics"

    def consumers(self) -> list[tuple[str, Downstream]]:
        """(task id, its operator's edge) for every task this task sends to.

        ``forward`` sends to the task with our index, ``global`` to task 0, the others
        to all of them (``key`` and ``rebalance`` pick one per record, ``broadcast`` all).
        """
        out: list[tuple[str, Downstream]] = []
        for d in self.downstream:
            if d.grouping == "forward":
                out.append((f"{d.operator}-{self.index}", d))
            elif d.grouping == "global":
                out.append((f"{d.operator}-0", d))
            else:
                out.extend((t, d) for t in d.tasks())
        return out


def require(config: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    """``config[name]``, or a :class:`ConfigError` naming the field ``config.<name>``."""
    if name not in config:
        raise ConfigError(f"config.{name} is required but missing (spec.operators[].config)")
    value = config[name]
    if not isinstance(value, kind):
        raise ConfigError(f"config.{name} must be {_kind(kind)}, got {value!r}")
    return value


def _kind(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _env(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or value == "":
        raise ConfigError(f"environment variable {name} is required but not set")
    return value


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw in (None, "") and default is not None:
        return default
    text = _env(env, name)
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not an integer") from None


def _component(env: Mapping[str, str], name: str, default: str) -> str:
    """A value that is one part of a store path (a namespace, a uid): no ``/``, no ``..``.

    >>> _component({"BACKSTOP_NAMESPACE": "../x"}, "BACKSTOP_NAMESPACE", "default")
    Traceback (most recent call last):
    ...
    backstop_runtime.config.ConfigError: BACKSTOP_NAMESPACE='../x' is not one path component
    """
    value = env.get(name) or default
    if "/" in value or value in (".", ".."):
        raise ConfigError(f"{name}={value!r} is not one path component")
    return value


def store_location(env: Mapping[str, str]) -> str:
    """``BACKSTOP_STORE``: ``s3://bucket/prefix`` or a directory path (default
    :data:`DEFAULT_STORE`).

    >>> store_location({"BACKSTOP_STORE": "s3://state/prod"})
    's3://state/prod'
    >>> store_location({"BACKSTOP_STORE": "s3:///x"})
    Traceback (most recent call last):
    ...
    backstop_runtime.config.ConfigError: BACKSTOP_STORE='s3:///x' has no bucket (expected s3://bucket/prefix)
    """
    value = env.get("BACKSTOP_STORE") or DEFAULT_STORE
    if value.startswith("s3://"):
        if not value.removeprefix("s3://").partition("/")[0]:
            raise ConfigError(
                f"BACKSTOP_STORE={value!r} has no bucket (expected s3://bucket/prefix)"
            )
    elif "://" in value:
        raise ConfigError(f"BACKSTOP_STORE={value!r}: use s3://bucket/prefix or a directory")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def _json(env: Mapping[str, str], name: str, default: Any) -> Any:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{name} is not valid JSON: {err}") from None


def _downstream(raw: Any) -> tuple[Downstream, ...]:
    if not isinstance(raw, list):
        raise ConfigError("BACKSTOP_DOWNSTREAM must be a JSON list")
    out = []
    for i, item in enumerate(raw):
        where = f"BACKSTOP_DOWNSTREAM[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} must be an object")
        for key in ("operator", "parallelism", "grouping"):
            if key not in item:
                raise ConfigError(f"{where}.{key} is required but missing")
        if item["grouping"] not in GROUPINGS:
            raise ConfigError(f"{where}.grouping must be one of {', '.join(GROUPINGS)}")
        if not isinstance(item["parallelism"], int) or item["parallelism"] < 1:
            raise ConfigError(f"{where}.parallelism must be a positive integer")
        out.append(Downstream(str(item["operator"]), item["parallelism"], item["grouping"]))
    return tuple(out)


def from_env(env: Mapping[str, str] | None = None) -> TaskConfig:
    """Read the task's configuration from ``env`` (default: the process environment).

    Raises
    ------
    ConfigError
        Naming the variable that is missing or malformed.

    Examples
    --------
    >>> c = from_env({"BACKSTOP_TOPOLOGY": "wc", "BACKSTOP_TASK_ID": "count-1",
    ...     "BACKSTOP_OPERATOR": "count", "BACKSTOP_TASK_INDEX": "1",
    ...     "BACKSTOP_UPSTREAM_TASKS": "split-0,split-1", "BACKSTOP_STORE": "/s",
    ...     "BACKSTOP_CONFIG": '{"function": "m:C"}'})
    >>> c.upstream, c.keeps_backup, c.config["function"], c.store, c.task_key
    (('split-0', 'split-1'), False, 'm:C', '/s', 'default/wc/local/tasks/count-1')
    >>> from_env({**c.extra, "BACKSTOP_NAMESPACE": "ns", "BACKSTOP_TOPOLOGY_UID": "u1",
    ...     "BACKSTOP_CONFIG": "{}"}).root
    'ns/wc/u1'
    >>> try:
    ...     from_env({"BACKSTOP_TOPOLOGY": "wc"})
    ... except ConfigError as err:
    ...     print(err)
    environment variable BACKSTOP_TASK_ID is required but not set
    """
    env = os.environ if env is None else env
    topology = _env(env, "BACKSTOP_TOPOLOGY")
    task = _env(env, "BACKSTOP_TASK_ID")
    operator = _env(env, "BACKSTOP_OPERATOR")
    index = _int(env, "BACKSTOP_TASK_INDEX")
    upstream = tuple(t for t in env.get("BACKSTOP_UPSTREAM_TASKS", "").split(",") if t)
    config = _json(env, "BACKSTOP_CONFIG", {})
    if not isinstance(config, dict):
        raise ConfigError("BACKSTOP_CONFIG must be a JSON object (spec.operators[].config)")
    recovery = env.get("BACKSTOP_RECOVERY_DIR")
    return TaskConfig(
        topology=topology,
        task=task,
        operator=operator,
        index=index,
        parallelism=_int(env, "BACKSTOP_PARALLELISM", default=index + 1),
        upstream=upstream,
        downstream=_downstream(_json(env, "BACKSTOP_DOWNSTREAM", [])),
        keeps_backup=env.get("BACKSTOP_UPSTREAM_BACKUP", "false").lower() == "true",
        role=env.get("BACKSTOP_ROLE", "primary"),
        config=config,
        store=store_location(env),
        host=env.get("BACKSTOP_POD_IP") or "127.0.0.1",
        port=_int(env, "BACKSTOP_PORT", default=DEFAULT_PORT),
        recovery_dir=Path(recovery) if recovery else None,
        checkpoint_interval=_float(env, "BACKSTOP_CHECKPOINT_INTERVAL", 4.0),
        batch_interval=_float(env, "BACKSTOP_BATCH_INTERVAL", 0.1),
        metrics_interval=_float(env, "BACKSTOP_METRICS_INTERVAL", 5.0),
        epoch=_int(env, "BACKSTOP_EPOCH", default=0),
        namespace=_component(env, "BACKSTOP_NAMESPACE", "default"),
        topology_uid=_component(env, "BACKSTOP_TOPOLOGY_UID", ""),
        extra={k: v for k, v in env.items() if k.startswith("BACKSTOP_")},
        replica=_int(env, "BACKSTOP_REPLICA", default=0),
    )
