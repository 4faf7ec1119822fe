"""Queue.Delete of a queue this connection consumes: Delete-Ok, then the consumer's Basic.Cancel
in the same write, whichever task notices the deletion first: RabbitMQ's order (rabbitmq-server
3.10 answers the delete before the queue's exit reaches the consumer's channel). amqplib's own
suite closes the connection on the Cancel and fails if Delete-Ok had not come yet; pika fails on
a Basic.Cancel that arrives a while after Delete-Ok, while it closes that channel."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from pamqp import frame

from gateway.amqp import commands as cmd
from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.interface import Owner, QueueSubscription
from gateway.backend.memory import MemoryBackend, MemoryVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from tests.support.scripted_client import ScriptedClient, commands


class SlowClose:
    """A subscription whose close takes a while (Pulsar's consumer close is a round trip)."""

    def __init__(self, inner: QueueSubscription) -> None:
        self._inner = inner

    async def receive(self, before_wait: Any = None) -> Any:
        return await self._inner.receive(before_wait)

    def receive_nowait(self) -> Any:
        return self._inner.receive_nowait()

    async def close(self) -> None:
        await trio.sleep(1.0)
        await self._inner.close()


class LaggingVirtualHost(MemoryVirtualHost):
    """Delete-Ok is held back a moment after the delete, so that the consumer's deliver loop
    notices the deletion first and is closing its subscription when Delete-Ok goes out."""

    async def consume(self, command: cmd.BasicConsume, owner: Owner, **options: Any) -> Any:
        return SlowClose(await super().consume(command, owner, **options))

    async def delete_queue(self, command: cmd.QueueDelete, owner: Owner) -> int:
        count = await super().delete_queue(command, owner)
        await trio.sleep(0.1)
        return count


class LaggingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryMetadataStore()
        self.vhost = LaggingVirtualHost("/", "public/default", self.store)

    async def open_vhost(self, vhost: str, user: str) -> LaggingVirtualHost:
        await self.store.open("public/default")
        return self.vhost


async def test_delete_ok_then_basic_cancel_in_one_write(autojump_clock: trio.abc.Clock) -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), LaggingBackend(), PeerIdentity("t:1")
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        client = ScriptedClient(client_stream)
        await client.handshake(
            capabilities={"consumer_cancel_notify": True, "authentication_failure_close": True}
        )
        await client.open_channel(1)
        await client.send(commands.Queue.Declare(queue="q"), 1)
        await client.expect(commands.Queue.DeclareOk, 1)
        await client.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 1)
        await client.expect(commands.Basic.ConsumeOk, 1)
        await client.send(commands.Queue.Delete(queue="q"), 1)
        # One read from the stream: everything the gateway wrote at once.
        written = frames_in(bytes(await client_stream.receive_some()))
        assert [type(f) for f in written] == [commands.Queue.DeleteOk, commands.Basic.Cancel]
        assert written[1].consumer_tag == "c"
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        await connection.finished.wait()


def frames_in(data: bytes) -> list[Any]:
    """The whole frames in ``data``, decoded (on channel 1)."""
    found = []
    while data:
        consumed, channel, value = frame.unmarshal(data)
        assert channel == 1
        found.append(value)
        data = data[consumed:]
    return found
