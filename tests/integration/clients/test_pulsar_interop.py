"""Messages between AMQP and Pulsar: exact AMQP types through the gateway, readable properties
for native Pulsar consumers, sensible AMQP properties for native Pulsar producers."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pulsar
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body

from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import MessageProperties, decode_properties, encode_properties
from gateway.model.naming import topic_for
from gateway.model.vhost import Namespace
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config
from tests.support.scripted_client import ScriptedClient, commands

pytestmark = pytest.mark.integration


class Running:
    def __init__(self, gateway: GatewayInThread, namespace: str, broker_url: str) -> None:
        self.gateway = gateway
        self.namespace = Namespace("public", namespace)
        self.broker_url = broker_url

    def channel(self) -> Any:
        params = pika.ConnectionParameters(
            host="127.0.0.1", port=self.gateway.port, connection_attempts=1
        )
        return pika.BlockingConnection(params).channel()


@pytest.fixture(scope="module")
def running(pulsar_stack: Any) -> Iterator[Running]:
    with fresh_namespace(pulsar_stack) as namespace:
        config = stack_config(
            pulsar_stack.web_url, pulsar_stack.broker_url, pulsar_stack.zookeeper, namespace
        )
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield Running(gateway, namespace, pulsar_stack.broker_url)


@pytest.fixture(scope="module")
def eager(pulsar_stack: Any) -> Iterator[Running]:
    """A gateway that subscribes queues at declare and bind (``amqpLazySubscriptions=false``):
    what native producers writing to a queue's topic need."""
    with fresh_namespace(pulsar_stack) as namespace:
        config = dataclasses.replace(
            stack_config(
                pulsar_stack.web_url, pulsar_stack.broker_url, pulsar_stack.zookeeper, namespace
            ),
            amqpLazySubscriptions=False,
        )
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield Running(gateway, namespace, pulsar_stack.broker_url)


