"""Back-pressure: a publish held back by the backend blocks the reader, and clients that
advertise ``connection.blocked`` hear Connection.Blocked and then Unblocked."""

from __future__ import annotations

import trio
import trio.testing
from pamqp import body, header

from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.interface import Message, PublishOutcome
from gateway.backend.memory import MemoryBackend, MemoryVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.server.connection import ClientConnection
from gateway.server.publishing import BLOCKED_AFTER
from gateway.server.settings import ServerSettings
from tests.support.scripted_client import ScriptedClient, commands


class GatedVirtualHost(MemoryVirtualHost):
    """Publishes wait until the test opens the gate, as when Pulsar's in-flight limit is hit."""

    def __init__(self, name: str, namespace: str, store: MemoryMetadataStore) -> None:
        super().__init__(name, namespace, store)
        self.gate = trio.Event()

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        await self.gate.wait()
        return await super().publish(message, mandatory=mandatory)

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome | None:
        return None  # every publish goes through the gate


class GatedBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryMetadataStore()
        self.vhost = GatedVirtualHost("/", "public/default", self.store)

    async def open_vhost(self, vhost: str, user: str) -> GatedVirtualHost:
        await self.store.open("public/default")
        return self.vhost


async def publish(client: ScriptedClient) -> None:
    await client.send(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    await client.send(header.ContentHeader(body_size=1), 1)
    await client.send(body.ContentBody(b"x"), 1)


async def test_blocked_then_unblocked_around_a_held_publish(
    autojump_clock: trio.abc.Clock,
) -> None:
    backend = GatedBackend()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), backend, PeerIdentity("test:1")
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        client = ScriptedClient(client_stream)
        await client.handshake(
            capabilities={"connection.blocked": True, "authentication_failure_close": True}
        )
        await client.open_channel(1)
        await client.send(commands.Confirm.Select(), 1)
        await client.expect(commands.Confirm.SelectOk, 1)
        started = trio.current_time()
        await publish(client)
        blocked = await client.expect(commands.Connection.Blocked, 0)
        assert trio.current_time() - started >= BLOCKED_AFTER
        assert "not keeping up" in blocked.reason
        backend.vhost.gate.set()
        await client.expect(commands.Connection.Unblocked, 0)
        ack = await client.expect(commands.Basic.Ack, 1)
        assert ack.delivery_tag == 1
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        await connection.finished.wait()


async def test_clients_without_the_capability_are_just_not_read(
    autojump_clock: trio.abc.Clock,
) -> None:
    backend = GatedBackend()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), backend, PeerIdentity("test:1")
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        client = ScriptedClient(client_stream)
        await client.handshake()
        await client.open_channel(1)
        await client.send(commands.Confirm.Select(), 1)
        await client.expect(commands.Confirm.SelectOk, 1)
        await publish(client)
        # Nothing arrives while the publish is held: no Blocked for a client that did not ask.
        with trio.move_on_after(10 * BLOCKED_AFTER) as waited:
            await client.receive()
        assert waited.cancelled_caught
        backend.vhost.gate.set()
        ack = await client.expect(commands.Basic.Ack, 1)
        assert ack.delivery_tag == 1
        nursery.cancel_scope.cancel()
