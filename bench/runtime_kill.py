"""One node killed under a running example, every time counted from the kill.

:func:`kill_cycle` deploys an example with :class:`~bench.runtime_bench.Bench`, kills one
node that holds tasks with the test kit's CLI and watches, in one loop from the kill on,
what the bound promises and what leads there: the recovery session starting (its trigger,
``DataPlane`` when task pods noticed the dead producers, ``NodeLost`` when the node-monitor's
NotReady and the grace period did), the node turning NotReady, each lost task's new process
starting and each one catching up with its input. The recovery bound counts from the
failure (detection ``d`` + restart ``c`` + ℓ(v) ≤ ``recoveryLatencyBound``), so every time
here runs from the kill too: from the moment the node's first container process is gone
(:class:`~backstop_testkit.support.catchup.ContainerDeath`); when ``nodes kill`` was issued
and returned is kept beside it. What "caught up" means is the test kit's too
(:mod:`backstop_testkit.support.catchup`), which the real-node tests assert against R.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from backstop.domain.constants import GROUP, VERSION
from backstop.domain.spec import StreamTopologySpec, expand
from backstop_testkit.support.catchup import CatchUp, ContainerDeath
from backstop_testkit.support.kubetools import node_ready
from bench.runtime_bench import Bench, log, wait
from planners.evaluate import recovery_latencies
from planners.graph import TaskGraph

CATCH_UP_TIMEOUT = 240.0
NOT_READY_WAIT = 40.0
"""Seconds the watch waits past the last task caught up for the node to turn NotReady."""


@dataclass
class TaskResult:
    """One lost task: the model's ℓ(v) and its times from the kill."""

    task: str
    ell: float
    process: float  # kill → the new copy's process started (its status.json ``started``)
    caught_up: float  # kill → the new copy caught up with its input


@dataclass
class Cycle:
    """One fresh deployment of ``example``, one node killed, what followed."""

    example: str
    variant: str
    victim: str
    total: int  # tasks of the topology
    placement: dict[str, list[str]]
    backups: list[str]
    bound: float  # R, the spec's recoveryLatencyBound
    detection: float  # d (spec.recovery.detectionSeconds, as the plan records it)
    restart: float  # c (spec.recovery.restartSeconds)
    predicted_node: float  # H(node): the plan's worst ℓ(v) of the killed node
    issued: float = 0.0  # ``nodes kill`` issued, relative to the failure (≤ 0)
    returned: float = 0.0  # ``nodes kill`` returned, relative to the failure
    death_seen: bool = False  # the failure is the first container seen gone, else returned
    started: float | None = None  # kill → the recovery session started
    trigger: str = ""
    plan_seen: float | None = None  # kill → the bench saw the first RecoveryPlan
    notready: float | None = None  # kill → the node NotReady
    tasks: list[TaskResult] = field(default_factory=list)
    load: float = 0.0  # the host's 1-min load average when the last task caught up

    @property
    def worst(self) -> float:
        return max(t.caught_up for t in self.tasks)


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _rfc3339(ts: str | None) -> float | None:
    """Epoch seconds of a Kubernetes timestamp (``...Z``); ``None`` if absent."""
    if not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class _Watch:
    """What the loop after a kill has seen so far (epoch seconds, ``None``: not yet)."""

    def __init__(self, bench: Bench, name: str, victim: str, lost: list[str]) -> None:
        self.bench, self.name, self.victim, self.lost = bench, name, victim, lost
        self.catch = CatchUp(functools.partial(bench.status, name), lost, bench.steady)
        self.started: float | None = None
        self.trigger = ""
        self.plan_seen: float | None = None
        self.notready: float | None = None

    def poll(self) -> None:
        """One look at the tasks, the topology's recovery and the node."""
        now = time.time()
        self.catch.poll()
        if self.plan_seen is None or self.started is None:
            self._recovery(now)
        if self.notready is None and not node_ready(self.bench.core, self.victim):
            self.notready = time.time()

    def _recovery(self, now: float) -> None:
        """The first RecoveryPlan (its trigger) and when the session started: the epoch
        second the operator recorded the node lost (``status.recovery.lostHistory``), else
        the session's ``startedAt``, else the plan's creation (1 s resolution)."""
        b = self.bench
        plans = b.custom.list_namespaced_custom_object(
            GROUP, VERSION, b.ns, "recoveryplans", label_selector=f"{GROUP}/topology={self.name}"
        )["items"]
        if not plans:
            return
        first = min(plans, key=lambda p: int(p["spec"].get("step", 0)))
        self.plan_seen = self.plan_seen or now
        self.trigger = str(first["spec"].get("trigger", ""))
        st = b.custom.get_namespaced_custom_object(
            GROUP, VERSION, b.ns, "streamtopologies", self.name
        )
        rec = (st.get("status") or {}).get("recovery") or {}
        self.started = (
            _float((rec.get("lostHistory") or {}).get(self.victim))
            or _float((rec.get("lost") or {}).get(self.victim))
            or _rfc3339(rec.get("startedAt"))
            or _rfc3339(first["metadata"].get("creationTimestamp"))
        )

    def run(self) -> None:
        """Poll until every lost task caught up (then up to :data:`NOT_READY_WAIT` more for
        the node's NotReady, which the data plane's recovery need not wait for)."""
        deadline = time.time() + CATCH_UP_TIMEOUT
        while len(self.catch.back) < len(self.lost) or self.started is None:
            if time.time() > deadline:
                raise SystemExit(
                    f"{self.name}: within {CATCH_UP_TIMEOUT:.0f} s {self.catch.late()}, "
                    f"recovery started: {self.started is not None}"
                )
            self.poll()
            time.sleep(0.1)
        end = time.time() + NOT_READY_WAIT
        while self.notready is None and time.time() < end:
            self.poll()
            time.sleep(0.2)


