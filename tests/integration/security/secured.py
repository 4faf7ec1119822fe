"""A gateway with amqps and amqp listeners on loopback, built from a real configuration (the
same ``server_settings``/``authenticator_for`` path as the command), over the memory backend."""

from __future__ import annotations

import base64
import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest

from gateway.app import server_settings
from gateway.auth.factory import authenticator_for
from gateway.backend.memory import MemoryBackend
from gateway.config import GatewayConfig, config_from_text
from gateway.server.address import Listener
from gateway.server.connection import ClientConnection
from tests.support.gateway_thread import GatewayInThread
from tests.support.pki import Pki, TokenKeys, make_pki, token_keys

BASE = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
    # Ports are replaced by 0 (the kernel's choice) once parsed.
    "amqpListeners=amqps://127.0.0.1:5671,amqp://127.0.0.1:5672\n"
)


def secret_url(keys: TokenKeys) -> str:
    return "data:;base64," + base64.b64encode(keys.secret).decode()


def tls_config(pki: Pki) -> str:
    return (
        f"tlsCertificateFilePath={pki.server.cert_path}\n"
        f"tlsKeyFilePath={pki.server.key_path}\n"
        f"tlsTrustCertsFilePath={pki.ca.cert_path}\n"
    )


def auth_config(keys: TokenKeys, mechanisms: str = "PLAIN,AMQPLAIN,EXTERNAL") -> str:
    return (
        "authenticationEnabled=true\n"
        f"amqpAuthenticationMechanisms={mechanisms}\n"
        f"tokenSecretKey={secret_url(keys)}\n"
    )


@dataclass
class Secured:
    pki: Pki
    keys: TokenKeys
    config: GatewayConfig
    gateway: GatewayInThread
    tls_port: int
    plain_port: int

    def token(self, sub: str = "alice", **claims: Any) -> str:
        return jwt.encode({"sub": sub, **claims}, self.keys.secret, algorithm="HS256")

    def connections(self) -> list[ClientConnection]:
        return list(self.gateway.call(lambda: self.gateway.server.connections))


def start(pki: Pki, text: str, *, handshake_timeout: float | None = None) -> Secured:
    config = config_from_text(BASE + text, environ={})
    settings = server_settings(config)
    settings = dataclasses.replace(
        settings,
        listeners=tuple(Listener(a.scheme, a.host, 0) for a in settings.listeners),
        handshake_timeout=handshake_timeout or settings.handshake_timeout,
    )
    gateway = GatewayInThread(
        settings, authenticator=authenticator_for(config), backend=MemoryBackend()
    ).start()
    ports = {address.scheme: address.port for address in gateway.server.listening}
    return Secured(pki, token_keys(), config, gateway, ports["amqps"], ports["amqp"])


@contextmanager
def secured_gateway(
    tmp_path: Path, extra: str = "", *, handshake_timeout: float | None = None
) -> Iterator[Secured]:
    pki = make_pki(tmp_path / "pki")
    running = start(
        pki,
        tls_config(pki) + auth_config(token_keys()) + extra,
        handshake_timeout=handshake_timeout,
    )
    try:
        yield running
    finally:
        running.gateway.stop()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def closed_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "gateway.connection" and "connection closed" in record.getMessage()
    ]


def wait_closed_line(caplog: pytest.LogCaptureFixture, fragment: str) -> str:
    """The one 'connection closed' log line whose reason contains ``fragment``."""
    wait_until(lambda: any(fragment in line for line in closed_lines(caplog)))
    [line] = [line for line in closed_lines(caplog) if fragment in line]
    return line


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """The gateway logged no error and no traceback (the clients' own logs do not count)."""
    bad = [
        r
        for r in caplog.records
        if r.name.startswith("gateway") and (r.exc_info or r.levelno >= logging.ERROR)
    ]
    assert not bad, [r.getMessage() for r in bad]


def tls_socket(port: int, context: ssl.SSLContext, source: str = "127.0.0.1") -> ssl.SSLSocket:
    """A blocking TLS socket to the gateway from ``source`` (any 127/8 address on Linux)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return context.wrap_socket(raw, server_hostname="localhost")
