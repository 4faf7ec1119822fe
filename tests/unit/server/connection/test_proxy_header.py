"""PROXY protocol v2 in the trio shell: trusted peers name their client, others are refused."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from gateway.amqp.proxy_protocol import Command, ProxyHeader, encode
from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.unsupported import UnsupportedBackend
from gateway.server.connection import ClientConnection
from gateway.server.settings import ProxyTrust, ServerSettings
from tests.support.scripted_client import PROTOCOL_HEADER, ScriptedClient, commands

CLIENT = ProxyHeader(Command.PROXY, source=("198.51.100.9", 51000), destination=("10.0.0.1", 5672))


@asynccontextmanager
async def served(
    *, proxy_header: bool, settings: ServerSettings | None = None
) -> AsyncIterator[tuple[ScriptedClient, ClientConnection]]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream,
        settings or ServerSettings(),
        AcceptAnyone(),
        UnsupportedBackend(),
        PeerIdentity("127.0.0.1:40000"),
        proxy_header=proxy_header,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        yield ScriptedClient(client_stream), connection
        with trio.fail_after(60):
            await connection.finished.wait()


async def close(client: ScriptedClient) -> None:
    await client.send(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    await client.expect(commands.Connection.CloseOk)
    await client.read_until_eof()


async def test_a_trusted_proxy_names_the_client(autojump_clock: trio.abc.Clock) -> None:
    async with served(proxy_header=True) as (client, connection):
        # Header and protocol header in one write: the header's end must not swallow AMQP.
        await client.send_raw(encode(CLIENT) + PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        assert connection.peer.address == "198.51.100.9:51000"
        await client.send(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0u\0p", locale="en_US"
            )
        )
        await client.expect(commands.Connection.Tune)
        await client.send(commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
        await client.send(commands.Connection.Open(virtual_host="/"))
        await client.expect(commands.Connection.OpenOk)
        await close(client)


async def test_header_split_byte_by_byte(autojump_clock: trio.abc.Clock) -> None:
    async with served(proxy_header=True) as (client, connection):
        for byte in encode(CLIENT) + PROTOCOL_HEADER:
            await client.send_raw(bytes([byte]))
        await client.expect(commands.Connection.Start)
        assert connection.peer.address == "198.51.100.9:51000"


async def test_a_trusted_peer_without_a_header_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served(proxy_header=True) as (client, connection):
        await client.send_raw(PROTOCOL_HEADER)
        assert await client.read_until_eof() == []
    assert connection.close_reason is not None
    assert "bad PROXY protocol header from a trusted peer: no PROXY protocol v2 header" in (
        connection.close_reason
    )
    assert connection.peer.address == "127.0.0.1:40000"


async def test_a_header_that_never_ends_times_out(autojump_clock: trio.abc.Clock) -> None:
    settings = ServerSettings(handshake_timeout=5)
    async with served(proxy_header=True, settings=settings) as (client, connection):
        await client.send_raw(encode(CLIENT)[:20])
        assert await client.read_until_eof() == []
    assert connection.close_reason == "no complete PROXY protocol header in time"


async def test_an_untrusted_peer_sending_a_header_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with served(proxy_header=False) as (client, connection):
        await client.send_raw(encode(CLIENT) + PROTOCOL_HEADER)
        data = b""
        while chunk := await client.stream.receive_some(100):
            data += chunk
        # Answered like any bad protocol header (AMQP 0-9-1 section 4.2.2) ...
        assert data == PROTOCOL_HEADER
    # ... and the log line says what happened, and the address is the socket's, not the claim.
    assert connection.close_reason is not None
    assert "PROXY protocol header from a peer not in amqpProxyProtocolTrustedNetworks" in (
        connection.close_reason
    )
    assert connection.peer.address == "127.0.0.1:40000"


async def test_a_local_health_check_is_logged_quietly(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.connection")
    async with served(proxy_header=True) as (client, connection):
        await client.send_raw(encode(ProxyHeader(Command.LOCAL)))
        await client.stream.aclose()
    closed = [r for r in caplog.records if r.getMessage().startswith("connection closed")]
    assert [r.levelno for r in closed] == [logging.DEBUG]
    assert connection.peer.address == "127.0.0.1:40000"


@pytest.mark.parametrize(
    ("entries", "peer", "trusted"),
    [
        ((), "127.0.0.1", False),
        ((), None, False),
        (("127.0.0.1/32",), "127.0.0.1", True),
        (("127.0.0.1/32",), "127.0.0.2", False),
        (("10.0.0.0/8",), "::ffff:10.1.2.3", True),  # IPv4 client on a dual-stack socket
        (("2001:db8::/32",), "2001:db8::5", True),
        (("2001:db8::/32",), "fe80::1%eth0", False),
        (("unix",), None, True),
        (("unix",), "127.0.0.1", False),
        (("127.0.0.1/32",), None, False),
    ],
)
def test_proxy_trust(entries: tuple[str, ...], peer: str | None, trusted: bool) -> None:
    assert ProxyTrust.parse(entries).trusts(peer) is trusted


async def test_a_silent_connection_from_a_trusted_proxy_is_a_quiet_health_check(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.connection")
    async with served(proxy_header=True) as (client, connection):
        await client.stream.aclose()  # HAProxy's plain TCP check: connect, close
    closed = [r for r in caplog.records if r.getMessage().startswith("connection closed")]
    assert [r.levelno for r in closed] == [logging.DEBUG]
    assert connection.close_reason == "closed without sending anything (a health check)"


async def test_a_header_cut_short_is_logged(autojump_clock: trio.abc.Clock) -> None:
    async with served(proxy_header=True) as (client, connection):
        await client.send_raw(encode(CLIENT)[:5])
        await client.stream.aclose()
    assert connection.close_reason == "peer closed the socket inside its PROXY protocol header"