def _spec_terms(p: dict[str, Any], spec: dict[str, Any]) -> tuple[float, float]:
    """``d`` and ``c`` as the plan records them, else as the spec gives them."""
    rec = spec.get("recovery", {})
    d = _float(p.get("detectionSeconds"))
    c = _float(p.get("restartSeconds"))
    d = d if d is not None else float(rec.get("detectionSeconds", 0.0))
    c = c if c is not None else float(rec.get("restartSeconds", 0.0))
    return d, c


def _undisturbed(bench: Bench, name: str) -> dict[str, Any]:
    """The topology's plan now, right before the kill; a SystemExit if a recovery already
    ran (a node recorded lost before any kill: a loss confirmed on a live node, e.g. pods
    too slow to answer on an overloaded host), since it would be timed as this kill's."""
    st = bench.custom.get_namespaced_custom_object(
        GROUP, VERSION, bench.ns, "streamtopologies", name
    )
    status = st.get("status") or {}
    early = (status.get("recovery") or {}).get("lostHistory") or {}
    if early:
        when = ", ".join(f"{n} at {time.strftime('%H:%M:%S', time.localtime(t))}"
                         for n, t in early.items())  # fmt: skip
        raise SystemExit(f"{name}: a node recorded lost before the kill ({when})")
    return dict(status["plan"])


def _victim(p: dict[str, Any], rank: int) -> tuple[str, dict[str, list[str]]]:
    """The ``rank``-th node holding tasks, worst predicted loss first; the placement."""
    placement: dict[str, list[str]] = {}
    for t, n in p["assignment"].items():
        placement.setdefault(n, []).append(t)
    by_node = sorted(placement, key=lambda n: (-p["worstByNode"].get(n, 0.0), n))
    return by_node[min(rank, len(by_node) - 1)], placement


