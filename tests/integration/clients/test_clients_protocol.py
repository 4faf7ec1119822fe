"""Real client libraries against the gateway over loopback: handshake, channels, heartbeats,
reply codes, and a graceful stop. No Pulsar needed: these exercise the protocol layers only."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import aio_pika
import kombu
import pika
import pika.exceptions
import pytest
from pamqp import commands, frame

from gateway.amqp.connection import ConnectionSettings
from gateway.server.address import Listener
from gateway.server.settings import ServerSettings
from tests.support.gateway_thread import GatewayInThread

LOOPBACK = (Listener("amqp", "127.0.0.1", 0),)


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
