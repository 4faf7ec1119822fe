"""Priority queues (``x-max-priority``, the message ``priority`` property), on both backends.

RabbitMQ (docs/priority.md, ``rabbit_priority_queue``): among a queue's ready messages the
highest priority is delivered first, first in first out within a priority; a message without
the property is priority 0, one above the queue's maximum counts as the maximum; Basic.Get
takes the highest too; a requeued message goes back to its place in its priority; an expired
message is never delivered; drop-head drops the head, the oldest of the highest priority;
redeclaring compares ``x-max-priority``; quorum queues do not take the argument. On Pulsar the
order holds within each consumer's window (``amqpPriorityQueueReadAhead``, docs/compatibility.md,
"Priority queues"); these tests stay inside it.
"""

from __future__ import annotations

import asyncio
import time

import aio_pika
import kombu
import pika
import pytest
from kombu.message import Message as KombuMessage
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    amqp_url,
    channel_closed,
    drain_kombu,
    unique,
    wait_for,
    wait_for_count,
)
from tests.support.priorities import MIX, rabbitmq_order


def publish_all(
    channel: BlockingChannel, queue: str, messages: list[tuple[str, int | None]]
) -> None:
    """Publish with confirms (the channel must be in confirm mode): all stored when it returns."""
    for body, priority in messages:
        channel.basic_publish("", queue, body.encode(), pika.BasicProperties(priority=priority))


def declare_priority_queue(channel: BlockingChannel, maximum: int = 10, **arguments: object) -> str:
    queue = unique("prio")
    channel.queue_declare(queue, arguments={"x-max-priority": maximum, **arguments})
    return queue


def consume(
    channel: BlockingChannel, queue: str, count: int, *, prefetch: int
) -> list[tuple[str, bool]]:
    """Consume ``count`` messages with manual acks and ``prefetch``: (body, redelivered) in
    delivery order."""
    got: list[tuple[str, bool]] = []
    channel.basic_qos(prefetch_count=prefetch)

    def on_message(ch: BlockingChannel, method: object, _props: object, body: bytes) -> None:
        got.append((body.decode(), method.redelivered))  # type: ignore[attr-defined]
        ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    tag = channel.basic_consume(queue, on_message)
    wait_for(lambda: len(got) >= count, channel.connection, timeout=30, what=lambda: f"{got}")
    channel.basic_cancel(tag)
    return got


@pytest.mark.parametrize("prefetch", [1, 5, 50])
def test_a_backlog_is_delivered_highest_priority_first(running: Running, prefetch: int) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel)
    publish_all(channel, queue, MIX)
    got = consume(channel, queue, len(MIX), prefetch=prefetch)
    assert [body for body, _ in got] == rabbitmq_order(MIX, 10)
    assert not any(redelivered for _, redelivered in got)
    assert wait_for_count(channel, queue, 0) == 0
    channel.connection.close()


def test_priorities_above_the_maximum_count_as_the_maximum(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel, maximum=3)
    messages: list[tuple[str, int | None]] = [
        ("low", 2),
        ("nine", 9),
        ("three", 3),
        ("max", 255),
        ("none", None),
    ]
    publish_all(channel, queue, messages)
    got = [body for body, _ in consume(channel, queue, len(messages), prefetch=1)]
    # 9, 3 and 255 are all priority 3 here: first in first out among them.
    assert got == ["nine", "three", "max", "low", "none"]
    channel.connection.close()


def test_messages_without_priority_are_priority_zero(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel, maximum=5)
    messages: list[tuple[str, int | None]] = [("n1", None), ("z", 0), ("n2", None), ("one", 1)]
    publish_all(channel, queue, messages)
    got = [body for body, _ in consume(channel, queue, len(messages), prefetch=1)]
    assert got == ["one", "n1", "z", "n2"]
    channel.connection.close()


def test_basic_get_takes_the_highest_priority(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel)
    publish_all(channel, queue, MIX)
    expected = rabbitmq_order(MIX, 10)
    got, counts = [], []
    for _ in MIX:
        method, _props, body = channel.basic_get(queue, auto_ack=False)
        assert body is not None
        got.append(body.decode())
        counts.append(method.message_count)
        channel.basic_ack(method.delivery_tag)
    assert got == expected
    assert counts[0] == len(MIX) - 1 and counts[-1] == 0
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    channel.connection.close()


