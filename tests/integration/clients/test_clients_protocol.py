"""Real client libraries against the gateway over loopback: handshake, channels, heartbeats,
reply codes, and a graceful stop. No Pulsar needed: these exercise the protocol layers only."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import TypeVar

import aio_pika
import kombu
import pika
import pika.exceptions
import pytest
from pamqp import base, body, commands, frame, header

from gateway.amqp.connection import ConnectionSettings
from gateway.server.address import Listener
from gateway.server.settings import ServerSettings
from tests.support.gateway_thread import GatewayInThread

LOOPBACK = (Listener("amqp", "127.0.0.1", 0),)
F = TypeVar("F")


@pytest.fixture
def gateway() -> Iterator[GatewayInThread]:
    settings = ServerSettings(listeners=LOOPBACK, connection=ConnectionSettings(heartbeat=60))
    with GatewayInThread(settings) as running:
        yield running


def pika_params(port: int, **kwargs: object) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port, connection_attempts=1, socket_timeout=5, **kwargs
    )


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_pika_handshake_and_channels(gateway: GatewayInThread) -> None:
    connection = pika.BlockingConnection(pika_params(gateway.port))
    props = connection._impl.server_properties
    assert props["capabilities"]["publisher_confirms"] is True
    assert props["capabilities"]["basic.nack"] is True
    channels = [connection.channel() for _ in range(3)]
    for channel in channels:
        channel.close()
    assert connection.is_open
    connection.close()
    assert connection.is_closed


def test_pika_unsupported_method_gets_540(gateway: GatewayInThread) -> None:
    connection = pika.BlockingConnection(pika_params(gateway.port))
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        channel.queue_declare("q")
    assert closed.value.reply_code == 540


def test_pika_channel_flow_as_rabbitmq_4(gateway: GatewayInThread) -> None:
    # RabbitMQ 4 (rabbit_channel): Channel.Flow(active=true) is answered; active=false is the
    # connection error 540 "NOT_IMPLEMENTED - active=false", as amqp091-go's
    # TestIntegrationConsumeFlow expects.
    connection = pika.BlockingConnection(pika_params(gateway.port))
    channel = connection.channel()
    assert channel.flow(True) is True
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        channel.flow(False)
    assert (closed.value.reply_code, closed.value.reply_text) == (
        540,
        "NOT_IMPLEMENTED - active=false",
    )


def test_pika_heartbeats_keep_an_idle_connection_open(gateway: GatewayInThread) -> None:
    connection = pika.BlockingConnection(pika_params(gateway.port, heartbeat=1))
    # Three heartbeat intervals with no traffic: heartbeats from both sides must keep it up.
    connection.sleep(3.5)
    assert connection.is_open
    connection.channel().close()
    connection.close()


def test_aio_pika_handshake_and_channel() -> None:
    async def scenario(port: int) -> None:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=5)
        channel = await connection.channel(publisher_confirms=False)
        await channel.close()
        await connection.close()

    with GatewayInThread(ServerSettings(listeners=LOOPBACK)) as gateway:
        asyncio.run(scenario(gateway.port))


def test_kombu_handshake_and_channel(gateway: GatewayInThread) -> None:
    with kombu.Connection(
        f"amqp://guest:guest@127.0.0.1:{gateway.port}//", connect_timeout=5
    ) as conn:
        conn.connect()
        channel = conn.channel()
        channel.close()
        assert conn.connected


def test_garbage_clients_do_not_disturb_others(gateway: GatewayInThread) -> None:
    garbage = []
    for payload in (
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x00\x00\x09\x01" + b"\x01\xff" * 50,
        b"\x00" * 9,
    ):
        sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
        sock.sendall(payload)
        garbage.append(sock)
    connection = pika.BlockingConnection(pika_params(gateway.port))
    connection.channel().close()
    connection.close()
    for sock in garbage:
        # Each garbage client gets an answer (our header or a Connection.Close) and EOF.
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        assert received, "the server must answer before closing"
        sock.close()


def test_wrong_protocol_version_gets_our_header(gateway: GatewayInThread) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x00")
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    assert received == b"AMQP\x00\x00\x09\x01"


def test_oversized_frame_is_refused_with_501(gateway: GatewayInThread) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sock.recv(4096)  # Connection.Start
        # A method frame announcing 1 GB of payload, far above frame_max: refused before
        # the server buffers any of it.
        sock.sendall(b"\x01\x00\x00\x40\x00\x00\x00" + b"\x00" * 16)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    _, _, close = frame.unmarshal(received)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 501


def test_stop_sends_320_to_connected_clients() -> None:
    gateway = GatewayInThread(ServerSettings(listeners=LOOPBACK)).start()
    connection = pika.BlockingConnection(pika_params(gateway.port))
    connection.channel()
    gateway.call(gateway.server.request_stop)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
    assert closed.value.reply_code == 320
    gateway.stop()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika_params(gateway.port))


# ------------------------------------------------------------------- closing under traffic


class RawClient:
    """A blocking socket speaking exact frames (pamqp), for what client libraries hide: writing
    on after a Connection.Close, and telling a clean close (EOF) from a reset."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._buffer = bytearray()
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start)
        self.send(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
            )
        )
        tune = self.expect(commands.Connection.Tune)
        self.send(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
            )
        )
        self.send(commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        self.send(commands.Channel.Open(), 1)
        self.expect(commands.Channel.OpenOk)

    def send(self, value: base.Frame, channel: int = 0) -> None:
        self.sock.sendall(frame.marshal(value, channel))

    def expect(self, kind: type[F]) -> F:
        while True:
            if len(self._buffer) >= 7:
                end = 8 + int.from_bytes(self._buffer[3:7], "big")
                if len(self._buffer) >= end:
                    _, _, value = frame.unmarshal(bytes(self._buffer[:end]))
                    del self._buffer[:end]
                    assert isinstance(value, kind), f"expected {kind.__name__}, got {value!r}"
                    return value
            data = self.sock.recv(65536)
            assert data, f"the server closed the socket before {kind.__name__}"
            self._buffer += data

    def ends_cleanly(self) -> bool:
        """True when the server's end of the socket closes with a FIN, not a reset."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return False


def _publishes(count: int) -> bytes:
    one = (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="nowhere"), 1)
        + frame.marshal(header.ContentHeader(0, 10, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"0123456789"), 1)
    )
    return one * count


def test_close_ok_reaches_a_client_still_publishing(gateway: GatewayInThread) -> None:
    # amqplib ("find high watermark") closes with publishes still queued behind its Close. The
    # server answers Close-Ok and, as RabbitMQ, reads and discards the rest until the client
    # closes: closing over unread bytes resets the socket, and the client's read of Close-Ok
    # fails with ECONNRESET.
    client = RawClient(gateway.port)
    try:
        client.send(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.sock.sendall(_publishes(2000))
        client.expect(commands.Connection.CloseOk)
        client.sock.shutdown(socket.SHUT_WR)
        assert client.ends_cleanly()
    finally:
        client.sock.close()


def test_a_hard_error_is_closed_cleanly_under_a_client_still_publishing(
    gateway: GatewayInThread,
) -> None:
    # After our Connection.Close (540, immediate=true) everything but Close-Ok is discarded
    # (AMQP 0-9-1 connection.close); once Close-Ok arrives the server closes, having read all
    # the client wrote before it: a FIN, no reset.
    client = RawClient(gateway.port)
    try:
        client.send(commands.Basic.Publish(exchange="", routing_key="q", immediate=True), 1)
        client.sock.sendall(_publishes(2000))
        close = client.expect(commands.Connection.Close)
        assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
        client.send(commands.Connection.CloseOk())
        assert client.ends_cleanly()
    finally:
        client.sock.close()
