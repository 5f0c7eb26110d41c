"""``backstop operator`` with a port already in use, or no cluster: one line, exit 2.

Before, a busy ``--liveness`` or ``--webhook-port`` failed to bind inside Kopf's event loop:
a traceback in the log while the process ran on without the server (a liveness probe that
never answers, a webhook that never serves); and with no kubeconfig the operator retried
its login for ever. Each case runs the real command in a subprocess (nothing is mocked):
the checks come before Kopf starts, so it ends at once.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from backstop.cli.operator import listen_problem


@pytest.fixture
def busy() -> Iterator[int]:
    """A port something else listens on (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_operators(*cases: tuple[str, ...]) -> list[tuple[int, str]]:
    """``(exit status, stderr)`` of ``backstop operator -n default ARGS`` per case, run side
    by side (one interpreter start of wall time, not one per case)."""
    argv = [sys.executable, "-m", "backstop", "operator", "-n", "default"]
    procs = [
        subprocess.Popen(
            [*argv, "--kubeconfig", "/nonexistent/kubeconfig", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in cases
    ]
    out = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        out.append((proc.returncode, err))
    return out


def test_a_busy_port_or_no_cluster_is_one_line_and_exit_2(busy: int) -> None:
    liveness, webhook, no_cluster = run_operators(
        ("--liveness", f"http://127.0.0.1:{busy}/healthz"),
        ("--webhook-port", str(busy), "--webhook-addr", "127.0.0.1"),
        ("--liveness", ""),
    )
    for flag, (code, err) in (("--liveness", liveness), ("--webhook-port", webhook)):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (code, err[-2000:])
        assert lines[0].startswith(f"error: {flag}: cannot listen on 127.0.0.1:{busy} ("), lines
        assert "in use" in lines[0], lines
    code, err = no_cluster  # before: Kopf retried its login for ever
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err[-2000:])
    assert lines[0].startswith("error: cannot load a Kubernetes configuration"), lines
    assert lines[0].endswith("set KUBECONFIG or pass --kubeconfig"), lines


def test_two_flags_naming_one_port_are_refused() -> None:
    with socket.socket() as sock:  # a free port: only the clash is wrong
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    listens = [("--webhook-port", "127.0.0.1", port), ("--liveness", "127.0.0.1", port)]
    assert listen_problem(listens) == (
        f"--webhook-port and --liveness both name port {port}; choose another port"
    )
    assert listen_problem(listens[:1]) is None
