"""RabbitMQ's behaviour end to end with real clients, on both backends.

Every scenario runs over the in-memory backend (the channel logic alone) and over the Pulsar
backend on the local stack (the mapping), each Pulsar run in a namespace of its own: delivery
tags, prefetch, acks and requeues, confirms, returns, routing and entity rules.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import aio_pika
import kombu
import pika
import pika.exceptions
import pytest
import trio
from pamqp import body, header
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from tests.support.clients import unique
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config
from tests.support.scripted_client import ScriptedClient, commands


@pytest.fixture(params=["memory", pytest.param("pulsar", marks=pytest.mark.integration)])
def gateway(request: pytest.FixtureRequest) -> Iterator[GatewayInThread]:
    if request.param == "memory":
        with GatewayInThread(backend=MemoryBackend()) as running:
            yield running
        return
    stack = request.getfixturevalue("pulsar_stack")
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with GatewayInThread(backend_factory=backend_factory(config)) as running:
            yield running


@pytest.fixture
def channel(gateway: GatewayInThread) -> Iterator[BlockingChannel]:
    connection = connect(gateway)
    yield connection.channel()
    if connection.is_open:
        connection.close()


def connect(gateway: GatewayInThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(host="127.0.0.1", port=gateway.port, connection_attempts=1)
    )


def test_reference_smoke_scenario(channel: BlockingChannel) -> None:
    channel.queue_declare("test-queue")
    channel.basic_publish(exchange="", routing_key="test-queue", body=b"test")
    _, _, body = channel.basic_get(queue="test-queue", auto_ack=True)
    assert body == b"test"
    assert channel.basic_get(queue="test-queue", auto_ack=True) == (None, None, None)
    channel.queue_delete("test-queue")


def test_properties_and_headers_survive(channel: BlockingChannel) -> None:
    channel.queue_declare("props")
    sent = pika.BasicProperties(
        content_type="application/json",
        headers={"int": 7, "str": "x", "nested": {"a": [1, "b"]}, "flag": True},
        delivery_mode=2,
        priority=3,
        correlation_id="c-1",
        message_id="m-1",
        timestamp=1_700_000_000,
    )
    channel.basic_publish("", "props", b"{}", sent)
    _, received, body = channel.basic_get("props", auto_ack=True)
    assert body == b"{}"
    for name in ("content_type", "headers", "delivery_mode", "priority", "correlation_id"):
        assert getattr(received, name) == getattr(sent, name), name
    assert received.timestamp == sent.timestamp


def test_server_named_queue(channel: BlockingChannel) -> None:
    result = channel.queue_declare("", exclusive=True)
    assert result.method.queue.startswith("amq.gen-")


def test_publisher_confirms_and_mandatory_return(gateway: GatewayInThread) -> None:
    connection = connect(gateway)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("confirmed")
    channel.basic_publish("", "confirmed", b"one", mandatory=True)  # raises if nacked
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", "nowhere", b"lost", mandatory=True)
    connection.close()


def test_return_comes_before_the_confirm(gateway: GatewayInThread) -> None:
    async def scenario() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", gateway.port)
        client = ScriptedClient(stream)
        await client.handshake()
        await client.open_channel(1)
        await client.send(commands.Confirm.Select(), 1)
        await client.expect(commands.Confirm.SelectOk, 1)
        await client.send(
            commands.Basic.Publish(exchange="", routing_key="nowhere", mandatory=True), 1
        )
        await client.send(header.ContentHeader(body_size=2), 1)
        await client.send(body.ContentBody(b"hi"), 1)
        returned = await client.expect(commands.Basic.Return, 1)
        assert returned.reply_code == 312
        await client.expect(header.ContentHeader, 1)
        await client.expect(body.ContentBody, 1)
        ack = await client.expect(commands.Basic.Ack, 1)
        assert ack.delivery_tag == 1
        await stream.aclose()

    trio.run(scenario)


def test_prefetch_limits_unacked_deliveries(channel: BlockingChannel) -> None:
    channel.queue_declare("work")
    for n in range(5):
        channel.basic_publish("", "work", str(n).encode())
    channel.basic_qos(prefetch_count=2)
    got: list[int] = []
    channel.basic_consume("work", lambda ch, m, p, b: got.append(m.delivery_tag))
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.05)
    # Give the gateway every chance to overstep the limit before checking it held.
    channel.connection.process_data_events(time_limit=0.3)
    assert got == [1, 2]
    channel.basic_ack(delivery_tag=2, multiple=True)
    deadline = time.monotonic() + 5
    while len(got) < 4 and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.05)
    assert got == [1, 2, 3, 4]


def test_nack_requeues_with_redelivered_flag(channel: BlockingChannel) -> None:
    channel.queue_declare("retry")
    channel.basic_publish("", "retry", b"again")
    method, _, _ = channel.basic_get("retry")
    assert method.redelivered is False
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get("retry")
    assert body == b"again" and method.redelivered is True
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert channel.basic_get("retry") == (None, None, None)


def test_unknown_delivery_tag_is_406(channel: BlockingChannel) -> None:
    channel.queue_declare("tags")
    channel.basic_ack(delivery_tag=42)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("tags", passive=True)
    assert closed.value.reply_code == 406
    assert "unknown delivery tag 42" in closed.value.reply_text


def test_unacked_messages_return_when_the_channel_closes(gateway: GatewayInThread) -> None:
    connection = connect(gateway)
    first = connection.channel()
    first.queue_declare("held")
    first.basic_publish("", "held", b"m")
    method, _, _ = first.basic_get("held")
    assert method is not None
    first.close()
    second = connection.channel()
    method, _, body = second.basic_get("held", auto_ack=True)
    assert body == b"m" and method.redelivered is True
    connection.close()


def test_inequivalent_redeclare_is_406(channel: BlockingChannel) -> None:
    channel.queue_declare("q-durable", durable=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("q-durable", durable=False)
    assert closed.value.reply_code == 406
    assert "inequivalent arg 'durable' for queue 'q-durable' in vhost '/'" in (
        closed.value.reply_text
    )


def test_reserved_names_and_missing_entities(gateway: GatewayInThread) -> None:
    connection = connect(gateway)
    for action, code in (
        (lambda ch: ch.exchange_declare("amq.mine", "direct"), 403),
        (lambda ch: ch.queue_declare("missing", passive=True), 404),
        (lambda ch: ch.basic_publish("no-such-exchange", "k", b""), 404),
    ):
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            action(channel)
            channel.queue_declare("", exclusive=True)  # a round trip to surface async errors
        assert closed.value.reply_code == code
    connection.close()


def test_exclusive_queue_is_locked_to_its_connection(gateway: GatewayInThread) -> None:
    owner = connect(gateway)
    owner.channel().queue_declare("mine", exclusive=True)
    other = connect(gateway)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        other.channel().queue_declare("mine", passive=True)
    assert closed.value.reply_code == 405
    owner.close()
    # The owner is gone, and its exclusive queue with it.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        other.channel().queue_declare("mine", passive=True)
    assert closed.value.reply_code == 404
    other.close()


def test_topic_and_fanout_routing(channel: BlockingChannel) -> None:
    channel.exchange_declare("logs", "topic")
    channel.exchange_declare("all", "fanout")
    channel.queue_declare("errors")
    channel.queue_declare("everything")
    channel.queue_bind("errors", "logs", "*.error")
    channel.queue_bind("everything", "logs", "#")
    channel.queue_bind("everything", "all")
    channel.basic_publish("logs", "db.error", b"e")
    channel.basic_publish("logs", "db.info", b"i")
    channel.basic_publish("all", "ignored", b"f")
    bodies = []
    while (message := channel.basic_get("everything", auto_ack=True))[2] is not None:
        bodies.append(message[2])
    # Order holds per topic (exchange + routing key), not across them: the reference mapping
    # gives each key its own Pulsar topic (docs/mapping.md, "Ordering").
    assert sorted(bodies) == [b"e", b"f", b"i"]
    assert channel.basic_get("errors", auto_ack=True)[2] == b"e"
    assert channel.basic_get("errors", auto_ack=True)[2] is None


def test_deleting_a_consumed_queue_cancels_its_consumers(gateway: GatewayInThread) -> None:
    consumer_connection = connect(gateway)
    channel = consumer_connection.channel()
    channel.queue_declare("doomed")
    cancelled: list[object] = []
    channel.basic_consume("doomed", lambda *args: None)
    channel.add_on_cancel_callback(cancelled.append)
    admin = connect(gateway)
    admin.channel().queue_delete("doomed")
    deadline = time.monotonic() + 5
    while not cancelled and time.monotonic() < deadline:
        consumer_connection.process_data_events(time_limit=0.05)
    assert cancelled, "the consumer should have received Basic.Cancel"
    admin.close()
    consumer_connection.close()


def test_delete_ok_comes_before_the_cancel_of_its_own_consumer(gateway: GatewayInThread) -> None:
    """RabbitMQ's order (rabbitmq-server 3.10, probed): Queue.Delete-Ok, then Basic.Cancel of
    the deleting channel's own consumer. amqplib's suite closes the connection on the Cancel
    and failed here, its Delete-Ok not read yet when the Cancel came first (issue 34)."""

    async def scenario() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", gateway.port)
        client = ScriptedClient(stream)
        await client.handshake(
            capabilities={"consumer_cancel_notify": True, "authentication_failure_close": True}
        )
        await client.open_channel(1)
        queue = unique("deleted-under-its-consumer")
        await client.send(commands.Queue.Declare(queue=queue), 1)
        await client.expect(commands.Queue.DeclareOk, 1)
        await client.send(commands.Basic.Consume(queue=queue, consumer_tag="c"), 1)
        await client.expect(commands.Basic.ConsumeOk, 1)
        await client.send(commands.Queue.Delete(queue=queue), 1)
        await client.expect(commands.Queue.DeleteOk, 1)
        cancel = await client.expect(commands.Basic.Cancel, 1)
        assert cancel.consumer_tag == "c"
        await client.send(
            commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        await client.expect(commands.Connection.CloseOk)
        await stream.aclose()

    trio.run(scenario)


def test_qos_prefetch_size_is_not_implemented(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        channel.basic_qos(prefetch_size=1024)
    assert closed.value.reply_code == 540


def test_invalid_vhost_is_530(gateway: GatewayInThread) -> None:
    params = pika.ConnectionParameters(
        host="127.0.0.1", port=gateway.port, virtual_host="a/b/c", connection_attempts=1
    )
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(params)
    # The gateway is still serving.
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5):
        pass


def test_aio_pika_confirmed_publish_and_consume(gateway: GatewayInThread) -> None:
    async def scenario() -> list[bytes]:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{gateway.port}/")
        async with connection:
            channel = await connection.channel()  # publisher confirms on by default
            queue = await channel.declare_queue("aio", durable=True)
            for n in range(20):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"m{n}".encode()), routing_key="aio"
                )
            bodies: list[bytes] = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        bodies.append(message.body)
                    if len(bodies) == 20:
                        break
            return bodies

    assert asyncio.run(scenario()) == [f"m{n}".encode() for n in range(20)]


def test_kombu_simple_queue_round_trip(gateway: GatewayInThread) -> None:
    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{gateway.port}//") as connection:
        queue = connection.SimpleQueue("kombu-simple")
        queue.put({"task": "add", "args": [1, 2]})
        message = queue.get(block=True, timeout=5)
        assert message.payload == {"task": "add", "args": [1, 2]}
        message.ack()
        queue.close()