def kill_cycle(
    bench: Bench, example: Path, variant: str, name: str, bound: float | None, rank: int
) -> Cycle:
    """Deploy ``example`` afresh as ``name`` (``bound``: another recoveryLatencyBound), kill
    its ``rank``-th node holding tasks, watch the recovery; the node revived afterwards."""
    doc = bench.manifest(name, bound, example)
    graph = expand(StreamTopologySpec.model_validate(doc["spec"]))
    real_bound = float(yaml.safe_load(example.read_text())["spec"]["recoveryLatencyBound"])
    victim = ""
    gen: subprocess.Popen[bytes] | None = None
    try:
        _, gen = bench.start(name, doc)
        if bench.show:
            bench.flowing(name, "before the kill")
        p = _undisturbed(bench, name)
        victim, placement = _victim(p, rank)
        lost = placement[victim]
        d, c = _spec_terms(p, doc["spec"])
        cyc = Cycle(
            example.stem, variant, victim, len(p["assignment"]), placement, list(p["backups"]),
            real_bound, d, c, float(p["worstByNode"].get(victim, 0.0)),
        )  # fmt: skip
        watch = _Watch(bench, name, victim, lost)
        log(f"{name}: killing {victim} ({len(lost)} tasks, predicted {p['worstByNode']})")
        death = ContainerDeath(victim)
        death.start()
        issued = time.time()
        bench.cli("nodes", "kill", victim)
        returned = time.time()
        died = death.moment(5.0)
        t_kill = died or returned  # the failure; the command's return if not seen
        cyc.issued, cyc.returned = issued - t_kill, returned - t_kill
        cyc.death_seen = died is not None
        watch.run()
        _record(cyc, watch, graph, t_kill)
        log(
            f"{name}: kill issued {cyc.issued:+.2f}s, returned {cyc.returned:+.2f}s "
            f"(failure {'seen' if cyc.death_seen else 'NOT seen'}); "
            f"recovery started {cyc.started:.2f}s ({cyc.trigger}), worst caught up "
            f"{cyc.worst:.2f}s after the kill (R {real_bound:g}s; host load {cyc.load:.1f})"
        )
        if bench.show:
            show(bench, name, cyc)
        return cyc
    finally:
        if gen is not None:
            gen.terminate()
            gen.wait()
        bench.delete(name)
        if victim:
            bench.cli("nodes", "revive", victim)
            wait(f"{victim} Ready", lambda: node_ready(bench.core, victim), 120)


def _record(cyc: Cycle, watch: _Watch, graph: TaskGraph, t_kill: float) -> None:
    """The watch's times, from the kill, into ``cyc`` with each lost task's ℓ(v)."""
    cyc.load = os.getloadavg()[0]
    cyc.trigger = watch.trigger
    cyc.started = None if watch.started is None else watch.started - t_kill
    cyc.plan_seen = None if watch.plan_seen is None else watch.plan_seen - t_kill
    cyc.notready = None if watch.notready is None else watch.notready - t_kill
    ell = recovery_latencies(graph, cyc.backups, watch.lost)
    for t in sorted(watch.lost, key=graph.index):
        started = float(watch.bench.status(watch.name, t)["started"])
        cyc.tasks.append(TaskResult(t, ell[t], started - t_kill, watch.catch.back[t] - t_kill))


def show(bench: Bench, name: str, cyc: Cycle) -> None:
    """The recovered flow and each lost task's times from the kill against the bound."""
    bench.flowing(name, "after the recovery, the lost tasks on other nodes")
    print(f"  recovery started {cyc.started or 0.0:.2f} s after the kill ({cyc.trigger})")
    for t in cyc.tasks:
        print(
            f"  {t.task:14} model d+c+ℓ {cyc.detection + cyc.restart + t.ell:.1f} s   "
            f"from the kill: process started {t.process:5.2f} s, caught up {t.caught_up:5.2f} s"
        )
    ok = "within the bound" if cyc.worst <= cyc.bound else "OVER the bound"
    print(f"  worst {cyc.worst:.2f} s vs bound {cyc.bound:g} s: {ok}")
