"""Basic.Get on a queue fed through several bindings (several Pulsar topics)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config


@contextmanager
def _channel(gateway: GatewayInThread) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(host="127.0.0.1", port=gateway.port)
    )
    channel = connection.channel()
    channel.confirm_delivery()
    yield channel
    connection.close()


@pytest.fixture(params=["memory", pytest.param("pulsar", marks=pytest.mark.integration)])
def channel(request: pytest.FixtureRequest) -> Iterator[BlockingChannel]:
    if request.param == "memory":
        with GatewayInThread(backend=MemoryBackend()) as gateway, _channel(gateway) as channel:
            yield channel
        return
    stack = request.getfixturevalue("pulsar_stack")
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with (
            GatewayInThread(backend_factory=backend_factory(config)) as gateway,
            _channel(gateway) as channel,
        ):
            yield channel


def get(channel: BlockingChannel, timeout: float = 10.0) -> tuple[Any, bytes]:
    """The next message of q (Basic.Get answers Get-Empty while one is on its way)."""
    deadline = time.monotonic() + timeout
    while True:
        method, _, body = channel.basic_get("q", auto_ack=False)
        if method is not None:
            return method, body
        assert time.monotonic() < deadline, "no message"


@pytest.mark.parametrize("unacked_first", [1, 2, 3])
def test_get_reaches_every_binding_while_earlier_gets_are_unacked(
    channel: BlockingChannel, unacked_first: int
) -> None:
    channel.exchange_declare("a", "direct")
    channel.exchange_declare("b", "fanout")
    channel.queue_declare("q")
    channel.queue_bind("q", "a", "k1")
    channel.queue_bind("q", "a", "k2")
    channel.queue_bind("q", "b")
    sent = {b"a-k1", b"a-k2", b"b", b"default"}
    channel.basic_publish("a", "k1", b"a-k1")
    channel.basic_publish("a", "k2", b"a-k2")
    channel.basic_publish("b", "", b"b")
    channel.basic_publish("", "q", b"default")
    held = [get(channel) for _ in range(unacked_first)]  # got, not acknowledged
    rest = [get(channel) for _ in range(len(sent) - unacked_first)]
    assert {body for _, body in held + rest} == sent
    for method, _ in held + rest:
        channel.basic_ack(method.delivery_tag)
    assert channel.basic_get("q", auto_ack=True) == (None, None, None)


def test_get_after_publishing_through_another_binding(channel: BlockingChannel) -> None:
    channel.exchange_declare("a", "direct")
    channel.exchange_declare("b", "direct")
    channel.queue_declare("q")
    channel.queue_bind("q", "a", "k")
    channel.queue_bind("q", "b", "k")
    channel.basic_publish("a", "k", b"first")
    channel.basic_publish("a", "k", b"second")
    _held, body = get(channel)
    assert body == b"first"
    channel.basic_publish("b", "k", b"other")
    got = {get(channel, timeout=3.0)[1] for _ in range(2)}
    assert got == {b"second", b"other"}


@pytest.mark.parametrize("kind", ["direct", "topic", "fanout", "headers"])
def test_one_get_finds_a_confirmed_message(channel: BlockingChannel, kind: str) -> None:
    """A confirmed message is there for the very next Basic.Get, as on RabbitMQ, whichever
    binding it came through and whatever the earlier Gets left unacknowledged."""
    channel.exchange_declare("a", "direct")
    channel.exchange_declare("x", kind)
    channel.queue_declare("q")
    channel.queue_bind("q", "a", "k")
    pattern = "#" if kind == "topic" else "k"
    channel.queue_bind("q", "x", pattern, arguments={"h": 1} if kind == "headers" else None)
    channel.basic_publish("a", "k", b"first")
    _, _, body = channel.basic_get("q", auto_ack=False)
    assert body == b"first"
    keys = ["k", "k", "k"] if kind == "direct" else ["k", "new.key", "other"]
    for n, key in enumerate(keys):
        props = pika.BasicProperties(headers={"h": 1})
        channel.basic_publish("x", key, b"via x %d" % n, props)
        _, _, body = channel.basic_get("q", auto_ack=False)
        assert body == b"via x %d" % n
        channel.basic_publish("a", "k", b"via a %d" % n)
        _, _, body = channel.basic_get("q", auto_ack=False)
        assert body == b"via a %d" % n
    channel.basic_ack(0, multiple=True)


def test_get_after_a_pause_while_a_got_message_is_unacked(
    channel: BlockingChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's Basic.Get consumer goes when unused for a while; a message it had taken
    from Pulsar meanwhile must still reach the next Get."""
    from gateway.backend.pulsar import basic_get

    monkeypatch.setattr(basic_get, "GETTER_IDLE", 0.4)
    channel.exchange_declare("a", "direct")
    channel.exchange_declare("b", "direct")
    channel.queue_declare("q")
    channel.queue_bind("q", "a", "k")
    channel.queue_bind("q", "b", "k")
    channel.basic_publish("a", "k", b"first")
    _, _, body = channel.basic_get("q", auto_ack=False)
    assert body == b"first"
    channel.connection.sleep(1.0)  # the client pauses: longer than GETTER_IDLE
    channel.basic_publish("b", "k", b"other")
    channel.basic_publish("a", "k", b"again")
    got = {channel.basic_get("q", auto_ack=False)[2] for _ in range(2)}
    assert got == {b"other", b"again"}
    channel.basic_ack(0, multiple=True)


def test_a_consumer_gets_what_the_get_consumer_had_read_ahead(channel: BlockingChannel) -> None:
    """A consumer starting while a got message is unacknowledged receives the messages of the
    queue's other bindings, including those the Basic.Get consumer had already read ahead."""
    channel.exchange_declare("a", "direct")
    channel.exchange_declare("b", "direct")
    channel.queue_declare("q")
    channel.queue_bind("q", "a", "k")
    channel.queue_bind("q", "b", "k")
    channel.basic_publish("a", "k", b"held")
    channel.basic_publish("b", "k", b"before")
    _, _, body = channel.basic_get("q", auto_ack=False)
    assert body in (b"held", b"before")
    waiting = ({b"held", b"before"} - {body}).pop()
    received: list[bytes] = []
    consumer = channel.connection.channel()
    consumer.basic_consume("q", lambda _ch, _m, _p, body: received.append(body), auto_ack=True)
    channel.basic_publish("b", "k", b"after")
    deadline = time.monotonic() + 10
    while set(received) != {waiting, b"after"}:
        assert time.monotonic() < deadline, received
        channel.connection.process_data_events(time_limit=0.05)
    channel.basic_ack(0, multiple=True)


@pytest.mark.parametrize("how", ["reject", "channel-close"])
def test_a_get_right_after_a_requeue_finds_the_message(
    channel: BlockingChannel, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """RabbitMQ has a requeued message back in the queue at once: the next Basic.Get finds it
    (the Java client's RequeueOnClose). On Pulsar it comes back after the consumer's
    negative-ack delay, which a Get waits for; with its usual wait cut short here, only that
    keeps the Get from answering Get-Empty."""
    from gateway.backend.pulsar import basic_get

    monkeypatch.setattr(basic_get, "GET_WAIT", 0.01)
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"requeued")
    method, body = get(channel)
    assert body == b"requeued"
    if how == "reject":
        channel.basic_reject(method.delivery_tag, requeue=True)
        again = channel
    else:
        again = channel.connection.channel()
        channel.close()
    method, _, body = again.basic_get("q", auto_ack=True)
    assert body == b"requeued" and method.redelivered
