"""Kopf's webhook server with certificates that change while it runs: no restart, no gap.

The server listens with an :class:`ssl.SSLContext` it owns (``kopf.WebhookServer``'s public
``context`` argument; Kopf loads the first certificate into it). Every
:data:`CHECK_SECONDS` it asks its source for the certificates (the shared Secret, renewing
it when due; cert-manager's files; or its own in memory) and, when they differ, loads them
into that same context: :meth:`ssl.SSLContext.load_cert_chain` applies to every handshake
after it, while open connections keep theirs, and the listening socket stays open. When the
CA bundle changes it announces a new client config: it hands it to its ``publish`` callback,
which writes it (and so the ``caBundle``) into the webhook configuration
(:mod:`backstop.k8s.webhookconfig`), and yields it to Kopf; with a Secret the new CA is
announced well before a leaf it signs is served (:mod:`backstop.k8s.webhookcert`). A
publication that fails is tried again at every check until one succeeds; when the server
stops, ``publish`` is called once more with ``serving=False``.

Kopf's own reload (``file_check_interval``) restarts its listener instead, refusing
connections meanwhile; it never starts here: Kopf's generator is left waiting after its
first client config (it watches its files only when asked for a second one) and is closed
when this server stops.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

import kopf

logger = logging.getLogger(__name__)

CHECK_SECONDS = 60.0
"""How often every replica checks its certificates (and renews them when due)."""


class Served(NamedTuple):
    """What the server presents (``cert``, ``key``) and the webhook configuration trusts."""

    cert: bytes
    key: bytes
    ca_bundle: bytes


Source = Callable[[], Served]
"""Where the certificates come from; called in a worker thread (it may call the API)."""

Publish = Callable[[kopf.WebhookClientConfig, bool], None]
"""Writes a client config the server announces (``True``: serving; ``False``: stopping, the
last one announced) into the webhook configuration; called in a worker thread."""


def directory_source(directory: str) -> Source:
    """``tls.crt``, ``tls.key`` and ``ca.crt`` in ``directory`` (e.g. cert-manager's Secret
    mounted; without ``ca.crt`` the certificate is its own CA), read at every check."""
    d = Path(directory)

    def read() -> Served:
        cert = (d / "tls.crt").read_bytes()
        ca = d / "ca.crt"
        return Served(cert, (d / "tls.key").read_bytes(), ca.read_bytes() if ca.exists() else cert)

    return read


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` at once (readable by this user only)."""
    tmp = path.with_suffix(".new")
    tmp.write_bytes(data)
    tmp.chmod(0o600)
    os.replace(tmp, path)


class RotatingWebhookServer(kopf.WebhookServer):
    """Kopf's HTTPS server whose certificate follows ``source`` (the module docstring);
    with ``service`` (``namespace/name``) it is announced as that Service, port 443,
    rather than by URL; each announced client config goes to ``publish`` too."""

    def __init__(
        self,
        *,
        source: Source,
        service: str | None = None,
        check_seconds: float = CHECK_SECONDS,
        publish: Publish | None = None,
        **kwargs: Any,
    ) -> None:
        self.source = source
        self.publish = publish
        self.service_ref = service
        self.check_seconds = check_seconds
        self.served: Served | None = None
        self.files = Path(tempfile.mkdtemp(prefix="backstop-webhook-"))
        super().__init__(
            context=ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH),
            certfile=str(self.files / "tls.crt"),
            pkeyfile=str(self.files / "tls.key"),
            **kwargs,
        )

    def _write_files(self, served: Served) -> None:
        _write(self.files / "tls.key", served.key)
        _write(self.files / "tls.crt", served.cert)

    def announce(self, config: kopf.WebhookClientConfig) -> kopf.WebhookClientConfig:
        """``config`` with the CA bundle served now, and the Service if there is one."""
        assert self.served is not None
        ca = base64.b64encode(self.served.ca_bundle).decode("ascii")
        if self.service_ref is None:
            return kopf.WebhookClientConfig(**{**config, "caBundle": ca})
        ns, name = self.service_ref.split("/", 1)
        return kopf.WebhookClientConfig(
            service=kopf.WebhookClientConfigService(namespace=ns, name=name, port=443, path=""),
            caBundle=ca,
        )

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        self.served = await asyncio.to_thread(self.source)  # Kopf loads these at once
        self._write_files(self.served)
        self.cadata = self.served.ca_bundle
        listening = super().__call__(fn)
        announced: kopf.WebhookClientConfig | None = None
        try:
            config = await anext(listening)
            announced = self.announce(config)
            published = await self.published(announced, serving=True)
            yield announced
            while True:
                await asyncio.sleep(self.check_seconds)
                if await self.refresh():
                    announced = self.announce(config)
                    published = await self.published(announced, serving=True)
                    yield announced
                elif not published:
                    published = await self.published(announced, serving=True)
        finally:
            try:
                if announced is not None:
                    await self.published(announced, serving=False)
            finally:
                if isinstance(listening, AsyncGenerator):  # stop listening now
                    await listening.aclose()

    async def published(self, config: kopf.WebhookClientConfig, *, serving: bool) -> bool:
        """Hand ``config`` to ``publish``; whether it was written (failures are logged:
        the server keeps serving and tries again at its next check)."""
        if self.publish is None:
            return True
        try:
            await asyncio.to_thread(self.publish, config, serving)
        except Exception as err:
            logger.warning("webhook: cannot write the webhook configuration (%s)", err)
            return False
        return True

    async def refresh(self) -> bool:
        """Serve the source's certificates if they changed; whether the CA bundle did."""
        old = self.served
        assert old is not None and self.context is not None, "refreshed before serving"
        try:
            served = await asyncio.to_thread(self.source)
        except Exception as err:  # the API or the files may fail for a while: keep serving
            logger.warning("webhook: cannot read the certificates (%s); serving the old ones", err)
            return False
        if served == old:
            return False
        self._write_files(served)
        try:  # a pair that does not load leaves the context as it was
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                self.files / "tls.crt", self.files / "tls.key"
            )
        except ssl.SSLError as err:
            logger.warning("webhook: the new certificate does not load (%s); serving the old", err)
            self._write_files(old)
            return False
        self.context.load_cert_chain(self.files / "tls.crt", self.files / "tls.key")
        self.served = served
        logger.info("webhook: serving a new certificate (from the next connection on)")
        return served.ca_bundle != old.ca_bundle
