"""What the secured-profile tests share: the stack's details, gateway configurations for it, an
AMQP round trip with publisher confirms, and a TCP forwarder that gives the broker a second
address (for host name verification)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pika

from gateway.config import GatewayConfig, config_from_text
from tests.support.clients import connect, unique, wait_for

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationTls"


@dataclass(frozen=True)
class SecuredStack:
    """The secured profile's secured.json (scripts/stack.py `secured_info()`)."""

    broker_url: str
    web_url: str
    zookeeper: str
    ca_cert: str
    client_cert: str
    client_key: str
    client_role: str
    superuser_token: str
    superuser_token_file: str
    user_token: str
    user_role: str

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> SecuredStack:
        return cls(**{name: str(info[name]) for name in cls.__dataclass_fields__})

    @property
    def broker_port(self) -> int:
        return int(self.broker_url.rsplit(":", 1)[1])

    @property
    def web_port(self) -> int:
        return int(self.web_url.rsplit(":", 1)[1])

    def admin_http(self, token: str | None = None) -> httpx.Client:
        """An admin REST client trusting the profile's CA, as the superuser by default."""
        return httpx.Client(
            base_url=self.web_url,
            verify=ssl.create_default_context(cafile=self.ca_cert),
            headers={"Authorization": f"Bearer {token or self.superuser_token}"},
            timeout=30,
        )


def gateway_config(
    stack: SecuredStack,
    namespace: str,
    settings: str,
    *,
    broker_url: str | None = None,
    web_url: str | None = None,
) -> GatewayConfig:
    """A gateway whose vhost ``/`` is ``public/<namespace>`` on the secured stack, with the
    broker-client ``settings`` (configuration-file lines) under test."""
    return config_from_text(
        f"brokerServiceURL={broker_url or stack.broker_url}\n"
        f"brokerWebServiceURL={web_url or stack.web_url}\n"
        f"configurationStoreServers={stack.zookeeper}\n"
        f"amqpDefaultNamespace={namespace}\n" + settings,
        environ={},
    )


def token_settings(stack: SecuredStack, params: str) -> str:
    return (
        f"brokerClientAuthenticationPlugin={TOKEN_PLUGIN}\n"
        f"brokerClientAuthenticationParameters={params}\n"
        f"brokerClientTrustCertsFilePath={stack.ca_cert}\n"
    )


def confirmed_round_trip(port: int, count: int = 5) -> list[bytes]:
    """Publish ``count`` persistent messages with publisher confirms to a fresh queue, then
    consume them; returns the bodies in delivery order (each publish raises if it is nacked
    or unroutable)."""
    connection = connect(port)
    try:
        channel = connection.channel()
        queue = unique("secured")
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        bodies = [f"message {i} over TLS".encode() for i in range(count)]
        for body in bodies:
            channel.basic_publish(
                "",
                queue,
                body,
                pika.BasicProperties(delivery_mode=2),
                mandatory=True,
            )
        got: list[bytes] = []

        def deliver(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
            got.append(body)
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(queue, deliver)
        wait_for(lambda: len(got) >= count, connection, what=f"{count} deliveries")
        channel.queue_delete(queue)
        return got
    finally:
        connection.close()


class Forwarder:
    """Accepts TCP connections on ``host`` (e.g. 127.0.0.2, an address the broker's
    certificate does not name) and relays them byte for byte to 127.0.0.1:``target``."""

    def __init__(self, target: int, host: str = "127.0.0.2") -> None:
        self._target = target
        self._server = socket.create_server((host, 0))
        self._server.settimeout(0.2)
        self.host, self.port = self._server.getsockname()[:2]
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="forwarder", daemon=True)

    def __enter__(self) -> Forwarder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(5)
        for sock in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                downstream, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=5)
            except OSError:
                downstream.close()
                continue
            self._sockets += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    source.settimeout(None)
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def forwarded(stack: SecuredStack) -> Iterator[tuple[str, str]]:
    """(broker URL, web URL) of the secured stack through 127.0.0.2."""
    with Forwarder(stack.broker_port) as broker, Forwarder(stack.web_port) as web:
        yield f"pulsar+ssl://{broker.host}:{broker.port}", f"https://{web.host}:{web.port}"