def test_a_requeued_message_comes_back_before_lower_priorities(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel)
    publish_all(channel, queue, [("low1", 1), ("high", 9), ("low2", 1), ("mid", 5)])
    channel.basic_qos(prefetch_count=1)
    got: list[tuple[str, bool]] = []
    rejected: list[str] = []

    def on_message(ch: BlockingChannel, method: object, _props: object, body: bytes) -> None:
        name = body.decode()
        got.append((name, method.redelivered))  # type: ignore[attr-defined]
        if name == "high" and not rejected:
            rejected.append(name)
            ch.basic_reject(method.delivery_tag, requeue=True)  # type: ignore[attr-defined]
        else:
            ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    channel.basic_consume(queue, on_message)
    wait_for(lambda: len(got) >= 5, channel.connection, timeout=30, what=lambda: f"{got}")
    assert got == [
        ("high", False),
        ("high", True),  # back at its place in its priority, marked redelivered
        ("mid", False),
        ("low1", False),
        ("low2", False),
    ]
    channel.connection.close()


def test_an_expired_message_is_never_delivered_whatever_its_priority(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel, **{"x-message-ttl": 600_000})
    channel.basic_publish("", queue, b"low", pika.BasicProperties(priority=1))
    channel.basic_publish(
        "", queue, b"urgent-but-stale", pika.BasicProperties(priority=9, expiration="200")
    )
    channel.basic_publish("", queue, b"mid", pika.BasicProperties(priority=5))
    published = time.time()
    wait_for(lambda: time.time() > published + 0.3, channel.connection)
    got = [body for body, _ in consume(channel, queue, 2, prefetch=1)]
    assert got == ["mid", "low"]
    assert wait_for_count(channel, queue, 0) == 0
    channel.connection.close()


def test_drop_head_drops_the_highest_priority(running: Running) -> None:
    # rabbit_priority_queue:drop takes the head of the highest non-empty priority, and the
    # priority page warns of it: a full priority queue drops its most urgent message.
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = declare_priority_queue(channel, maximum=5, **{"x-max-length": 2})
    publish_all(channel, queue, [("a", 1), ("b", 5), ("c", 3)])
    assert wait_for_count(channel, queue, 2, timeout=20) == 2
    got = [body for body, _ in consume(channel, queue, 2, prefetch=1)]
    assert got == ["c", "a"]
    channel.connection.close()


