"""``backstop operator`` with a port already in use, or no cluster: one line, exit 2.

Why: a busy ``--liveness`` or ``--webhook-port`` that failed to bind inside Kopf's event
loop would leave a traceback in the log while the process ran on without the server (a
liveness probe that never answers, a webhook that never serves), and with no kubeconfig
Kopf retries its login for ever. So the checks come before Kopf starts: the command runs
in-process with ``kopf.run`` replaced by a tripwire, so reaching Kopf fails the test at
once instead of hanging it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from typer.testing import CliRunner

from backstop.cli import app
from backstop.cli.operator import listen_problem


@pytest.fixture
def busy() -> Iterator[int]:
    """A port something else listens on (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_operator(monkeypatch: Any, *args: str) -> tuple[int, list[str]]:
    """``backstop operator -n default ARGS`` with no cluster: (exit status, output lines)."""

    def tripwire(*_: Any, **__: Any) -> None:
        raise AssertionError("Kopf started: the problem was not caught before it")

    monkeypatch.setattr(kopf, "run", tripwire)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    result = CliRunner().invoke(app, ["operator", "-n", "default", *args])
    if isinstance(result.exception, AssertionError):
        raise result.exception
    return result.exit_code, result.output.strip().splitlines()


@pytest.mark.parametrize(
    ("flag", "args"),
    [
        ("--liveness", ("--liveness", "http://127.0.0.1:{port}/healthz")),
        ("--webhook-port", ("--webhook-port", "{port}", "--webhook-addr", "127.0.0.1")),
    ],
)
def test_a_busy_port_is_one_line_naming_the_flag_and_exit_2(
    monkeypatch: Any, busy: int, flag: str, args: tuple[str, ...]
) -> None:
    code, lines = run_operator(monkeypatch, *(a.format(port=busy) for a in args))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {flag}: cannot listen on 127.0.0.1:{busy} ("), lines
    assert "in use" in lines[0], lines


def test_no_cluster_is_one_line_not_a_login_retried_for_ever(monkeypatch: Any) -> None:
    code, lines = run_operator(monkeypatch, "--liveness", "")
    assert code == 2 and len(lines) == 1, lines
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
