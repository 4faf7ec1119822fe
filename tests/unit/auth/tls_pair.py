"""A TLS handshake between two contexts over trio's in-memory streams (no sockets)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import trio
import trio.testing


@dataclass
class Outcome:
    #: What the server saw: getpeercert() (None when the handshake failed).
    peer_certificate: dict[str, Any] | None
    server_error: BaseException | None
    client_error: BaseException | None
    version: str | None = None
    cipher: str | None = None
    #: The serial number of the certificate the server presented.
    server_serial: int | None = None

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


async def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> Outcome:
    client_raw, server_raw = trio.testing.memory_stream_pair()
    server_tls = trio.SSLStream(server_raw, server, server_side=True)
    client_tls = trio.SSLStream(client_raw, client, server_hostname="localhost")
    outcome = Outcome(None, None, None)

    async def serve() -> None:
        try:
            await server_tls.do_handshake()
            # TLS 1.3 reports a refused client certificate only once the client reads.
            await server_tls.send_all(b"x")
            outcome.peer_certificate = server_tls.getpeercert()
            outcome.version = server_tls.version()
            outcome.cipher = (server_tls.cipher() or ("",))[0]
        except trio.BrokenResourceError as error:
            outcome.server_error = error.__cause__ or error
        finally:
            await trio.aclose_forcefully(server_raw)

    async def connect() -> None:
        try:
            await client_tls.do_handshake()
            der = client_tls.getpeercert(binary_form=True)
            if der:
                from cryptography import x509

                outcome.server_serial = x509.load_der_x509_certificate(der).serial_number
            if not await client_tls.receive_some(1):
                raise trio.BrokenResourceError("closed")
        except trio.BrokenResourceError as error:
            outcome.client_error = error.__cause__ or error
        finally:
            await trio.aclose_forcefully(client_raw)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            nursery.start_soon(connect)
    return outcome