def test_redeclare_compares_max_priority(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = declare_priority_queue(channel)
    channel.queue_declare(queue, arguments={"x-max-priority": 10})  # equivalent
    where = f"for queue '{queue}' in vhost '/'"
    with channel_closed(
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' {where}: "
        "received '5' but current is '10'",
    ):
        connection.channel().queue_declare(queue, arguments={"x-max-priority": 5})
    with channel_closed(
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' {where}: "
        "received none but current is the value '10' of type 'signedint'",
    ):
        connection.channel().queue_declare(queue)
    other = unique("plain")
    channel = connection.channel()
    channel.queue_declare(other)
    with channel_closed(
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue '{other}' in "
        "vhost '/': received the value '3' of type 'signedint' but current is none",
    ):
        connection.channel().queue_declare(other, arguments={"x-max-priority": 3})
    connection.close()


def test_quorum_queues_take_no_max_priority(running: Running) -> None:
    connection = running.connect()
    queue = unique("qq")
    with channel_closed(
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{queue}' in vhost '/' "
        "of queue type rabbit_quorum_queue",
    ):
        connection.channel().queue_declare(
            queue, durable=True, arguments={"x-queue-type": "quorum", "x-max-priority": 5}
        )
    connection.close()


def test_a_plain_queue_ignores_priorities(running: Running) -> None:
    channel = running.connect().channel()
    channel.confirm_delivery()
    queue = unique("fifo")
    channel.queue_declare(queue)
    publish_all(channel, queue, MIX)
    got = [body for body, _ in consume(channel, queue, len(MIX), prefetch=1)]
    assert got == [body for body, _ in MIX]
    channel.connection.close()


@pytest.mark.parametrize("prefetch", [1, 20])
def test_aio_pika_consumes_by_priority(running: Running, prefetch: int) -> None:
    queue_name = unique("aio-prio")

    async def scenario() -> list[tuple[str, int | None]]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()  # publisher confirms by default
            queue = await channel.declare_queue(queue_name, arguments={"x-max-priority": 10})
            for body, priority in MIX:
                await channel.default_exchange.publish(
                    aio_pika.Message(body.encode(), priority=priority), routing_key=queue_name
                )
            await channel.set_qos(prefetch_count=prefetch)
            got: list[tuple[str, int | None]] = []
            async with queue.iterator() as messages:
                async for message in messages:
                    got.append((message.body.decode(), message.priority))
                    await message.ack()
                    if len(got) == len(MIX):
                        break
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [body for body, _ in got] == rabbitmq_order(MIX, 10)
    # The property is delivered as published (aio-pika reads a missing one as 0).
    assert {body: priority or 0 for body, priority in got} == {b: p or 0 for b, p in MIX}


def test_kombu_celery_style_priorities_through_a_direct_exchange(running: Running) -> None:
    """kombu as Celery uses it: ``Queue(max_priority=…)`` declares ``x-max-priority``, tasks
    are published with ``priority`` through a direct exchange, a worker consumes with a small
    prefetch (Celery's prefetch multiplier)."""
    exchange = kombu.Exchange(unique("tasks"), type="direct", durable=True)
    queue = kombu.Queue(
        unique("celery"), exchange, routing_key="celery", durable=True, max_priority=10
    )
    with kombu.Connection(amqp_url(running.port)) as connection:
        producer = kombu.Producer(connection.channel(), exchange=exchange, serializer="json")
        for body, priority in MIX:
            producer.publish(
                {"task": body}, routing_key="celery", declare=[queue], priority=priority or 0
            )
        seen: list[str] = []

        def on_task(body: dict[str, str], message: KombuMessage) -> None:
            seen.append(body["task"])
            message.ack()

        with kombu.Consumer(
            connection.channel(),
            queues=[queue],
            callbacks=[on_task],
            accept=["json"],
            prefetch_count=4,
        ):
            drain_kombu(connection, lambda: len(seen) == len(MIX), timeout=30)
    assert seen == rabbitmq_order(MIX, 10)


def test_two_consumers_share_a_backlog_each_message_once(running: Running) -> None:
    """Competing consumers (each holding its own window on Pulsar): every message is delivered
    and acknowledged exactly once, the requeued ones included."""
    connection = running.connect()
    publisher = connection.channel()
    publisher.confirm_delivery()
    queue = declare_priority_queue(publisher, maximum=3)
    messages = [(f"m{n}", n % 4) for n in range(200)]
    publish_all(publisher, queue, [(body, priority) for body, priority in messages])
    seen: dict[str, list[str]] = {"a": [], "b": []}
    requeued: set[str] = set()

    def consumer(name: str) -> None:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=2)

        def on_message(ch: BlockingChannel, method: object, _props: object, body: bytes) -> None:
            text = body.decode()
            tag = method.delivery_tag  # type: ignore[attr-defined]
            if text.endswith("7") and text not in requeued:  # every tenth goes back once
                requeued.add(text)
                ch.basic_nack(tag, requeue=True)
                return
            seen[name].append(text)
            ch.basic_ack(tag)

        channel.basic_consume(queue, on_message)

    consumer("a")
    consumer("b")
    wait_for(
        lambda: len(seen["a"]) + len(seen["b"]) >= len(messages),
        connection,
        timeout=60,
        what=lambda: f"{len(seen['a'])} + {len(seen['b'])} of {len(messages)}",
    )
    everything = seen["a"] + seen["b"]
    assert sorted(everything) == sorted(body for body, _ in messages)  # once each
    assert requeued == {body for body, _ in messages if body.endswith("7")}
    connection.close()
