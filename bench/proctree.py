"""A command measured with every process it starts: wall time, CPU seconds and peak RSS.

Why: a system under test may be a tree of processes (``backstop run`` and its tasks; the
PyFlink driver and its JVM), and one that leaves a child running past its own exit (the
JVM outlives the driver by its shutdown) would hide that child's CPU from the parent's
``RUSAGE_CHILDREN``. The measuring process therefore makes itself the *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan is re-parented to it, not to init, and is
reaped here, so ``RUSAGE_CHILDREN`` counts the CPU of the whole tree. Memory is sampled
from ``/proc`` every ``every`` seconds: the sum of ``VmRSS`` over the tree (shared pages
count once per process, as ``ps`` shows them) and the largest single process.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.procstat import proc_status

PR_SET_CHILD_SUBREAPER = 36
REAP_SECONDS = 60.0
"""How long the tree may linger after the command's exit before it is killed."""


def become_subreaper() -> None:
    """Have the orphans of this process's descendants re-parented to it (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every process visible in ``/proc``."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry.name)] = int(fields[1])
    return out


def descendants(root: int, links: Mapping[int, int] | None = None) -> list[int]:
    """The processes under ``root`` (not ``root`` itself), from ``links`` (``/proc`` now).

    >>> descendants(1, {2: 1, 3: 2, 4: 9, 5: 3})
    [2, 3, 5]
    """
    links = parents() if links is None else links
    children: dict[int, list[int]] = {}
    for pid, ppid in links.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in sorted(children.get(todo.pop(), [])):
            out.append(child)
            todo.append(child)
    return sorted(out)


@dataclass
class TreeSampler:
    """The peak of the summed ``VmRSS`` of this process's descendants, and of the largest
    one, sampled every ``every`` seconds on a daemon thread until :meth:`stop`."""

    every: float = 0.2
    peak_sum: int = 0
    peak_one: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        rss = [proc_status(pid).get("VmRSS", 0) for pid in descendants(os.getpid())]
        if rss:
            self.peak_sum = max(self.peak_sum, sum(rss))
            self.peak_one = max(self.peak_one, max(rss))
            self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Measured:
    """One command's run: wall seconds to its exit, CPU seconds of its whole tree (user +
    system), peak summed and single RSS (bytes), its exit code and standard output."""

    wall: float
    cpu: float
    peak_sum: int
    peak_one: int
    code: int
    stdout: str


def _tree_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_all(deadline: float) -> None:
    """Reap every process re-parented here; past ``deadline`` (monotonic), SIGKILL them."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() > deadline:
            for left in descendants(os.getpid()):
                os.kill(left, signal.SIGKILL)
        time.sleep(0.05)


def measure(cmd: Sequence[str], env: Mapping[str, str], log: Path, every: float = 0.2) -> Measured:
    """Run ``cmd`` (stderr to ``log``) and measure it with every process it starts; the
    caller is the subreaper (:func:`become_subreaper`) and has no other child running."""
    before = _tree_cpu()
    sampler = TreeSampler(every)
    t0 = time.monotonic()
    with log.open("ab") as err:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=subprocess.PIPE, stderr=err)
        stdout, _ = proc.communicate()
    wall = time.monotonic() - t0
    reap_all(time.monotonic() + REAP_SECONDS)
    sampler.stop()
    return Measured(
        wall=wall,
        cpu=_tree_cpu() - before,
        peak_sum=sampler.peak_sum,
        peak_one=sampler.peak_one,
        code=proc.returncode,
        stdout=stdout.decode(errors="replace"),
    )