@pytest.fixture(scope="module")
def pulsar_client(running: Running) -> Iterator[pulsar.Client]:
    client = pulsar.Client(running.broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield client
    client.close()


# Every AMQP field type, at its edges (AMQP 0-9-1 §4.2.5.5 as RabbitMQ reads it).
EVERY_TYPE: dict[str, Field] = {
    "bool": Field("t", True),
    "int8": Field("b", -128),
    "uint8": Field("B", 255),
    "int16": Field("s", -32768),
    "uint16": Field("u", 65535),
    "int32": Field("I", -(2**31)),
    "uint32": Field("i", 2**32 - 1),
    "int64": Field("l", -(2**63)),
    "float": Field("f", 1.5),
    "double": Field("d", -2.25),
    "decimal": Field("D", decimal.Decimal("3.14")),
    "longstr": Field("S", "héllo"),
    "bytes": Field("x", b"\x00\xff"),
    "timestamp": Field("T", 1_700_000_000),
    "void": Field("V", None),
    "array": Field("A", [Field("I", 1), Field("S", "two"), Field("V", None)]),
    "table": Field("F", {"nested": Field("F", {"deep": Field("l", 5)})}),
}


async def publish_raw_and_get(port: int, queue: str, raw_properties: bytes, data: bytes) -> bytes:
    """Publish with exactly these property bytes, get the message back, return its header's
    property bytes as the gateway sent them."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = ScriptedClient(stream)
    await client.handshake()
    await client.open_channel(1)
    await client.send(commands.Queue.Declare(queue=queue), 1)
    await client.expect(commands.Queue.DeclareOk, 1)
    await client.send(commands.Confirm.Select(), 1)
    await client.expect(commands.Confirm.SelectOk, 1)
    await client.send(commands.Basic.Publish(exchange="", routing_key=queue), 1)
    content_header = b"\x00\x3c\x00\x00" + len(data).to_bytes(8, "big") + raw_properties
    await client.send_raw(
        b"\x02\x00\x01" + len(content_header).to_bytes(4, "big") + content_header + b"\xce"
    )
    if data:  # an empty body has no body frame (AMQP 0-9-1 §4.2.6.2)
        await client.send(body.ContentBody(data), 1)
    await client.expect(commands.Basic.Ack, 1)
    deadline = trio.current_time() + 10
    while True:
        await client.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
        _channel, reply = await client.receive()
        if isinstance(reply, commands.Basic.GetOk):
            break
        assert trio.current_time() < deadline, "the message never arrived"
    # The content header undecoded: pamqp would re-interpret the values.
    frame_type, _channel, payload = await client.receive_raw()
    assert frame_type == 2, "a content header follows Get-Ok"
    await stream.aclose()
    return payload[12:]  # after class id, weight and body size


def test_every_amqp_type_survives_exactly(running: Running) -> None:
    properties = MessageProperties(
        content_type="application/octet-stream",
        headers=EVERY_TYPE,
        delivery_mode=2,
        priority=9,
        correlation_id="corr",
        reply_to="replies",
        expiration="60000",
        message_id="id-1",
        timestamp=1_700_000_001,
        type="kind",
        user_id="guest",
        app_id="tests",
        cluster_id="c1",
    )
    raw = encode_properties(properties)
    got = trio.run(publish_raw_and_get, running.gateway.port, "every-type", raw, b"payload")
    assert got == raw
    assert decode_properties(got) == properties


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    headers=st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.one_of(
            st.builds(Field, st.just("I"), st.integers(-(2**31), 2**31 - 1)),
            st.builds(Field, st.just("l"), st.integers(-(2**63), 2**63 - 1)),
            st.builds(Field, st.just("S"), st.text(max_size=20)),
            st.builds(Field, st.just("x"), st.binary(max_size=20)),
            st.builds(Field, st.just("t"), st.booleans()),
            st.builds(Field, st.just("d"), st.floats(allow_nan=False)),
        ),
        max_size=6,
    ),
    data=st.binary(max_size=2000),
)
def test_generated_headers_round_trip(
    running: Running, headers: dict[str, Field], data: bytes
) -> None:
    raw = encode_properties(MessageProperties(headers=headers))
    queue = f"generated-{uuid.uuid4().hex[:8]}"
    assert trio.run(publish_raw_and_get, running.gateway.port, queue, raw, data) == raw


def test_native_consumer_sees_readable_properties(
    running: Running, pulsar_client: pulsar.Client
) -> None:
    channel = running.channel()
    channel.queue_declare("native-out")
    topic = topic_for(running.namespace, "", "native-out")
    consumer = pulsar_client.subscribe(
        topic, "native-reader", consumer_type=pulsar.ConsumerType.Shared
    )
    sent = pika.BasicProperties(
        content_type="text/plain",
        correlation_id="c-9",
        headers={"tenant": "acme", "attempt": 3, "urgent": True},
    )
    channel.basic_publish("", "native-out", b"for pulsar", sent)
    message = consumer.receive(timeout_millis=10_000)
    consumer.acknowledge(message)
    consumer.close()
    channel.connection.close()
    assert message.data() == b"for pulsar"
    properties = message.properties()
    assert properties["content-type"] == "text/plain"
    assert properties["correlation-id"] == "c-9"
    assert properties["header.tenant"] == "acme"
    assert properties["header.attempt"] == "3"
    assert properties["header.urgent"] == "True"


def test_native_producer_reaches_amqp_consumers(
    eager: Running, pulsar_client: pulsar.Client
) -> None:
    channel = eager.channel()
    channel.queue_declare("native-in")
    producer = pulsar_client.create_producer(topic_for(eager.namespace, "", "native-in"))
    producer.send(
        b'{"from": "pulsar"}',
        properties={"content-type": "application/json", "origin": "native", "header.trace": "t1"},
    )
    producer.close()
    deadline = time.monotonic() + 10
    while (got := channel.basic_get("native-in", auto_ack=True))[2] is None:
        assert time.monotonic() < deadline, "the native message never arrived"
    method, properties, data = got
    channel.connection.close()
    assert data == b'{"from": "pulsar"}'
    assert method.routing_key == "native-in"
    assert properties.content_type == "application/json"
    assert properties.headers == {"origin": "native", "trace": "t1"}


def test_with_lazy_subscriptions_a_native_producer_reaches_a_queue_once_amqp_published_there(
    running: Running, pulsar_client: pulsar.Client
) -> None:
    """Lazy subscriptions: a queue has no subscription on its topic until a message is
    published there through the gateway; from then on, native producers' messages reach it."""
    channel = running.channel()
    channel.queue_declare("lazy-native-in")
    channel.confirm_delivery()  # stored before the native one is sent
    channel.basic_publish("", "lazy-native-in", b"first")
    producer = pulsar_client.create_producer(topic_for(running.namespace, "", "lazy-native-in"))
    producer.send(b"native")
    producer.close()
    bodies: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(bodies) < 2:
        assert time.monotonic() < deadline, bodies
        _, _, body = channel.basic_get("lazy-native-in", auto_ack=True)
        if body is not None:
            bodies.append(body)
    channel.connection.close()
    assert bodies == [b"first", b"native"]


def test_timestamps_and_decimals_keep_their_type(running: Running) -> None:
    channel = running.channel()
    channel.queue_declare("typed")
    when = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    channel.basic_publish(
        "",
        "typed",
        b"",
        pika.BasicProperties(headers={"when": when, "amount": decimal.Decimal("10.50")}),
    )
    deadline = time.monotonic() + 10
    while (got := channel.basic_get("typed", auto_ack=True))[2] is None:
        assert time.monotonic() < deadline
    headers = got[1].headers
    channel.connection.close()
    assert headers["when"] == when.replace(tzinfo=None) or headers["when"] == when
    assert headers["amount"] == decimal.Decimal("10.50")
