"""Message TTL (``x-message-ttl``, the ``expiration`` property) end to end, on both backends.

RabbitMQ (docs/ttl.md): an expired message is never delivered, to a consumer or to Basic.Get;
it is dead-lettered with reason ``expired`` if the queue has a dead-letter exchange; with both
TTLs the lower wins; a requeued message keeps its expiry; an invalid ``expiration`` is refused
at publish. Here expired messages also leave the queue's count within a bounded time with no
consumer (the leader's sweep on Pulsar, docs/compatibility.md "Message TTL").

Time passing is what is under test: the tests wait for the clock to pass a TTL (a condition
with a deadline), never for a fixed while.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    amqp_url,
    assert_count_reaches,
    channel_closed,
    unique,
    wait_for_message,
)


def wait_past(moment: float, connection: pika.BlockingConnection) -> None:
    """Until the clock is past ``moment`` (the client keeps processing its I/O)."""
    while time.time() <= moment:
        connection.process_data_events(time_limit=min(0.05, max(0.0, moment - time.time())))


def test_expired_messages_are_never_delivered_and_leave_the_count(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    short, long = unique("short"), unique("long")
    channel.queue_declare(short, arguments={"x-message-ttl": 300})
    channel.queue_declare(long, arguments={"x-message-ttl": 600_000})
    for queue in (short, long):
        channel.basic_publish("", queue, b"m")
    published = time.time()  # confirmed: stored (and stamped) before now
    wait_past(published + 0.4, channel.connection)
    assert channel.basic_get(short, auto_ack=True) == (None, None, None)
    _, _, body = wait_for_message(channel, long)
    assert body == b"m"
    channel.basic_publish("", short, b"unread")
    assert_count_reaches(channel, short, 0)  # gone with no consumer ever reading it
    channel.connection.close()


def test_the_first_message_to_a_new_queue_expires_from_its_publish(running: Running) -> None:
    """TTL runs from the enqueue, as on RabbitMQ: the first message to a new queue waits for
    Pulsar to create the queue's subscription (~70-100 ms on Pulsar), and its TTL counts that
    wait (amqp091-go's TestRabbitMQQueueTTLGet found it alive 200 ms after its publish)."""
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-message-ttl": 100})
    sent = time.time()
    channel.basic_publish("", queue, b"m")
    wait_past(sent + 0.12, channel.connection)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    channel.connection.close()


def test_the_lower_of_queue_and_message_ttl_wins(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-message-ttl": 600_000})
    channel.basic_publish("", queue, b"short", pika.BasicProperties(expiration="200"))
    channel.basic_publish("", queue, b"long", pika.BasicProperties(expiration="600000"))
    published = time.time()
    wait_past(published + 0.3, channel.connection)
    _, properties, body = wait_for_message(channel, queue)
    assert body == b"long"
    assert properties.expiration == "600000"  # delivered as published
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    channel.connection.close()


def test_a_requeued_message_keeps_its_expiry(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-message-ttl": 2000})
    channel.basic_publish("", queue, b"m")
    published = time.time()
    # Held: an unacked message lives on.
    method, _, _ = wait_for_message(channel, queue, auto_ack=False)
    wait_past(published + 2.1, channel.connection)
    channel.basic_reject(method.delivery_tag, requeue=True)
    assert_count_reaches(channel, queue, 0)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    channel.connection.close()


def test_a_consumer_gets_only_what_has_not_expired(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("q")
    # Long enough for the first message to reach the consumer on a loaded machine.
    channel.queue_declare(queue, arguments={"x-message-ttl": 3000})
    channel.basic_qos(prefetch_count=1)
    received: list[tuple[Any, bytes]] = []
    channel.basic_consume(queue, lambda ch, method, p, body: received.append((method, body)))
    channel.basic_publish("", queue, b"first")
    channel.basic_publish("", queue, b"second")  # waits behind first (prefetch 1)
    published = time.time()
    while not received:
        channel.connection.process_data_events(time_limit=0.05)
    wait_past(published + 3.1, channel.connection)
    channel.basic_ack(received[0][0].delivery_tag)
    channel.basic_publish("", queue, b"third")
    while len(received) < 2:
        channel.connection.process_data_events(time_limit=0.05)
    assert [body for _, body in received] == [b"first", b"third"]
    channel.connection.close()


def test_expired_messages_are_dead_lettered_without_consumers(running: Running) -> None:
    """The delay-queue pattern: messages wait out the TTL, then move on to their target."""
    channel = running.connect().channel()
    channel.confirm_delivery()
    delay, target = unique("delay"), unique("target")
    channel.queue_declare(target)
    channel.queue_declare(
        delay,
        arguments={
            "x-message-ttl": 300,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": target,
        },
    )
    channel.basic_publish("", delay, b"later", pika.BasicProperties(expiration="200000"))
    # Waits for the sweep.
    method, properties, body = wait_for_message(channel, target, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == ("", target, b"later")
    assert properties.expiration is None
    [death] = properties.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == (delay, "expired", 1)
    assert death["original-expiration"] == "200000"
    assert properties.headers["x-first-death-reason"] == "expired"
    assert_count_reaches(channel, delay, 0)
    channel.connection.close()


def test_an_automatic_dead_letter_loop_is_cut(running: Running) -> None:
    """Expired, dead-lettered back to the same queue with no rejection: RabbitMQ drops it."""
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("loop")
    channel.queue_declare(queue, arguments={"x-message-ttl": 200, "x-dead-letter-exchange": ""})
    channel.basic_publish("", queue, b"m")
    published = time.time()
    wait_past(published + 0.3, channel.connection)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    assert_count_reaches(channel, queue, 0)
    channel.connection.close()


@pytest.mark.parametrize(
    ("expiration", "reason"),
    [
        ("soon", "no_integer"),
        ("10s", '{leftover_string,"s"}'),
        ("-5", "{value_negative,-5}"),
        ("315360000001", "{value_too_large,315360000001}"),
    ],
)
def test_an_invalid_expiration_is_refused(
    channel: BlockingChannel, expiration: str, reason: str
) -> None:
    queue = unique("q")
    channel.queue_declare(queue)
    with channel_closed(406, f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}"):
        channel.basic_publish("", queue, b"m", pika.BasicProperties(expiration=expiration))
        channel.queue_declare(queue, passive=True)  # a round trip that sees the close


def test_aio_pika_delay_queue(running: Running) -> None:
    """aio-pika's retry-with-delay pattern: a per-message expiration in a queue nobody reads,
    dead-lettered to the work queue once it expires."""
    delay, work = unique("delay"), unique("work")

    async def scenario() -> tuple[bytes, dict[str, Any], str | None]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(work)
            await channel.declare_queue(
                delay, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": work}
            )
            await channel.default_exchange.publish(
                aio_pika.Message(b"retry me", expiration=0.3), routing_key=delay
            )
            async with queue.iterator() as messages:
                async for message in messages:
                    await message.ack()
                    return message.body, dict(message.headers), message.properties.expiration
        raise AssertionError("nothing came out of the delay queue")

    body, headers, expiration = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert body == b"retry me"
    assert expiration is None
    [death] = headers["x-death"]
    assert (death["queue"], death["reason"], death["original-expiration"]) == (
        delay,
        "expired",
        "300",
    )
