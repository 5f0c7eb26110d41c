#!/usr/bin/env python3
"""A sampling profiler for the operator: ``stacksample.py OUT -m backstop operator ...``.

Why: py-spy is not available, and cProfile sees only the main thread, while Kopf runs
the operator's sync handlers and daemons in executor threads. This samples every
thread's stack (``sys._current_frames``) every 10 ms from a background thread and, at
exit and on SIGUSR1, writes to OUT the functions seen busy most often: "self" (the
innermost frame) and "total" (anywhere on the stack), as shares of the busy samples.
A thread parked in a wait (a lock, a queue, a selector, a sleep) is idle, not counted.
"""

from __future__ import annotations

import atexit
import collections
import runpy
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

IDLE = (
    "threading.py:wait",
    "threading.py:_wait_for_tstate_lock",
    "selectors.py:select",
    "ssl.py:read",
    "ssl.py:recv_into",
    "socket.py:readinto",
    "socket.py:accept",
    "queue.py:get",
    "thread.py:_worker",
    "time.py:sleep",
)
"""Innermost frames of a thread that waits (a lock, a queue, a socket, a selector)."""


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/site-packages/", "/operator/", "/planners/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_name}"


def main() -> None:
    out = Path(sys.argv[1])
    argv = sys.argv[2:]
    if argv[:1] != ["-m"]:
        raise SystemExit("usage: stacksample.py OUT -m MODULE [ARGS...]")
    busy_self: collections.Counter[str] = collections.Counter()
    busy_total: collections.Counter[str] = collections.Counter()
    counts = {"samples": 0, "busy": 0}
    stop = threading.Event()
    lock = threading.Lock()  # a dump while the sampler counts would see the dicts change

    def sample() -> None:
        me = threading.get_ident()
        while not stop.wait(0.01):
            with lock:
                _take(me)

    def _take(me: int) -> None:
        counts["samples"] += 1
        for ident, frame in sys._current_frames().items():
            if ident == me or _where(frame).endswith(IDLE):
                continue
            counts["busy"] += 1
            busy_self[_where(frame)] += 1
            seen = set()
            f: FrameType | None = frame
            while f is not None:
                seen.add(_where(f))
                f = f.f_back
            busy_total.update(seen)

    def dump(final: bool = True) -> None:
        if final:
            stop.set()
        with lock:
            _write()

    def _write() -> None:
        busy = max(counts["busy"], 1)
        lines = [
            f"{counts['samples']} samples (10 ms), {counts['busy']} busy thread-samples",
            "",
            "total %  self %  function",
        ]
        for fn, n in busy_total.most_common(60):
            lines.append(f"{100 * n / busy:7.1f}  {100 * busy_self[fn] / busy:6.1f}  {fn}")
        lines += ["", "self %  function"]
        for fn, n in busy_self.most_common(30):
            lines.append(f"{100 * n / busy:6.1f}  {fn}")
        out.write_text("\n".join(lines) + "\n")

    threading.Thread(target=sample, daemon=True).start()
    atexit.register(dump)
    signal.signal(signal.SIGUSR1, lambda *_: dump(final=False))  # a look while it runs
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
