"""A channel's unacknowledged deliveries are back in their queue when Channel.Close-Ok arrives.

RabbitMQ requeues what a closing channel holds before it answers Close-Ok, so a client that
counts the queue or consumes it right after Close-Ok finds every message ready. On Pulsar the
gateway's requeue takes a while (negative acknowledgements, the consumer's close), and other
work of the connection flushing meanwhile (heartbeats, another channel's deliveries) must not
carry the Close-Ok out before it is done.
"""

from __future__ import annotations

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import PULSAR_BATCH_INDEX, PULSAR_ONLY, Running
from tests.support.clients import connect, message_count, unique, wait_for

HELD = 20
ROUNDS = 3
# Messages a consumer on another channel receives while the held ones are given back: its
# deliver loop flushes whenever it waits for Pulsar.
STREAMED = 2000


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
