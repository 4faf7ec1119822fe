"""A channel's unacknowledged deliveries are back in their queue when Channel.Close-Ok arrives,
and a connection's when Connection.Close-Ok does.

RabbitMQ requeues what a closing channel holds before it answers Close-Ok, so a client that
counts the queue or consumes it right after Close-Ok finds every message ready. On Pulsar the
gateway's requeue takes a while (negative acknowledgements, the consumer's close), and other
work of the connection flushing meanwhile (heartbeats, another channel's deliveries) must not
carry the Close-Ok out before it is done.
"""

from __future__ import annotations

import pika
import pytest
import trio
from pamqp import body
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import PULSAR_BATCH_INDEX, PULSAR_ONLY, Running
from tests.support.clients import connect, message_count, unique, wait_for
from tests.support.scripted_client import ScriptedClient, commands

HELD = 20
ROUNDS = 3
# Messages a consumer on another channel receives while the held ones are given back: its
# deliver loop flushes whenever it waits for Pulsar.
STREAMED = 2000
# A bound on one scripted connection's life (well under a second in memory).
SCENARIO_SECONDS = 60


def publish(connection: pika.BlockingConnection, queue: str, count: int) -> None:
    publisher = connection.channel()
    publisher.confirm_delivery()
    for n in range(count):
        publisher.basic_publish("", queue, f"m{n}".encode())
    publisher.close()


def hold_all(connection: pika.BlockingConnection, queue: str) -> BlockingChannel:
    """A channel whose consumer holds every message of ``queue``, unacknowledged."""
    channel = connection.channel()
    held: list[int] = []
    channel.basic_consume(queue, lambda _c, method, _p, _b: held.append(method.delivery_tag))
    wait_for(lambda: len(held) == HELD, connection, what=f"{HELD} deliveries")
    return channel


# On the broker with batch-index acknowledgements the gateway's producers batch, and a
# message of a batch is requeued by a copy written to its queue: a round trip per message.
@pytest.mark.parametrize("running", ["memory", PULSAR_ONLY, PULSAR_BATCH_INDEX], indirect=True)
def test_the_queue_counts_them_as_soon_as_close_ok_arrives(running: Running) -> None:
    observer = running.connect()  # another connection: it never waits for the first one
    counter = observer.channel()
    queue, busy = unique("held"), unique("busy")
    counter.queue_declare(queue)
    counter.queue_declare(busy)
    publish(observer, queue, HELD)
    publish(observer, busy, STREAMED)
    # Heartbeats every half second: the connection's timer flushes while a close is under way.
    connection = connect(running.port, heartbeat=1)
    streamed: list[bytes] = []
    connection.channel().basic_consume(
        busy, lambda _c, _m, _p, body: streamed.append(body), auto_ack=True
    )
    for round_ in range(ROUNDS):
        channel = hold_all(connection, queue)
        channel.close()  # pika: Basic.Cancel, then Channel.Close; returns on Close-Ok
        # At once, no waiting, on this connection and the other one: all of them are ready.
        assert message_count(counter, queue) == HELD, f"round {round_}"
        assert message_count(connection.channel(), queue) == HELD, f"round {round_}"
    wait_for(lambda: len(streamed) == STREAMED, connection, what="the streamed messages")
    connection.close()
    observer.close()


def test_a_consumer_opened_after_close_ok_receives_them(running: Running) -> None:
    connection = running.connect()
    queue = unique("held")
    connection.channel().queue_declare(queue)
    publish(connection, queue, HELD)
    hold_all(connection, queue).close()
    received: list[bytes] = []
    connection.channel().basic_consume(
        queue, lambda _c, _m, _p, body: received.append(body), auto_ack=True
    )
    wait_for(lambda: len(received) == HELD, connection, what=f"{HELD} redeliveries")
    assert sorted(received) == sorted(f"m{n}".encode() for n in range(HELD))
    connection.close()


async def deliveries(client: ScriptedClient, channel: int, count: int) -> None:
    """Read until ``count`` whole deliveries (their bodies) on ``channel``, other frames
    skipped."""
    seen = 0
    while seen < count:
        on, value = await client.receive()
        if on == channel and isinstance(value, body.ContentBody):
            seen += 1


# pika closes every channel before it sends Connection.Close: a scripted client sends it with
# the channels open, as amqplib, amqp091-go and the Java client may.
@pytest.mark.parametrize("running", ["memory", PULSAR_ONLY, PULSAR_BATCH_INDEX], indirect=True)
def test_the_queue_counts_them_as_soon_as_connection_close_ok_arrives(running: Running) -> None:
    observer = running.connect()
    counter = observer.channel()
    queue = unique("held")
    counter.queue_declare(queue)
    publish(observer, queue, HELD)

    async def scenario() -> None:
        with trio.fail_after(SCENARIO_SECONDS):
            await close_with_channels_open()

    async def close_with_channels_open() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", running.port)
        client = ScriptedClient(stream)
        await client.handshake()
        await client.open_channel(1)
        await client.send(commands.Basic.Consume(queue=queue, consumer_tag="held"), 1)
        await deliveries(client, 1, HELD)
        # A consumer of the same queue on another channel, idle until the close gives the
        # held messages back: it takes the first, cannot deliver it (the connection is
        # closed) and flushes as it waits again.
        await client.open_channel(2)
        await client.send(commands.Basic.Consume(queue=queue, consumer_tag="second"), 2)
        await client.expect(commands.Basic.ConsumeOk, 2)
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        # At once, no waiting, on another connection: every held message is ready.
        assert message_count(counter, queue) == HELD
        await stream.aclose()

    for _round in range(ROUNDS):
        trio.run(scenario)
    observer.close()
