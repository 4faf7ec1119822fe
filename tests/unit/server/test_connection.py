"""The trio shell over in-memory streams, with trio's autojump clock for everything timed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from gateway.amqp.connection import ConnectionSettings
from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.auth.authenticator import AcceptAnyone, AuthenticationFailed, PeerIdentity
from gateway.backend.interface import QueueStatus
from gateway.backend.unsupported import UnsupportedBackend, UnsupportedVirtualHost
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from tests.support.scripted_client import PROTOCOL_HEADER, ScriptedClient, commands, heartbeat


class RefuseEveryone:
    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        raise AuthenticationFailed(
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"
        )


@asynccontextmanager
async def served(
    settings: ServerSettings | None = None, authenticator: object = None, backend: object = None
) -> AsyncIterator[tuple[ScriptedClient, ClientConnection]]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream,
        settings or ServerSettings(),
        authenticator or AcceptAnyone(),  # type: ignore[arg-type]
        backend or UnsupportedBackend(),  # type: ignore[arg-type]
        PeerIdentity("test:1"),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        yield ScriptedClient(client_stream), connection
        with trio.fail_after(60):
            await connection.finished.wait()


async def test_handshake_then_client_close(autojump_clock: trio.abc.Clock) -> None:
    async with served() as (client, connection):
        tune = await client.handshake()
        assert tune.channel_max == 256
        assert tune.frame_max == 2_097_152
        assert connection.user == "guest"
        assert connection.vhost == "/"
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        assert await client.read_until_eof() == []
    assert connection.close_reason == "closed by client: 200 bye"


async def test_channel_open_close_and_unsupported_method_is_540(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served() as (client, _connection):
        await client.handshake()
        await client.open_channel(1)
        await client.send(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        )
        await client.expect(commands.Channel.CloseOk, 1)
        await client.open_channel(2)
        await client.send(commands.Queue.Declare(queue="q"), 2)
        close = await client.expect(commands.Connection.Close, 0)
        assert close.reply_code == ReplyCode.NOT_IMPLEMENTED
        assert close.class_id == 50 and close.method_id == 10
        await client.send(commands.Connection.CloseOk())
        assert await client.read_until_eof() == []


async def test_server_sends_heartbeats_and_drops_a_silent_client(
    autojump_clock: trio.abc.Clock,
) -> None:
    settings = ServerSettings(connection=ConnectionSettings(heartbeat=10))
    async with served(settings) as (client, connection):
        await client.handshake(heartbeat_interval=10)
        started = trio.current_time()
        # We speak after half an interval of our own silence, as RabbitMQ does ...
        await client.expect(heartbeat.Heartbeat)
        assert trio.current_time() - started == pytest.approx(5, abs=0.5)
        # ... and the client never answers: after heartbeat x timeout factor (2) it is gone.
        await client.read_until_eof()
        assert trio.current_time() - started == pytest.approx(20, abs=0.5)
    assert connection.close_reason == "missed heartbeats from client"


async def test_a_client_that_sends_heartbeats_stays_connected(
    autojump_clock: trio.abc.Clock,
) -> None:
    settings = ServerSettings(connection=ConnectionSettings(heartbeat=10))
    async with served(settings) as (client, connection):
        await client.handshake(heartbeat_interval=10)
        for _ in range(10):
            await trio.sleep(5)
            await client.send(heartbeat.Heartbeat())
        assert not connection.finished.is_set()
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)


class SlowDeclares(UnsupportedVirtualHost):
    """Queue.Declare waits 30 s (Pulsar or ZooKeeper slow after an outage)."""

    async def declare_queue(self, command: Any, owner: Any) -> QueueStatus:
        await trio.sleep(30)
        return QueueStatus(command.queue, 0, 0, created=True)


class SlowBackend:
    async def open_vhost(self, vhost: str, user: str) -> SlowDeclares:
        return SlowDeclares(vhost)


async def test_a_client_waiting_on_a_slow_method_is_not_taken_for_dead(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Issue 37: while one channel's Queue.Declare waited, the gateway read nothing, and
    # dropped pika after 2 x heartbeat for "missed heartbeats" it had never read.
    settings = ServerSettings(connection=ConnectionSettings(heartbeat=10))
    async with served(settings, backend=SlowBackend()) as (client, connection):
        await client.handshake(heartbeat_interval=10)
        await client.open_channel(1)
        await client.send(commands.Queue.Declare(queue="q"), 1)
        started = trio.current_time()

        async def beat() -> None:
            while True:
                await trio.sleep(5)
                await client.send(heartbeat.Heartbeat())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(beat)
            await client.expect(commands.Queue.DeclareOk, 1)
            nursery.cancel_scope.cancel()
        assert trio.current_time() - started == pytest.approx(30, abs=0.5)
        assert not connection.finished.is_set()
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)


async def test_handshake_must_finish_in_time(autojump_clock: trio.abc.Clock) -> None:
    async with served(ServerSettings(handshake_timeout=5)) as (client, connection):
        await client.send_raw(PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        started = trio.current_time()
        await client.read_until_eof()
        assert 5 <= trio.current_time() - started < 6
    assert connection.close_reason == "handshake not completed in time"


async def test_wrong_protocol_header_gets_ours_back_and_a_close(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served() as (client, _connection):
        await client.send_raw(b"AMQP\x01\x01\x00\x0a")
        data = b""
        while chunk := await client.stream.receive_some(100):
            data += chunk
        assert data == PROTOCOL_HEADER


async def test_refused_login_gets_403_when_client_supports_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served(authenticator=RefuseEveryone()) as (client, connection):
        await client.send_raw(PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        await client.send(
            commands.Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism="PLAIN",
                response="\0u\0p",
            )
        )
        close = await client.expect(commands.Connection.Close)
        assert close.reply_code == ReplyCode.ACCESS_REFUSED
        await client.send(commands.Connection.CloseOk())
        await client.read_until_eof()
    assert connection.close_reason is not None
    assert connection.close_reason.startswith("authentication failed")


async def test_refused_login_just_closes_for_old_clients(autojump_clock: trio.abc.Clock) -> None:
    async with served(authenticator=RefuseEveryone()) as (client, _connection):
        await client.send_raw(PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        await client.send(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0u\0p")
        )
        assert await client.read_until_eof() == []


async def test_request_close_sends_320_and_waits_for_close_ok(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served() as (client, connection):
        await client.handshake()
        await connection.request_close(AMQPError(ReplyCode.CONNECTION_FORCED, "shutdown"))
        close = await client.expect(commands.Connection.Close)
        assert close.reply_code == 320
        await client.send(commands.Connection.CloseOk())
        assert await client.read_until_eof() == []


@pytest.mark.parametrize("split", [1, 3, 7])
async def test_handshake_bytes_may_arrive_in_any_pieces(
    split: int, autojump_clock: trio.abc.Clock
) -> None:
    """The reader must not assume a frame arrives in one read."""
    from pamqp import frame

    async with served() as (client, connection):
        await client.send_raw(PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        start_ok = frame.marshal(
            commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0a\0b"),
            0,
        )
        for offset in range(0, len(start_ok), split):
            await client.send_raw(start_ok[offset : offset + split])
            await trio.sleep(0.01)
        await client.expect(commands.Connection.Tune)
        assert connection.user == "a"


async def test_a_client_that_never_answers_close_is_dropped_after_the_close_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served(ServerSettings(close_timeout=2.0)) as (client, _connection):
        await client.handshake()
        await client.open_channel(1)
        await client.send(commands.Queue.Declare(queue="q"), 1)  # 540: Connection.Close
        await client.expect(commands.Connection.Close)
        started = trio.current_time()
        await client.read_until_eof()  # no Close-Ok from us
        assert 2.0 <= trio.current_time() - started < 3.0


async def test_after_close_ok_the_client_closes_the_socket(autojump_clock: trio.abc.Clock) -> None:
    """Connection.Close-Ok tells the client it may close the socket (AMQP 0-9-1): until it does,
    what it still sends is read and discarded, as RabbitMQ does in its `closed` state. Closing
    our end over unread bytes would reset the connection under the Close-Ok."""
    async with served(ServerSettings(close_timeout=2.0)) as (client, connection):
        await client.handshake()
        await client.open_channel(1)
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        close_ok_at = trio.current_time()
        for _ in range(100):  # what the client had queued behind its Close: discarded
            await client.send(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        await trio.sleep(1.5)  # autojump clock: 1.5 virtual seconds, inside the close timeout
        assert not connection.finished.is_set()
        await client.stream.aclose()
        with trio.fail_after(0.1):
            await connection.finished.wait()
        assert trio.current_time() - close_ok_at == pytest.approx(1.5, abs=0.01)
    assert connection.close_reason == "closed by client: 200 bye"


async def test_a_client_that_never_closes_after_close_ok_is_dropped_after_the_close_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served(ServerSettings(close_timeout=2.0)) as (client, _connection):
        await client.handshake()
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        close_ok_at = trio.current_time()
        assert await client.read_until_eof() == []
        assert 2.0 <= trio.current_time() - close_ok_at < 3.0
