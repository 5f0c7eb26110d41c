"""How much heap the re-optimization job's Spark driver may have inside a memory limit.

A JVM started with Spark's default 1 GiB heap inside a 512 MiB container is killed
by the kernel (OOMKilled) half-way, and the operator with it when the JVM runs in the
operator's container (``reoptimization.mode: local``). The heap is therefore derived from
the container's memory limit (the Downward API's ``limits.memory``), after everything
else that lives in the container has its share:

    heap = limit - operator - driver - jvm - workers x worker     (rounded down to 64 MiB)

- ``operator``: the operator process itself (``mode: local`` only; 0 in a Job);
- ``driver``: the Python side of the job, ``python -m backstop.jobs.reoptimize``
  (pandas, pyarrow, pyspark, the planners);
- ``jvm``: the JVM's memory outside its heap (metaspace, code cache, thread stacks,
  GC structures, Arrow buffers);
- ``workers``: the Python processes Spark starts for ``applyInPandas`` (its daemon and
  workers, kept for reuse): per local core (``local[N]``), none in the driver when
  executors do the work (``k8s://``).

Spark refuses a driver whose heap is under 450 MiB (1.5 x its 300 MiB reserve), so a
limit that leaves less than :data:`MIN_HEAP_MIB` is an error that names the limit needed.
The shares are rounded up from one measured run (``docs/reoptimization.md``, "Memory": at
``local[2]`` on 100 000 rows, the driver peaked at 164 MiB, six Python processes at 567 MiB
together, the JVM at 752 MiB with a 1088 MiB heap).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "DRIVER_MIB",
    "JVM_OVERHEAD_MIB",
    "MIN_HEAP_MIB",
    "OPERATOR_MIB",
    "WORKER_MIB",
    "DriverMemory",
    "MemoryTooSmall",
    "driver_memory",
    "local_cores",
]

MIB = 1024 * 1024
OPERATOR_MIB = 320
"""The operator process (Kopf, the Kubernetes client, OR-Tools and the planners)."""
DRIVER_MIB = 256
"""``python -m backstop.jobs.reoptimize``: pandas, pyarrow, pyspark's Python side."""
JVM_OVERHEAD_MIB = 320
"""The driver JVM outside its heap."""
WORKER_MIB = 288
"""The Python processes of ``applyInPandas`` per local core (pandas, pyarrow, the planners;
measured: six processes, 567 MiB, at ``local[2]``)."""
MIN_HEAP_MIB = 512
"""Spark needs 450 MiB of heap at least; -Xmx512m is the smallest round size that passes."""
DEFAULT_HEAP_MIB = 1024
"""Spark's own default, used when no limit is known."""


class MemoryTooSmall(ValueError):
    """The memory limit cannot hold a Spark driver; the message names the limit needed."""


@dataclass(frozen=True)
class DriverMemory:
    """The driver's heap and how it was derived (for ``spark.driver.memory`` and messages)."""

    heap_mib: int
    workers: int
    arithmetic: str

    @property
    def conf(self) -> str:
        """The value of ``spark.driver.memory``.

        >>> DriverMemory(768, 2, "").conf
        '768m'
        """
        return f"{self.heap_mib}m"


def local_cores(master: str, cpus: float | None = None) -> int:
    """The Python workers a Spark master may run at once in the driver's container.

    ``local[N]`` runs N; ``local`` one; ``local[*]`` one per core the container may use
    (``cpus``, its CPU limit; 2 when unknown); ``k8s://`` none (executors do the work).

    Examples
    --------
    >>> local_cores("local[3]"), local_cores("local"), local_cores("local[*]", 1.5)
    (3, 1, 2)
    >>> local_cores("k8s://https://kubernetes.default.svc")
    0
    """
    if master.startswith("k8s://"):
        return 0
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if found is None or found.group(1) is None:
        return 1
    if found.group(1) == "*":
        return max(1, math.ceil(cpus)) if cpus else 2
    return int(found.group(1))


def driver_memory(limit_bytes: int | None, *, workers: int, in_operator: bool) -> DriverMemory:
    """The heap a Spark driver may have in a container of ``limit_bytes``.

    Parameters
    ----------
    limit_bytes:
        The container's memory limit (``None``: no limit known, Spark's default heap).
    workers:
        Python workers running at once (:func:`local_cores`).
    in_operator:
        Whether the driver shares the container with the operator (``mode: local``).

    Raises
    ------
    MemoryTooSmall
        When the heap left is under :data:`MIN_HEAP_MIB`; the message names the smallest
        limit that fits.

    Examples
    --------
    >>> driver_memory(2 * 1024 * MIB, workers=2, in_operator=False).heap_mib
    896
    >>> driver_memory(None, workers=2, in_operator=True).heap_mib
    1024
    >>> driver_memory(512 * MIB, workers=2, in_operator=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    backstop.domain.sparkmemory.MemoryTooSmall: a memory limit of 512Mi leaves ... 1984Mi
    """
    others = (OPERATOR_MIB if in_operator else 0) + DRIVER_MIB + JVM_OVERHEAD_MIB
    others += workers * WORKER_MIB
    parts = (
        f"{OPERATOR_MIB} operator + " if in_operator else ""
    ) + f"{DRIVER_MIB} driver + {JVM_OVERHEAD_MIB} JVM + {workers} x {WORKER_MIB} Python"
    if limit_bytes is None:
        return DriverMemory(DEFAULT_HEAP_MIB, workers, "no memory limit: Spark's default heap")
    limit_mib = limit_bytes // MIB
    heap = (limit_mib - others) // 64 * 64
    arithmetic = f"{limit_mib}Mi - ({parts}) = {heap}Mi heap"
    if heap < MIN_HEAP_MIB:
        need = others + MIN_HEAP_MIB
        raise MemoryTooSmall(
            f"a memory limit of {limit_mib}Mi leaves {max(heap, 0)}Mi of heap for the Spark "
            f"driver ({parts} MiB besides the heap); Spark needs {MIN_HEAP_MIB}Mi: "
            f"raise the limit to at least {need}Mi"
        )
    return DriverMemory(heap, workers, arithmetic)
