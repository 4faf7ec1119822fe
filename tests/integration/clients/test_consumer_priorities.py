"""Consumer priorities (``x-priority`` on Basic.Consume) with real clients, on both backends.

RabbitMQ (docs "Consumer Priorities", ``rabbit_queue_consumers``): a message goes to the
highest-priority consumer that is not blocked (its prefetch full), round-robin among equals;
lower ones get messages only while every higher one is blocked; the default is 0, negative
priorities are allowed; any AMQP integer type. On Pulsar the broker applies it (Pulsar's
consumer priority level, docs/compatibility.md "Consumer priorities"): a consumer counts as
blocked once what it read ahead is full too, so a blocked higher-priority consumer holds up to
its read-ahead beyond its prefetch; the tests allow for that window where it shows.
"""

from __future__ import annotations

import asyncio
import time

import aio_pika
import pytest

from tests.integration.clients.conftest import Running
from tests.support.clients import DEFAULT_TIMEOUT, amqp_url, unique
from tests.support.consumers import bodies, consume, publish, pump, settle_window


def test_the_highest_priority_gets_everything_while_it_has_credit(running: Running) -> None:
    queue = unique("prio")
    low_connection, high_connection, producer = (running.connect() for _ in range(3))
    producer.channel().queue_declare(queue)
    low = consume(low_connection.channel(), queue, auto_ack=True)  # registered first
    high = consume(high_connection.channel(), queue, auto_ack=True, arguments={"x-priority": 10})
    sent = bodies(30)
    publish(producer.channel(), queue, sent)
    pump([low_connection, high_connection], lambda: len(high.got) == 30, what="30 at the high")
    settle_window([low_connection, high_connection])
    assert high.bodies == sent
    assert low.got == []
    for connection in (low_connection, high_connection, producer):
        connection.close()


def test_lower_priorities_get_messages_while_the_higher_one_is_blocked(
    running: Running,
) -> None:
    queue = unique("prio")
    low_connection, high_connection, producer = (running.connect() for _ in range(3))
    producer.channel().queue_declare(queue)
    high = consume(high_connection.channel(), queue, prefetch=2, arguments={"x-priority": 1})
    low = consume(low_connection.channel(), queue, auto_ack=True)
    sent = bodies(20)
    publish(producer.channel(), queue, sent)
    # The high one never acks: blocked after its prefetch, the rest goes to the low one (on
    # Pulsar but what the high one read ahead: its prefetch again, per buffer).
    window = 4 if running.pulsar else 0
    connections = [low_connection, high_connection]
    pump(connections, lambda: len(low.got) >= 18 - window, what=lambda: f"low got {low.got}")
    settle_window(connections)
    assert len(high.got) == 2
    assert len(low.got) >= 18 - window
    # The high one goes: what it held (and read ahead) comes back, to the low one.
    high_connection.close()
    pump([low_connection], lambda: len(low.got) == 20, what=lambda: f"all at the low: {low.got}")
    assert sorted(low.bodies) == sent
    redelivered = {body for body, flag, _ in low.got if flag}
    assert redelivered == {body for body, _, _ in high.got}
    low_connection.close()
    producer.close()


def test_equal_priorities_share_and_lower_ones_wait(running: Running) -> None:
    queue = unique("prio")
    connections = [running.connect() for _ in range(4)]
    *consumers_of, producer = connections
    producer.channel().queue_declare(queue)
    first = consume(consumers_of[0].channel(), queue, auto_ack=True, arguments={"x-priority": 5})
    second = consume(consumers_of[1].channel(), queue, auto_ack=True, arguments={"x-priority": 5})
    lowest = consume(consumers_of[2].channel(), queue, auto_ack=True)
    count = 100
    publish(producer.channel(), queue, bodies(count))
    pump(
        consumers_of,
        lambda: len(first.got) + len(second.got) == count,
        what=lambda: f"{count} at the two: {len(first.got)} + {len(second.got)}",
    )
    settle_window(consumers_of)
    assert first.got and second.got  # round-robin among equals
    assert lowest.got == []
    for connection in connections:
        connection.close()


@pytest.mark.parametrize("low", [-1, -(2**20)])
def test_negative_priorities_come_after_the_default(running: Running, low: int) -> None:
    queue = unique("prio")
    below, default, producer = (running.connect() for _ in range(3))
    producer.channel().queue_declare(queue)
    negative = consume(below.channel(), queue, auto_ack=True, arguments={"x-priority": low})
    plain = consume(default.channel(), queue, auto_ack=True)
    publish(producer.channel(), queue, bodies(10))
    pump(
        [below, default],
        lambda: len(plain.got) == 10,
        what=lambda: f"10 at the default priority: {plain.bodies} {negative.bodies}",
    )
    settle_window([below, default])
    assert negative.got == []
    for connection in (below, default, producer):
        connection.close()


def test_aio_pika_priority_argument(running: Running) -> None:
    async def scenario() -> None:
        url = amqp_url(running.port)
        name = unique("prio")
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue(name)
            got: dict[str, list[bytes]] = {"low": [], "high": []}

            async def on_low(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got["low"].append(message.body)

            async def on_high(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got["high"].append(message.body)

            await queue.consume(on_low, no_ack=True)
            await queue.consume(on_high, no_ack=True, arguments={"x-priority": 3})
            for body in bodies(20):
                await channel.default_exchange.publish(aio_pika.Message(body), name)
            deadline = time.monotonic() + DEFAULT_TIMEOUT
            while len(got["high"]) < 20:
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.02)
            assert got["low"] == []

    asyncio.run(scenario())
