"""Stream queues (``x-queue-type: stream``) over AMQP 0-9-1, with pika and aio-pika, on both
backends: what RabbitMQ 4.x answers (``rabbit_stream_queue``, docs/streams.md), and what
docs/compatibility.md ("Stream queues") says the gateway does.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import httpx
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import amqp_url, channel_closed, connection_closed, unique

STREAM = {"x-queue-type": "stream"}
DEADLINE = 30.0


def declare_stream(channel: BlockingChannel, **arguments: Any) -> str:
    name = unique("stream")
    channel.queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    return name


def publish(channel: BlockingChannel, stream: str, bodies: list[bytes], **headers: Any) -> None:
    channel.confirm_delivery()
    for body in bodies:
        properties = pika.BasicProperties(headers=headers or None)
        channel.basic_publish("", stream, body, properties)


def read(
    channel: BlockingChannel,
    stream: str,
    count: int,
    arguments: dict[str, Any] | None = None,
    *,
    prefetch: int = 10,
    settle: str = "ack",
) -> list[tuple[bytes, int, bool]]:
    """``count`` deliveries of a new consumer: (body, x-stream-offset, redelivered)."""
    channel.basic_qos(prefetch_count=prefetch)
    got: list[tuple[bytes, int, bool]] = []

    def on_message(ch: BlockingChannel, method: Any, properties: Any, body: bytes) -> None:
        got.append((body, properties.headers["x-stream-offset"], method.redelivered))
        if settle == "ack":
            ch.basic_ack(method.delivery_tag)
        elif settle == "nack":
            ch.basic_nack(method.delivery_tag, requeue=True)
        else:
            ch.basic_reject(method.delivery_tag, requeue=True)

    tag = channel.basic_consume(stream, on_message, arguments=arguments or {})
    deadline = time.monotonic() + DEADLINE
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count}: {got}"
        channel.connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    return got


def nothing_more(channel: BlockingChannel, stream: str, arguments: dict[str, Any]) -> None:
    """A consumer with ``arguments`` gets nothing within half a second."""
    got: list[bytes] = []
    channel.basic_qos(prefetch_count=10)
    tag = channel.basic_consume(stream, lambda *a: got.append(a[3]), arguments=arguments)
    channel.connection.process_data_events(time_limit=0.5)
    channel.basic_cancel(tag)
    assert got == []


@pytest.fixture
def ch(running: Running) -> Iterator[BlockingChannel]:
    connection = running.connect()
    yield connection.channel()
    if connection.is_open:
        connection.close()


def where(name: str) -> str:
    return f"queue '{name}' in vhost '/'"


# ------------------------------------------------------------------ declare


@pytest.mark.parametrize(
    ("properties", "prop"),
    [
        ({"durable": True, "auto_delete": True}, "auto-delete"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": False}, "non-durable"),
    ],
)
def test_a_stream_is_durable_not_exclusive_not_auto_delete(
    running: Running, properties: dict[str, bool], prop: str
) -> None:
    channel = running.connect().channel()
    name = unique("stream")
    text = f"PRECONDITION_FAILED - invalid property '{prop}' for {where(name)}"
    with channel_closed(406, text):
        channel.queue_declare(name, arguments=STREAM, **properties)


ARG = "invalid arg '{key}' for {{}}: {reason}"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"x-max-age": "7W"}, ARG.format(key="x-max-age", reason="invalid_max_age")),
        ({"x-max-age": "0D"}, ARG.format(key="x-max-age", reason="invalid_max_age")),
        (
            {"x-max-length-bytes": -1},
            ARG.format(key="x-max-length-bytes", reason="{{value_negative,-1}}"),
        ),
        (
            {"x-initial-cluster-size": 0},
            ARG.format(key="x-initial-cluster-size", reason="{{value_zero,0}}"),
        ),
        (
            {"x-max-length": 10},
            "invalid arg 'x-max-length' for {} of queue type rabbit_stream_queue",
        ),
        (
            {"x-stream-max-segment-size-bytes": 3_000_000_001},
            "Exceeded max value for x-stream-max-segment-size-bytes",
        ),
        ({"x-stream-filter-size-bytes": 15}, "Invalid value for  x-stream-filter-size-bytes"),
        ({"x-stream-filter-size-bytes": 256}, "Invalid value for  x-stream-filter-size-bytes"),
    ],
)
def test_stream_arguments_are_validated_as_rabbitmq_does(
    running: Running, arguments: dict[str, Any], text: str
) -> None:
    channel = running.connect().channel()
    name = unique("stream")
    with channel_closed(406, "PRECONDITION_FAILED - " + text.format(where(name))):
        channel.queue_declare(name, durable=True, arguments={**STREAM, **arguments})


def test_declare_and_redeclare_a_stream_with_its_arguments(ch: BlockingChannel) -> None:
    arguments = {
        "x-max-age": "7D",
        "x-max-length-bytes": 20_000_000_000,
        "x-stream-max-segment-size-bytes": 100_000_000,
        "x-stream-filter-size-bytes": 32,
        "x-initial-cluster-size": 3,
        "x-queue-leader-locator": "balanced",
    }
    name = declare_stream(ch, **arguments)
    ok = ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments}).method
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    with channel_closed(406):  # inequivalent arg 'x-max-age'
        ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments, "x-max-age": "1D"})


# ------------------------------------------------------------------ consuming


def test_first_reads_everything_in_order_and_acks_remove_nothing(
    running: Running, ch: BlockingChannel
) -> None:
    name = declare_stream(ch)
    bodies = [f"m{i}".encode() for i in range(20)]
    publish(ch, name, bodies)
    got = read(ch, name, 20, {"x-stream-offset": "first"}, prefetch=3)
    assert [body for body, _, _ in got] == bodies
    offsets = [offset for _, offset, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == 20
    assert not any(redelivered for _, _, redelivered in got)
    # Another consumer reads the same messages: nothing was removed by the acks.
    again = read(running.connect().channel(), name, 20, {"x-stream-offset": "first"})
    assert again == got
    count = ch.queue_declare(name, passive=True).method
    deadline = time.monotonic() + DEADLINE
    while count.message_count != 20 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.1)
        count = ch.queue_declare(name, passive=True).method
    assert (count.message_count, count.consumer_count) == (20, 0)


def test_two_consumers_read_independently(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"a", b"b", b"c"])
    other = running.connect().channel()
    first = read(ch, name, 3, {"x-stream-offset": "first"}, prefetch=1)
    second = read(other, name, 3, {"x-stream-offset": "first"}, prefetch=2)
    assert [b for b, _, _ in first] == [b for b, _, _ in second] == [b"a", b"b", b"c"]


def test_next_is_the_default_and_skips_what_is_there(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"old"])
    got: list[bytes] = []
    consumer = running.connect().channel()
    consumer.basic_qos(prefetch_count=5)
    consumer.basic_consume(name, lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
    consumer.connection.process_data_events(time_limit=0.2)
    publish(ch, name, [b"new"])
    deadline = time.monotonic() + DEADLINE
    while not got and time.monotonic() < deadline:
        consumer.connection.process_data_events(time_limit=0.1)
    consumer.connection.process_data_events(time_limit=0.3)
    assert got == [b"new"]


def test_last_starts_at_the_last_message(ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"1", b"2", b"3"])
    assert [b for b, _, _ in read(ch, name, 1, {"x-stream-offset": "last"})] == [b"3"]


def test_restart_from_the_last_seen_offset_plus_one(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [f"m{i}".encode() for i in range(10)])
    first = read(ch, name, 4, {"x-stream-offset": "first"}, prefetch=1)
    resume = first[-1][1] + 1
    rest = read(running.connect().channel(), name, 6, {"x-stream-offset": resume})
    assert [b for b, _, _ in rest] == [f"m{i}".encode() for i in range(4, 10)]
    # The same offset again (as the long a Java client sends) reads the same message.
    again = read(running.connect().channel(), name, 1, {"x-stream-offset": first[2][1]})
    assert again[0][:2] == first[2][:2]
    # An offset before the log's start reads from the first message (RabbitMQ clamps).
    assert read(ch, name, 1, {"x-stream-offset": 0})[0][0] == b"m0"


def test_timestamp_and_interval_offsets(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"before"])
    # AMQP timestamps are whole seconds: wait for the next one to start (time must pass).
    boundary = int(time.time()) + 1
    while time.time() < boundary + 0.05:
        ch.connection.process_data_events(time_limit=0.05)
    publish(ch, name, [b"after"])
    since = datetime.datetime.fromtimestamp(boundary, tz=datetime.UTC)
    assert [b for b, _, _ in read(ch, name, 1, {"x-stream-offset": since})] == [b"after"]
    # An interval counts back from now (x-max-age's syntax).
    recent = read(running.connect().channel(), name, 2, {"x-stream-offset": "1h"})
    assert [b for b, _, _ in recent] == [b"before", b"after"]
    with channel_closed(
        406, f"PRECONDITION_FAILED - failed consuming from stream {where(name)}: invalid_max_age"
    ):
        read(ch, name, 1, {"x-stream-offset": "soon"})


def test_nack_and_reject_with_requeue_only_give_credit(
    running: Running, ch: BlockingChannel
) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"1", b"2", b"3"])
    nacked = read(ch, name, 3, {"x-stream-offset": "first"}, prefetch=1, settle="nack")
    assert [(b, r) for b, _, r in nacked] == [(b"1", False), (b"2", False), (b"3", False)]
    rejected = read(
        running.connect().channel(),
        name,
        3,
        {"x-stream-offset": "first"},
        prefetch=1,
        settle="reject",
    )
    assert [b for b, _, _ in rejected] == [b"1", b"2", b"3"]


def test_the_prefetch_bounds_unacknowledged_deliveries(ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [f"m{i}".encode() for i in range(6)])
    held: list[int] = []
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(
        name, lambda c, m, p, b: held.append(m.delivery_tag), arguments={"x-stream-offset": "first"}
    )
    deadline = time.monotonic() + DEADLINE
    while len(held) < 2 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.1)
    ch.connection.process_data_events(time_limit=0.3)
    assert len(held) == 2
    ch.basic_ack(held[-1], multiple=True)
    while len(held) < 4 and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.1)
    ch.connection.process_data_events(time_limit=0.3)
    assert len(held) == 4


def test_filtering_by_x_stream_filter_value(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"ca-1"], **{"x-stream-filter-value": "california"})
    publish(ch, name, [b"tx-1"], **{"x-stream-filter-value": "texas"})
    publish(ch, name, [b"none"])
    publish(ch, name, [b"ca-2"], **{"x-stream-filter-value": "california"})
    got = read(ch, name, 2, {"x-stream-offset": "first", "x-stream-filter": "california"})
    assert [b for b, _, _ in got] == [b"ca-1", b"ca-2"]
    arguments = {
        "x-stream-offset": "first",
        "x-stream-filter": ["texas"],
        "x-stream-match-unfiltered": True,
    }
    both = read(running.connect().channel(), name, 2, arguments)
    assert [b for b, _, _ in both] == [b"tx-1", b"none"]


# ------------------------------------------------------------------ refusals


def test_a_consumer_needs_a_prefetch(ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    text = f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {where(name)}"
    with channel_closed(406, text):
        ch.basic_consume(name, lambda *a: None)
        ch.connection.process_data_events(time_limit=0.5)


def test_automatic_acknowledgement_is_refused(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = declare_stream(channel)
    channel.basic_qos(prefetch_count=10)
    text = f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {where(name)}"
    with connection_closed(540, text):
        channel.basic_consume(name, lambda *a: None, auto_ack=True)
        connection.process_data_events(time_limit=0.5)


def test_global_qos_is_refused(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = declare_stream(channel)
    channel.basic_qos(prefetch_count=10)
    channel.basic_qos(prefetch_count=10, global_qos=True)
    with connection_closed(540, f"NOT_IMPLEMENTED - {where(name)} does not support global qos"):
        channel.basic_consume(name, lambda *a: None)
        connection.process_data_events(time_limit=0.5)


def test_basic_get_is_refused(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = declare_stream(channel)
    text = f"NOT_IMPLEMENTED - basic.get not supported by stream queues {where(name)}"
    with connection_closed(540, text):
        channel.basic_get(name)


def test_purge_is_refused(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = declare_stream(channel)
    text = f"NOT_IMPLEMENTED - queue.purge not supported by stream queues {where(name)}"
    with connection_closed(540, text):
        channel.queue_purge(name)


def test_delete_answers_zero_and_cancels_consumers(running: Running, ch: BlockingChannel) -> None:
    name = declare_stream(ch)
    publish(ch, name, [b"1", b"2"])
    consumer = running.connect().channel()
    cancelled: list[Any] = []
    consumer.add_on_cancel_callback(cancelled.append)
    consumer.basic_qos(prefetch_count=10)
    consumer.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": "first"})
    consumer.connection.process_data_events(time_limit=0.2)
    # rabbit_stream_queue:delete ignores if-unused and if-empty and answers 0.
    assert ch.queue_delete(name, if_unused=True, if_empty=True).method.message_count == 0
    deadline = time.monotonic() + DEADLINE
    while not cancelled and time.monotonic() < deadline:
        consumer.connection.process_data_events(time_limit=0.1)
    assert cancelled
    with channel_closed(404):
        ch.queue_declare(name, passive=True)


# ------------------------------------------------------------------ through exchanges


def test_messages_routed_through_an_exchange_reach_the_stream(
    running: Running, ch: BlockingChannel
) -> None:
    name = declare_stream(ch)
    exchange = unique("x")
    ch.exchange_declare(exchange, "direct")
    ch.queue_bind(name, exchange, "k")
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish(exchange, "k", f"x{i}".encode())
    ch.basic_publish("", name, b"direct")
    got = read(ch, name, 6, {"x-stream-offset": "first"})
    bodies = [b for b, _, _ in got]
    assert sorted(bodies) == sorted([f"x{i}".encode() for i in range(5)] + [b"direct"])
    assert [b for b in bodies if b != b"direct"] == [f"x{i}".encode() for i in range(5)]


def test_aio_pika_consumes_a_stream_from_an_offset(running: Running) -> None:
    async def scenario() -> list[tuple[bytes, int, str]]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=50)
            queue = await channel.declare_queue(unique("stream"), durable=True, arguments=STREAM)
            for i in range(5):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"a{i}".encode()), routing_key=queue.name
                )
            got: list[tuple[bytes, int, str]] = []
            async with queue.iterator(arguments={"x-stream-offset": "first"}) as messages:
                async for message in messages:
                    await message.ack()
                    got.append(
                        (
                            message.body,
                            message.headers["x-stream-offset"],
                            message.routing_key or "",
                        )
                    )
                    if len(got) == 5:
                        break
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), DEADLINE))
    assert [body for body, _, _ in got] == [f"a{i}".encode() for i in range(5)]
    assert [offset for _, offset, _ in got] == sorted(offset for _, offset, _ in got)


# ------------------------------------------------------------------ Pulsar


@pytest.mark.parametrize("running", [PULSAR_ONLY], indirect=True)
def test_retention_is_set_on_the_streams_topic(running: Running, ch: BlockingChannel) -> None:
    assert running.namespace is not None
    name = declare_stream(ch, **{"x-max-age": "90s", "x-max-length-bytes": 5_000_000})
    plain = declare_stream(ch)
    namespace = running.namespace
    base = f"{running.web_url}/admin/v2/persistent/{namespace.tenant}/{namespace.namespace}"

    def retention(stream: str) -> dict[str, Any]:
        url = f"{base}/amq.default__{stream}/retention"
        deadline = time.monotonic() + DEADLINE
        while True:
            found = httpx.get(url, params={"applied": "false"}).json()
            if found or time.monotonic() > deadline:
                return found or {}
            time.sleep(0.1)  # topic policies reach the broker through its system topic

    assert retention(name) == {"retentionTimeInMinutes": 2, "retentionSizeInMB": 5}
    assert retention(plain) == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
