"""Messages above Pulsar's maximum message size (5 MiB by default), on both backends: pika's
15 MB publish arrives byte-identical with and without publisher confirms, in order among the
small messages of the same channel, and a message above ``amqpMaxMessageSize`` is refused as
RabbitMQ refuses it (406 PRECONDITION_FAILED "message size N is larger than configured max
size M", a channel error; issue 37 item 2, docs/reliability.md "Large messages").

The gateway here runs with RabbitMQ 4.x's default maximum, 16 MiB (``max_message_size`` in
RabbitMQ's configuration), so that "above the maximum" takes a 16 MiB publish rather than
Starlight's default of 100 MB.

Pulsar stores a large message in chunks of its maxMessageSize, which its bookie must accept
with their headers (``nettyMaxFrameSizeBytes``, scripts/pulsar/standalone.conf). A shared
stack started before that setting was added would refuse them and drop its connection to the
bookie under every other test running: then this module runs on a stack of its own.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.amqp.connection_settings import ConnectionSettings
from gateway.backend.memory import MemoryBackend
from gateway.model.vhost import Namespace
from gateway.server.address import Listener
from gateway.server.settings import ServerSettings
from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import channel_closed, unique, wait_for
from tests.support.gateway_thread import GatewayInThread
from tests.support.own_stack import own_stack
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config
from tests.support.stack_script import load_stack_module

MIB = 1024 * 1024
# RabbitMQ 4.x's default max_message_size.
MAX_MESSAGE = 16 * MIB
# The size of the pika publish: three times Pulsar's 5 MiB, under the maximum.
LARGE = 15 * 1000 * 1000
# A body of the size limit takes a moment through Pulsar (chunks of 5 MiB, each stored).
TIMEOUT = 60.0
# Pulsar's bookkeeper.conf value: 5 MiB and 10 KiB for an entry's headers.
BOOKIE_FRAME = "nettyMaxFrameSizeBytes=5253120"


@pytest.fixture(scope="module")
def large_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The shared stack if its bookie takes a full chunk, else one of this module's own."""
    shared = request.getfixturevalue("pulsar_stack")
    conf = load_stack_module().stack_dir() / "conf" / "standalone.conf"
    if conf.is_file() and BOOKIE_FRAME in conf.read_text().splitlines():
        yield shared
        return
    with own_stack(
        tmp_path_factory.mktemp("large-messages"), broker_config=BOOKIE_FRAME + "\n"
    ) as own:
        yield own


@pytest.fixture(scope="module", params=["memory", PULSAR_ONLY])
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    settings = ServerSettings(
        listeners=(Listener("amqp", "127.0.0.1", 0),),
        connection=replace(ConnectionSettings(), max_message_size=MAX_MESSAGE),
    )
    if request.param == "memory":
        with GatewayInThread(settings, backend=MemoryBackend()) as gateway:
            yield Running(gateway, "memory")
        return
    stack = request.getfixturevalue("large_stack")
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with GatewayInThread(settings, backend_factory=backend_factory(config)) as gateway:
            yield Running(
                gateway, "pulsar", Namespace("public", namespace), stack.broker_url, stack.web_url
            )


@pytest.fixture
def connection(running: Running) -> Iterator[pika.BlockingConnection]:
    opened = running.connect()
    yield opened
    if opened.is_open:
        opened.close()


def body_of(size: int, seed: bytes) -> bytes:
    """``size`` octets that differ all along (a chunk delivered twice, dropped or out of
    place changes the digest), quickly: a SHA-256 counter stream."""
    blocks = (size + 31) // 32
    return b"".join(hashlib.sha256(seed + n.to_bytes(4, "big")).digest() for n in range(blocks))[
        :size
    ]


