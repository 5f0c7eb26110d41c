"""Every name the operator shares with the cluster: API group, labels, annotations,
Event reasons, object-name suffixes, ports and mounts.

One module so that a label is spelled once; the spec, the manifest builders, the
readers and the handlers all import from here.
"""

from __future__ import annotations

from typing import Literal, get_args

GROUP = "streams.backstop.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "streamtopologies"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: An operator name: a DNS-1123 label without ``--``, which separates the topology's name
#: from the task in pod names (``<topology>--<operator>-<index>``), so two topologies of one
#: namespace can never derive the same pod name (``a`` + ``b-c`` vs ``a-b`` + ``c``).
OPERATOR_NAME = r"^[a-z0-9]+(-[a-z0-9]+)*$"
OPERATOR_NAME_MAX = 40
#: A topology's name is a label value of every object it owns: at most 63 characters.
TOPOLOGY_NAME_MAX = 63
POD_NAME_SEPARATOR = "--"
#: Operators per topology in a cluster, stated in the CRD's schema (``maxItems``) and checked
#: by the spec's model (:mod:`backstop.domain.limits`). The seeds' largest instances fit with
#: room: 220 single-task operators (L-Tree) and 200 (S-Rnd, L-Rnd) in "Task Allocation for
#: Stream Processing with Recovery Latency Guarantee", Table 4. What an operator adds in bytes
#: is bounded by :data:`MAX_SPEC_BYTES`; the count bounds what grows with the operators
#: rather than their bytes: a kept recommendation's row per operator and the planners'
#: per-operator work. 400 short operators (a name, a latency, two inputs, every default
#: written) take about 71 KiB as stored, under :data:`MAX_SPEC_BYTES`. The CLI plans any
#: count offline.
MAX_OPERATORS = 400
#: Inputs of one operator and tasks of one operator in a cluster (``maxItems``, ``maximum``).
MAX_INPUTS = 100
MAX_PARALLELISM = 1000
#: Bytes of a spec as stored (compact JSON, every default written: :func:`backstop.domain.
#: limits.stored_bytes`), checked by the admission webhook (an object already stored is
#: supervised whatever its size, so a recovery never stops for it). One StreamTopology holds
#: its spec at most three times: the spec itself, its ``managedFields`` entry (about as
#: large) and, after a client-side ``kubectl apply``, its last-applied annotation (at most as
#: large; ``kubectl apply --server-side`` writes none). Kopf's diff base keeps a digest of the
#: spec (``backstop.controller.diffbase``) and the status its hash; the last good plan's spec
#: is in the topology's spec ConfigMap (``backstop.k8s.specstore``, 1 MiB of its own). The API
#: server caps the annotations at 256 KiB together: the last-applied copy takes 80 KiB and
#: leaves 176 KiB for the rest. etcd takes at most 1.5 MiB (1,536 KiB) per write: three
#: copies take 240 KiB, beside a compact status of 10,000 tasks mid-recovery (285 KiB) and a
#: kept recommendation of 10,000 tasks on 43-character node names (800 KiB), 1,325 KiB in all.
#: The session ConfigMap's replay groups grow with the operators squared at worst (every
#: operator replaying from its own set of sources): at this ceiling they take about 510 KiB
#: of its 1 MiB.
MAX_SPEC_BYTES = 80 * 1024
#: Limits no CRD schema can state (sums over operators), checked by the spec's model in a
#: cluster, so by the admission webhook and by the reconcile alike, before the task graph is
#: built: the ceiling up to which the status, the RecoveryPlans and the session ConfigMap are
#: tested to stay under their size limits (docs/scale.md). A shuffle of p x q tasks has
#: p*q task-to-task edges: 300 x 300 fits, 1000 x 1000 does not.
MAX_TASKS = 10_000
MAX_TASK_EDGES = 100_000
IMAGE_MAX = 1024
#: A label key: an optional DNS-1123 subdomain prefix (253) + ``/`` + a name (63).
LABEL_KEY_MAX = 317
#: Seconds: no latency, grace, restart or window in a spec exceeds a day.
SECONDS_MAX = 86400.0

LABEL_TOPOLOGY = f"{GROUP}/topology"
LABEL_OPERATOR = f"{GROUP}/operator"
LABEL_TASK = f"{GROUP}/task"
LABEL_ROLE = f"{GROUP}/role"
LABEL_SESSION = f"{GROUP}/session"
ANN_HASH = f"{GROUP}/spec-hash"
ANN_NODE = f"{GROUP}/planned-node"
ANN_EPOCH = f"{GROUP}/epoch"
#: Bumped after a plan is applied; outside GROUP's prefix, which Kopf's diff-base ignores.
ANN_APPLIED = "reoptimization.backstop.dev/applied-at"
#: Set by a person (or ``backstop reoptimize NAME --approve``) to the id of a stored
#: ``apply: suggest`` recommendation: the operator applies it if it still fits.
ANN_APPROVE = "backstop.dev/approve-recommendation"
HOSTNAME = "kubernetes.io/hostname"
#: The Node field a task pod's affinity pins by (``matchFields``): the node's own name.
NODE_NAME_FIELD = "metadata.name"
#: What ``kubectl apply`` (client-side) sent, before the API server pruned unknown fields.
ANN_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SESSION_CONFIGMAP_SUFFIX = "-recovery"
#: The ConfigMap holding the spec of the recorded plan (``backstop.k8s.specstore``).
SPEC_CONFIGMAP_SUFFIX = "-spec"
#: The Secret holding a topology's peer token (``PUT /peers``: backstop.domain.peers).
PEERS_SECRET_SUFFIX = "-peers"
PEERS_TOKEN_KEY = "token"
SESSION_MOUNT = "/etc/backstop/recovery"
STORE_MOUNT = "/var/lib/backstop"
DATA_PORT = 7077
METRICS_PORT = 9090  # the task runtime's GET /metrics (Prometheus) and /status

NODE_KIND_LABEL = "backstop.dev/node-kind"
"""Node label saying what stands behind a node of the local cluster: a real kubelet with
containerd on this host (``real``) or the node simulator (``simulated``)."""
NODE_KIND_REAL = "real"
NODE_KIND_SIMULATED = "simulated"

EventReason = Literal[
    "Planned",
    "InvalidSpec",
    "Infeasible",
    "NodeLost",
    "NodeSuspected",
    "NodeDraining",
    "DrainBlocked",
    "DrainReleased",
    "RecoveryPlanIssued",
    "TaskRecovered",
    "ReplicaPromoted",
    "TaskLost",
    "Recovered",
    "BoundViolated",
    "RestorePlanned",
    "RestoreStep",
    "BoundRestored",
    "Consolidated",
    "Reoptimized",
    "UnknownFields",
    "DeprecatedGrouping",
    "Suspending",
    "Suspended",
    "Resumed",
    "RolloutStep",
    "RolloutComplete",
    "PodsRefused",
]
"""The fixed set of Event reasons the operator posts (Kopf posts no log line as an Event).

A type, so that mypy --strict refuses a reason outside it at every call site that posts an
Event (``post_event``, ``Tick.emit``, ``recovery.Notice``) before it runs; at run time
``post_event`` logs and posts a reason outside it, never raising inside a daemon."""
EVENT_REASONS: frozenset[str] = frozenset(get_args(EventReason))

DEFAULT_TIME_LIMIT = 3.0
"""Seconds (nominal: a deterministic work budget) a joint plan may search by default."""
