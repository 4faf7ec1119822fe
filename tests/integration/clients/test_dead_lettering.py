"""Dead-lettering (``x-dead-letter-exchange``/``-routing-key``) end to end, on both backends.

What RabbitMQ documents (docs/dlx.md): a message rejected or nacked with requeue=false leaves
its queue for the queue's dead-letter exchange, with the dead-letter routing key or its own;
Basic.Deliver then names the dead-letter exchange; ``x-death`` records the event per
``{queue, reason}`` (count, reason, queue, time, exchange, routing-keys, most recent first)
and ``x-first-death-*``/``x-last-death-*`` headers are set; a missing dead-letter exchange
drops the message.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import aio_pika
import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import amqp_url, unique, wait_for_message

DEADLINE = 10.0


def empty(channel: BlockingChannel, queue: str) -> bool:
    return channel.queue_declare(queue, passive=True).method.message_count == 0


def wait_empty(channel: BlockingChannel, queue: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not empty(channel, queue):
        assert time.monotonic() < deadline, f"{queue} still holds messages"
        channel.connection.process_data_events(time_limit=0.05)


def test_a_rejected_message_goes_to_the_dead_letter_exchange(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    work, dlx, dead, source = unique("work"), unique("dlx"), unique("dead"), unique("src")
    channel.exchange_declare(dlx, "direct")
    channel.exchange_declare(source, "topic")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx, "failed")
    channel.queue_declare(
        work, arguments={"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "failed"}
    )
    channel.queue_bind(work, source, "orders.#")
    before = int(time.time())
    channel.basic_publish(
        source,
        "orders.new",
        b"poison",
        pika.BasicProperties(content_type="text/plain", headers={"app": "kept"}),
    )
    method, _, _ = wait_for_message(channel, work, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)

    method, properties, body = wait_for_message(channel, dead)
    assert (method.exchange, method.routing_key, body) == (dlx, "failed", b"poison")
    assert not method.redelivered
    assert properties.content_type == "text/plain"
    headers = properties.headers
    assert headers["app"] == "kept"
    [death] = headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == work
    assert death["exchange"] == source
    assert death["routing-keys"] == ["orders.new"]
    assert isinstance(death["time"], datetime.datetime)
    assert before - 1 <= death["time"].timestamp() <= time.time() + 1
    assert headers["x-first-death-queue"] == headers["x-last-death-queue"] == work
    assert headers["x-first-death-reason"] == headers["x-last-death-reason"] == "rejected"
    assert headers["x-first-death-exchange"] == headers["x-last-death-exchange"] == source
    wait_empty(channel, work)
    channel.connection.close()


def test_nacked_messages_keep_their_routing_key_and_count_up_on_each_death(
    running: Running,
) -> None:
    """No dead-letter routing key: the message's own key, here back to the queue itself
    through the default exchange (a loop of rejections is no cycle: RabbitMQ lets it run).
    The same {queue, reason} again counts up."""
    channel = running.connect().channel()
    channel.confirm_delivery()
    work = unique("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": ""})
    for n in range(3):
        channel.basic_publish("", work, f"m{n}".encode())
    taken = [wait_for_message(channel, work, auto_ack=False) for _ in range(3)]
    assert [body for _, _, body in taken] == [b"m0", b"m1", b"m2"]
    channel.basic_nack(taken[-1][0].delivery_tag, multiple=True, requeue=False)
    bodies = set()
    for _ in range(3):
        method, properties, body = wait_for_message(channel, work, auto_ack=False)
        bodies.add(body)
        assert (method.exchange, method.routing_key) == ("", work)
        [death] = properties.headers["x-death"]
        assert (death["queue"], death["reason"], death["count"]) == (work, "rejected", 1)
        channel.basic_reject(method.delivery_tag, requeue=False)
    assert bodies == {b"m0", b"m1", b"m2"}
    for _ in range(3):
        method, properties, body = wait_for_message(channel, work, auto_ack=True)
        [death] = properties.headers["x-death"]
        assert (death["queue"], death["reason"], death["count"]) == (work, "rejected", 2)
        assert death["routing-keys"] == [work]
    channel.connection.close()


def test_deaths_in_several_queues_are_listed_most_recent_first(running: Running) -> None:
    channel = running.connect().channel()
    first, second, last = unique("first"), unique("second"), unique("last")
    channel.queue_declare(last)
    channel.queue_declare(
        second, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": last}
    )
    channel.queue_declare(
        first, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": second}
    )
    channel.basic_publish("", first, b"m")
    method, _, _ = wait_for_message(channel, first, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, _, _ = wait_for_message(channel, second, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, properties, _ = wait_for_message(channel, last)
    assert (method.exchange, method.routing_key) == ("", last)
    deaths = properties.headers["x-death"]
    assert [(d["queue"], d["exchange"], d["routing-keys"]) for d in deaths] == [
        (second, "", [second]),
        (first, "", [first]),
    ]
    assert properties.headers["x-first-death-queue"] == first
    assert properties.headers["x-last-death-queue"] == second
    channel.connection.close()


def test_a_missing_dead_letter_exchange_drops_the_message(running: Running) -> None:
    channel = running.connect().channel()
    work = unique("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": unique("absent")})
    channel.basic_publish("", work, b"gone")
    method, _, _ = wait_for_message(channel, work, auto_ack=False)
    channel.basic_nack(method.delivery_tag, requeue=False)
    wait_empty(channel, work)
    channel.connection.close()


def test_requeued_and_acknowledged_messages_are_not_dead_lettered(running: Running) -> None:
    channel = running.connect().channel()
    work, dead = unique("work"), unique("dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    )
    channel.basic_publish("", work, b"m")
    method, _, _ = wait_for_message(channel, work, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = wait_for_message(channel, work, auto_ack=False)
    assert method.redelivered and body == b"m"
    channel.basic_ack(method.delivery_tag)
    assert channel.basic_get(dead, auto_ack=True) == (None, None, None)
    channel.connection.close()


def test_aio_pika_reject_dead_letters(running: Running) -> None:
    work, dlx, dead = unique("work"), unique("dlx"), unique("dead")

    async def scenario() -> tuple[str, str, dict[str, Any], bytes]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(dlx, "fanout")
            dead_queue = await channel.declare_queue(dead)
            await dead_queue.bind(exchange)
            queue = await channel.declare_queue(work, arguments={"x-dead-letter-exchange": dlx})
            await channel.default_exchange.publish(aio_pika.Message(b"bad"), routing_key=work)
            async with queue.iterator() as messages:
                async for message in messages:
                    await message.reject(requeue=False)
                    break
            async with dead_queue.iterator() as messages:
                async for message in messages:
                    await message.ack()
                    return (
                        message.exchange or "",
                        message.routing_key or "",
                        dict(message.headers),
                        message.body,
                    )
        raise AssertionError("no dead letter")

    exchange, key, headers, body = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert (exchange, key, body) == (dlx, work, b"bad")
    [death] = headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == (work, "rejected", 1)
    assert death["routing-keys"] == [work]