def consume(
    connection: pika.BlockingConnection, queue: str, count: int
) -> list[tuple[pika.BasicProperties, bytes]]:
    """Consume ``count`` messages from ``queue`` (acknowledging each), in delivery order."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2)
    got: list[tuple[pika.BasicProperties, bytes]] = []

    def on_message(
        ch: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        props: pika.BasicProperties,
        body: bytes,
    ) -> None:
        got.append((props, body))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message)
    wait_for(
        lambda: len(got) >= count,
        connection,
        timeout=TIMEOUT,
        what=lambda: f"{count} deliveries from {queue!r}, got {len(got)}",
    )
    channel.close()
    return got


@pytest.mark.parametrize("confirms", [False, True], ids=["no-confirms", "confirms"])
def test_a_15_mb_message_is_delivered_byte_identical(
    connection: pika.BlockingConnection, confirms: bool
) -> None:
    """Three times Pulsar's maximum message size: stored (in chunks, on Pulsar) and delivered
    whole, with its properties; with confirms it is acked, not nacked."""
    channel = connection.channel()
    queue = unique("large")
    channel.queue_declare(queue)
    if confirms:
        channel.confirm_delivery()  # a nack raises pika's NackError from basic_publish
    body = body_of(LARGE, queue.encode())
    properties = pika.BasicProperties(
        content_type="application/octet-stream",
        headers={"sha256": hashlib.sha256(body).hexdigest()},
    )
    started = time.monotonic()
    channel.basic_publish("", queue, body, properties)
    [(got_properties, got)] = consume(connection, queue, 1)
    elapsed = time.monotonic() - started
    print(f"{LARGE} octets published and delivered in {elapsed:.2f} s (confirms: {confirms})")
    assert len(got) == len(body)
    assert got == body
    assert got_properties.content_type == "application/octet-stream"
    assert got_properties.headers == properties.headers
    channel.queue_delete(queue)


def test_large_and_small_messages_of_one_channel_keep_their_order(
    connection: pika.BlockingConnection,
) -> None:
    """AMQP 0-9-1 §4.7 (and RabbitMQ's guarantee): messages published on one channel to one
    queue are delivered in publish order, whatever their sizes: small, large, small, large,
    small, without waiting for anything between them."""
    channel = connection.channel()
    queue = unique("ordered")
    channel.queue_declare(queue)
    sizes = [10, 6 * MIB, 10, 6 * MIB, 10]
    bodies = [body_of(size, f"{queue}-{n}".encode()) for n, size in enumerate(sizes)]
    for body in bodies:
        channel.basic_publish("", queue, body)
    got = [body for _properties, body in consume(connection, queue, len(bodies))]
    assert [len(body) for body in got] == sizes
    assert got == bodies
    channel.queue_delete(queue)


def test_a_message_of_exactly_the_maximum_is_delivered(
    connection: pika.BlockingConnection,
) -> None:
    channel = connection.channel()
    channel.confirm_delivery()
    queue = unique("maximum")
    channel.queue_declare(queue)
    body = os.urandom(MAX_MESSAGE)
    channel.basic_publish("", queue, body)
    [(_properties, got)] = consume(connection, queue, 1)
    assert got == body
    channel.queue_delete(queue)


@pytest.mark.parametrize("confirms", [False, True], ids=["no-confirms", "confirms"])
def test_a_message_above_the_maximum_is_refused_as_rabbitmq_refuses_it(
    connection: pika.BlockingConnection, confirms: bool
) -> None:
    """RabbitMQ (rabbit_channel's check_msg_size): Channel.Close 406 PRECONDITION_FAILED
    "message size N is larger than configured max size M"; the connection stays open and
    nothing of the message is stored."""
    channel = connection.channel()
    queue = unique("too-large")
    channel.queue_declare(queue)
    if confirms:
        channel.confirm_delivery()
    size = MAX_MESSAGE + 1
    with channel_closed(
        406,
        f"PRECONDITION_FAILED - message size {size} is larger than configured max size "
        f"{MAX_MESSAGE}",
    ):
        channel.basic_publish("", queue, bytes(size))
        channel.queue_declare(queue, passive=True)  # the Close arrives by then at the latest
    other = connection.channel()
    method, _properties, _body = other.basic_get(queue, auto_ack=True)
    assert method is None
    other.queue_delete(queue)


def test_a_requeued_large_message_comes_back_whole(connection: pika.BlockingConnection) -> None:
    """Basic.Reject with requeue, then Basic.Nack with requeue, then the channel closing with
    the message unacknowledged: each time it is delivered again, whole, marked redelivered
    (Pulsar's negative acknowledgement alone would bring back only its last chunk)."""
    channel = connection.channel()
    queue = unique("requeued")
    channel.queue_declare(queue)
    body = body_of(LARGE, queue.encode())
    channel.basic_publish("", queue, body)
    consuming = connection.channel()
    consuming.basic_qos(prefetch_count=1)
    got: list[tuple[bool, bytes]] = []
    tags: list[int] = []

    def on_message(
        _ch: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        _props: pika.BasicProperties,
        body: bytes,
    ) -> None:
        got.append((method.redelivered, body))
        tags.append(method.delivery_tag)

    consuming.basic_consume(queue, on_message)

    def delivered(count: int) -> None:
        wait_for(lambda: len(got) >= count, connection, timeout=TIMEOUT, what=f"{count} deliveries")

    delivered(1)
    consuming.basic_reject(tags[-1], requeue=True)
    delivered(2)
    consuming.basic_nack(tags[-1], requeue=True)
    delivered(3)
    consuming.close()  # unacknowledged: back to the queue
    [(_properties, last)] = consume(connection, queue, 1)
    assert [redelivered for redelivered, _body in got] == [False, True, True]
    assert all(copy == body for _redelivered, copy in got)
    assert last == body
    channel.queue_delete(queue)


def test_large_messages_spread_over_two_consumers_arrive_once_each(
    connection: pika.BlockingConnection,
) -> None:
    """Two consumers of one queue (two Pulsar consumers on its Shared subscription, each
    reading ahead one message): every large message is delivered once, whole (Pulsar gives all
    the chunks of one message to one consumer)."""
    channel = connection.channel()
    queue = unique("spread")
    channel.queue_declare(queue)
    bodies = [body_of(6 * MIB, f"{queue}-{n}".encode()) for n in range(4)]
    got: list[bytes] = []

    def on_message(
        ch: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        _props: pika.BasicProperties,
        body: bytes,
    ) -> None:
        got.append(body)
        ch.basic_ack(method.delivery_tag)

    consumers = [connection.channel() for _ in range(2)]
    for consumer in consumers:
        consumer.basic_qos(prefetch_count=1)
        consumer.basic_consume(queue, on_message)
    for body in bodies:
        channel.basic_publish("", queue, body)
    wait_for(lambda: len(got) >= len(bodies), connection, timeout=TIMEOUT, what="4 deliveries")
    assert sorted(got) == sorted(bodies)
    for consumer in consumers:
        consumer.close()
    channel.queue_delete(queue)
