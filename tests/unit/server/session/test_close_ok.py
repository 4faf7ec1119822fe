"""Channel.Close-Ok goes out only once the channel's unacknowledged messages are back in their
queues: RabbitMQ requeues them before it answers, so a client that consumes or counts the
queue as soon as it has Close-Ok finds them. On Pulsar a requeue takes a round trip or more
(a negative acknowledgement, a copy of a batched message, the consumer's close), and any task
of the connection that flushed meanwhile (a heartbeat, another channel's deliveries or
confirms) used to carry the Close-Ok the core had queued on Channel.Close out before it.
Connection.Close-Ok likewise waits for every channel of the connection to be released."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from pamqp import body, frame

from gateway.amqp import commands as cmd
from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.interface import Owner
from gateway.backend.memory import MemoryBackend, MemoryDelivery, MemoryVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from tests.support.scripted_client import ScriptedClient, commands, header

COUNT = 3
# Each requeue takes this long (Pulsar's round trips): longer than half the heartbeat
# interval, after which the connection's timer sends a heartbeat and flushes.
REQUEUE_SECONDS = 1.0


class SlowRequeue:
    """A delivery whose requeue takes a while; ``requeued`` lists those done."""

    def __init__(self, inner: MemoryDelivery, requeued: list[bytes]) -> None:
        self._inner = inner
        self._requeued = requeued

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def reject(self, requeue: bool) -> None:
        await trio.sleep(REQUEUE_SECONDS)
        await self._inner.reject(requeue)
        self._requeued.append(self._inner.message.body)


class SlowRequeueVirtualHost(MemoryVirtualHost):
    requeued: list[bytes]

    async def get(self, command: cmd.BasicGet, owner: Owner) -> Any:
        got = await super().get(command, owner)
        if got is None:
            return None
        delivery, remaining = got
        return SlowRequeue(delivery, self.requeued), remaining


class SlowRequeueBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryMetadataStore()
        self.vhost = SlowRequeueVirtualHost("/", "public/default", self.store)
        self.vhost.requeued = []

    async def open_vhost(self, vhost: str, user: str) -> SlowRequeueVirtualHost:
        await self.store.open("public/default")
        return self.vhost


async def hold_every_message(client: ScriptedClient) -> None:
    """On channel 1: declare "q", publish COUNT messages to it, and get each without
    acknowledging it (the channel holds them all)."""
    await client.send(commands.Queue.Declare(queue="q"), 1)
    await client.expect(commands.Queue.DeclareOk, 1)
    for n in range(COUNT):
        content = f"m{n}".encode()
        await client.send(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        properties = commands.Basic.Properties()
        await client.send(header.ContentHeader(0, len(content), properties), 1)
        await client.send_raw(frame.marshal(body.ContentBody(content), 1))
    for _ in range(COUNT):
        await client.send(commands.Basic.Get(queue="q"), 1)
        await client.expect(commands.Basic.GetOk, 1)
        await client.expect(header.ContentHeader, 1)
        await client.receive()  # the body


async def test_close_ok_comes_after_the_requeue(autojump_clock: trio.abc.Clock) -> None:
    backend = SlowRequeueBackend()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), backend, PeerIdentity("t:1")
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        client = ScriptedClient(client_stream)
        # Heartbeats: the connection's timer flushes every half interval while the requeue
        # is under way, as other channels' deliveries and confirms would.
        await client.handshake(heartbeat_interval=1)
        await client.open_channel(1)
        await hold_every_message(client)
        assert backend.vhost.requeued == []

        await client.send(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        )
        await client.expect(commands.Channel.CloseOk, 1)
        # Every message is back in the queue by now.
        assert sorted(backend.vhost.requeued) == [f"m{n}".encode() for n in range(COUNT)]

        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        await connection.finished.wait()


async def test_connection_close_ok_comes_after_every_requeue(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Connection.Close without Channel.Close: RabbitMQ closes the channels, requeueing what
    they held, before its Close-Ok. A consumer of the same queue on another channel receives
    the first message requeued, fails to deliver it (the connection is closed) and flushes
    as it waits again: that flush used to carry out the Close-Ok the core had queued on
    Connection.Close, with the other requeues still under way."""
    backend = SlowRequeueBackend()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), backend, PeerIdentity("t:1")
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        client = ScriptedClient(client_stream)
        await client.handshake()
        await client.open_channel(1)
        await hold_every_message(client)
        await client.open_channel(2)
        await client.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)
        await client.expect(commands.Basic.ConsumeOk, 2)

        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        # Every message is back in the queue by now.
        assert sorted(backend.vhost.requeued) == [f"m{n}".encode() for n in range(COUNT)]
        status = await backend.vhost.declare_queue(
            cmd.QueueDeclare("q", passive=True), Owner("observer", "guest")
        )
        assert status.message_count == COUNT
        # The socket is the client's to close (connection.close-ok): the gateway waits.
        await client_stream.aclose()
        await connection.finished.wait()
