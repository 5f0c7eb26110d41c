"""The webhook server serves a new certificate without restarting: a real TLS listener
(Kopf's, through :class:`RotatingWebhookServer`) and real ``ssl`` clients on 127.0.0.1.

The certificates come from a directory whose files are replaced as cert-manager's mounted
Secret is (the Secret-backed source goes through the same reload). A connection opened
before the swap must still be answered after it: the listener was not restarted.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import urllib.parse
from pathlib import Path
from typing import Any

from backstop.controller.webhookserver import RotatingWebhookServer, directory_source
from backstop.k8s.webhookcert import fresh, issue_leaf, new_ca

HOST = "127.0.0.1"


def place(directory: Path, cert: bytes, key: bytes, ca: bytes) -> None:
    """Replace the three files at once each, as the kubelet swaps a Secret's files."""
    for name, data in (("tls.key", key), ("tls.crt", cert), ("ca.crt", ca)):
        (directory / f".{name}").write_bytes(data)
        os.replace(directory / f".{name}", directory / name)


def trusting(ca: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.decode())


async def handshake(port: int, ca: bytes) -> tuple[bytes, asyncio.StreamReader, Any]:
    """The certificate a new verified connection is shown, and that connection."""
    reader, writer = await asyncio.open_connection(HOST, port, ssl=trusting(ca))
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return der, reader, writer


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


async def post(reader: asyncio.StreamReader, writer: Any) -> bytes:
    body = b'{"request": {"uid": "u"}}'
    writer.write(
        b"POST /spec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), 5)


async def until(check: Any, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def swap_while_serving(tmp_path: Path) -> None:
    first = fresh([HOST])
    place(tmp_path, first.cert, first.key, first.ca_bundle)
    published: list[tuple[Any, bool]] = []
    server = RotatingWebhookServer(
        source=directory_source(str(tmp_path)),
        addr=HOST,
        host=HOST,
        check_seconds=0.05,
        publish=lambda config, serving: published.append((config, serving)),
    )
    answered: list[str] = []

    async def fn(data: Any, **_: Any) -> Any:
        answered.append(data["request"]["uid"])
        return {"response": {"uid": data["request"]["uid"], "allowed": True}}

    configs: list[Any] = []
    async with server:

        async def consume() -> None:
            async for config in server(fn):  # type: ignore[arg-type]  # a dict, as Kopf's
                configs.append(config)

        task = asyncio.create_task(consume())
        try:
            await until(lambda: asyncio.sleep(0, bool(configs)))
            assert base64.b64decode(configs[0]["caBundle"]) == first.ca_bundle
            port = urllib.parse.urlsplit(configs[0]["url"]).port
            assert port is not None
            shown, old_reader, old_writer = await handshake(port, first.ca_bundle)
            assert shown == der(first.cert)

            # a new CA and a leaf it signs; the bundle trusts both CAs
            ca, ca_key = new_ca()
            cert, key = issue_leaf([HOST], ca, ca_key)
            place(tmp_path, cert, key, ca + first.ca_bundle)

            async def shows_new() -> bool:
                shown, _, writer = await handshake(port, ca + first.ca_bundle)
                writer.close()
                return shown == der(cert)

            await until(shows_new)
            shown, _, writer = await handshake(port, ca)  # the new CA alone verifies it
            writer.close()
            assert shown == der(cert)
            await until(lambda: asyncio.sleep(0, len(configs) == 2))
            assert base64.b64decode(configs[1]["caBundle"]) == ca + first.ca_bundle
            assert configs[1]["url"] == configs[0]["url"]

            # the connection from before the swap is still served: no listener restart
            status = await post(old_reader, old_writer)
            assert status.startswith(b"HTTP/1.1 200"), status
            assert answered == ["u"]
            old_writer.close()

            # a pair that does not match is refused: the served one stays
            place(tmp_path, first.cert, key, first.ca_bundle)
            await asyncio.sleep(0.3)
            shown, _, writer = await handshake(port, ca)
            writer.close()
            assert shown == der(cert) and len(configs) == 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    # each config announced is written into the configuration, and the last once more on stop
    assert published == [(configs[0], True), (configs[1], True), (configs[1], False)]


def test_a_replaced_certificate_is_served_without_restarting(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(swap_while_serving(tmp_path), 60))


async def publish_failing_once(tmp_path: Path) -> tuple[list[bool], list[Any]]:
    certs = fresh([HOST])
    place(tmp_path, certs.cert, certs.key, certs.ca_bundle)
    calls: list[bool] = []

    def publish(config: Any, serving: bool) -> None:
        calls.append(serving)
        if len(calls) == 1:
            raise OSError("the API server does not answer")

    server = RotatingWebhookServer(
        source=directory_source(str(tmp_path)),
        addr=HOST,
        host=HOST,
        check_seconds=0.05,
        publish=publish,
    )
    configs: list[Any] = []
    async with server:

        async def consume() -> None:
            async for config in server(lambda *_, **__: None):  # type: ignore[arg-type]
                configs.append(config)

        task = asyncio.create_task(consume())
        await until(lambda: asyncio.sleep(0, len(calls) >= 2))
        await asyncio.sleep(0.3)  # several checks more: written, so not written again
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return calls, configs


def test_a_failed_write_of_the_configuration_is_tried_again_at_the_next_check(
    tmp_path: Path,
) -> None:
    calls, configs = asyncio.run(asyncio.wait_for(publish_failing_once(tmp_path), 60))
    assert calls == [True, True, False]
    assert len(configs) == 1  # served and yielded to Kopf although the first write failed


def test_a_service_is_announced_with_the_bundle_served(tmp_path: Path) -> None:
    certs = fresh([HOST])
    place(tmp_path, certs.cert, certs.key, certs.ca_bundle)
    server = RotatingWebhookServer(
        source=directory_source(str(tmp_path)), service="ops/backstop-webhook", addr=HOST
    )
    server.served = directory_source(str(tmp_path))()
    config = server.announce({"url": "https://127.0.0.1:9443"})
    assert config == {
        "service": {"namespace": "ops", "name": "backstop-webhook", "port": 443, "path": ""},
        "caBundle": base64.b64encode(certs.ca_bundle).decode(),
    }


def test_without_a_secret_or_files_the_process_keeps_its_own_ca() -> None:
    from cryptography import x509

    from backstop.controller.admission import Webhook, certificate_source

    source = certificate_source(Webhook(port=1, addr=HOST))
    first, again = source(), source()
    assert first == again, "nothing is due: the same CA and leaf"
    ca = x509.load_pem_x509_certificate(first.ca_bundle)
    x509.load_pem_x509_certificate(first.cert).verify_directly_issued_by(ca)
