"""A channel without publisher confirms whose write fails is closed, not left to believe its
message was taken (issue 37 item 2: pika's 15.7 MB publish without confirms vanished without a
word). The error is the one a RabbitMQ client would get for it: a channel error for a message
Pulsar refuses, a connection error for a broker that does not answer. A message refused by a
full queue with ``reject-publish`` is dropped silently, as RabbitMQ does without confirms."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing
from pamqp import body, header

from gateway.auth.authenticator import AcceptAnyone, PeerIdentity
from gateway.backend.interface import Message, PublishOutcome, Stored
from gateway.backend.memory import MemoryBackend, MemoryVirtualHost
from gateway.backend.overflow import RefusedStored
from gateway.backend.pulsar.write_failures import PublishFailures
from gateway.metadata.memory import MemoryMetadataStore
from gateway.pulsar.errors import SendError
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from tests.support.scripted_client import ScriptedClient, commands


class Pending:
    """A ``Stored`` whose outcome the test decides, awaited (no callbacks)."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self._done.is_set()

    async def durable(self) -> None:
        await self._done.wait()
        if self.error is not None:
            raise self.error

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self._done.set()


class Reporting(Pending):
    """One that reports to done-callbacks, as pulsar-client's send handles do."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: list[Callable[[Any], None]] = []

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def finish(self, error: BaseException | None = None) -> None:
        super().finish(error)
        for callback in self.callbacks:
            callback(self)


class ScriptedVirtualHost(MemoryVirtualHost):
    """Every publish gets the next ``Stored`` the test queued (through the fast path, or the
    awaited one when ``awaited``), failing with the AMQP error as the Pulsar backend's do."""

    def __init__(self, name: str, namespace: str, store: MemoryMetadataStore) -> None:
        super().__init__(name, namespace, store)
        self.outcomes: list[Stored] = []
        self.awaited = False
        self.failures = PublishFailures()

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        return self.failures.outcome(PublishOutcome(routed=True, stored=self.outcomes.pop(0)))

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome | None:
        if self.awaited:
            return None
        return self.failures.outcome(PublishOutcome(routed=True, stored=self.outcomes.pop(0)))


class ScriptedBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryMetadataStore()
        self.vhost = ScriptedVirtualHost("/", "public/default", self.store)

    async def open_vhost(self, vhost: str, user: str) -> ScriptedVirtualHost:
        await self.store.open("public/default")
        return self.vhost


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[ScriptedClient, ScriptedBackend]]:
    backend = ScriptedBackend()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        server_stream, ServerSettings(), AcceptAnyone(), backend, PeerIdentity("test:1")
    )
    # A deadline for each test (on the autojump clock: a Close that never comes fails fast).
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            client = ScriptedClient(client_stream)
            await client.handshake()
            await client.open_channel(1)
            yield client, backend
            nursery.cancel_scope.cancel()


async def publish(client: ScriptedClient, channel: int = 1) -> None:
    await client.send(commands.Basic.Publish(exchange="", routing_key="q"), channel)
    await client.send(header.ContentHeader(body_size=1), channel)
    await client.send(body.ContentBody(b"x"), channel)


async def nothing_arrives(client: ScriptedClient) -> None:
    with trio.move_on_after(5) as waited:
        frame = await client.receive()
    assert waited.cancelled_caught, frame


async def test_a_refused_write_closes_the_channel_with_406(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, backend):
        stored = Reporting()
        backend.vhost.outcomes.append(stored)
        await publish(client)
        await nothing_arrives(client)  # stored or not: not known yet
        stored.finish(SendError("MessageTooBig", "send to persistent://public/default/q"))
        close = await client.expect(commands.Channel.Close, 1)
        assert close.reply_code == 406
        assert "MessageTooBig" in close.reply_text and "publishing" in close.reply_text
        await client.send(commands.Channel.CloseOk(), 1)
        # The connection goes on: another channel publishes.
        await client.open_channel(2)
        backend.vhost.outcomes.append(Reporting())
        await publish(client, 2)


async def test_a_broker_that_does_not_answer_closes_the_connection_with_541(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, backend):
        backend.vhost.awaited = True  # the awaited path watches its writes too
        stored = Pending()  # no callbacks: awaited by a task
        backend.vhost.outcomes.append(stored)
        await publish(client)
        stored.finish(SendError("Timeout", "send to persistent://public/default/q"))
        close = await client.expect(commands.Connection.Close, 0)
        assert close.reply_code == 541
        assert "Timeout" in close.reply_text


async def test_messages_of_one_group_are_watched_once_and_success_says_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, backend):
        shared = Reporting()  # one grouped send for all three
        backend.vhost.outcomes.extend([shared, shared, shared])
        for _ in range(3):
            await publish(client)
        await client.send(commands.Basic.Qos(prefetch_count=1), 1)
        await client.expect(commands.Basic.QosOk, 1)  # the three publishes are handled
        assert len(shared.callbacks) == 1
        shared.finish()
        await nothing_arrives(client)


async def test_a_message_refused_by_a_full_queue_is_dropped_silently(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, backend):
        backend.vhost.outcomes.append(RefusedStored(["q"]))
        await publish(client)
        await nothing_arrives(client)


async def test_a_failure_after_the_channel_closed_does_not_touch_its_successor(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, backend):
        stored = Reporting()
        backend.vhost.outcomes.append(stored)
        await publish(client)
        await client.send(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        )
        await client.expect(commands.Channel.CloseOk, 1)
        await client.open_channel(1)  # the same number, a new channel
        stored.finish(SendError("MessageTooBig", "send"))
        await nothing_arrives(client)
