"""Bindings as RabbitMQ has them, through pika, on both backends: topic patterns cover keys
first used after the bind, headers bindings filter on delivery, unbind stops what comes after
it (and only that), binding is idempotent and a message reaches a queue once."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import channel_closed, collect, unique, wait_for, wait_for_count


def queue_bound(
    channel: BlockingChannel, exchange: str, key: str = "", arguments: dict[str, Any] | None = None
) -> str:
    queue = unique("q")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, key, arguments=arguments)
    return queue


def test_topic_pattern_covers_keys_first_used_after_the_bind(running: Running) -> None:
    binder = running.connect()
    channel = binder.channel()
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic")
    fresh = unique("never-used")  # a key no one has ever published with
    queue = queue_bound(channel, exchange, f"{fresh}.#")
    star = queue_bound(channel, exchange, f"*.{fresh}")
    # Published from another connection, right after Bind-Ok.
    publisher = running.connect()
    publishing = publisher.channel()
    publishing.confirm_delivery()
    publishing.basic_publish(exchange, f"{fresh}.a.b", b"deep")
    publishing.basic_publish(exchange, fresh, b"bare")
    publishing.basic_publish(exchange, f"x.{fresh}", b"star")
    publisher.close()
    got = collect(binder, {queue: 2, star: 1})
    assert sorted(got[queue]) == [b"bare", b"deep"]
    assert got[star] == [b"star"]
    binder.close()


def test_topic_pattern_covers_keys_used_before_the_bind(
    connection: pika.BlockingConnection,
) -> None:
    channel = connection.channel()
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic")
    channel.confirm_delivery()
    channel.basic_publish(exchange, "used.before", b"unrouted")  # the key's topic now exists
    queue = queue_bound(channel, exchange, "used.*")
    channel.basic_publish(exchange, "used.before", b"routed")
    assert collect(connection, {queue: 1}) == {queue: [b"routed"]}


def test_a_message_reaches_a_queue_once_whatever_matches(
    connection: pika.BlockingConnection,
) -> None:
    """Several bindings of one queue matching one message deliver it once (RabbitMQ routes to
    a set of queues)."""
    channel = connection.channel()
    topic, headers, direct = unique("topic"), unique("headers"), unique("direct")
    channel.exchange_declare(topic, "topic")
    channel.exchange_declare(headers, "headers")
    channel.exchange_declare(direct, "direct")
    queue = queue_bound(channel, topic, "a.*")
    for key in ("*.b", "#", "a.b", "a.#"):
        channel.queue_bind(queue, topic, key)
    channel.queue_bind(queue, headers, arguments={"x-match": "any", "h": 1})
    channel.queue_bind(queue, headers, arguments={"x-match": "all", "h": 1, "i": 2})
    channel.queue_bind(queue, direct, "k")
    channel.queue_bind(queue, direct, "k")  # the same binding twice is one binding
    channel.basic_publish(topic, "a.b", b"topic")
    channel.basic_publish(headers, "", b"headers", pika.BasicProperties(headers={"h": 1, "i": 2}))
    channel.basic_publish(direct, "k", b"direct")
    got = collect(connection, {queue: 3}, settle=0.5)
    assert sorted(got[queue]) == [b"direct", b"headers", b"topic"]


def test_headers_bindings_filter_on_delivery(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    exchange = unique("headers")
    channel.exchange_declare(exchange, "headers")
    eu = queue_bound(channel, exchange, arguments={"x-match": "all", "region": "eu"})
    us = queue_bound(channel, exchange, arguments={"x-match": "all", "region": "us"})
    urgent = queue_bound(channel, exchange, arguments={"x-match": "any", "urgent": True})
    for n, values in enumerate(
        (
            {"region": "eu"},
            {"region": "us", "urgent": True},
            {"region": "asia"},
            {"region": "eu", "urgent": False},
            {},
        )
    ):
        channel.basic_publish(exchange, "", f"m{n}".encode(), pika.BasicProperties(headers=values))
    got = collect(connection, {eu: 2, us: 1, urgent: 1})
    assert got == {eu: [b"m0", b"m3"], us: [b"m1"], urgent: [b"m1"]}


@pytest.mark.parametrize(
    ("kind", "key", "arguments", "headers"),
    [
        ("direct", "k", None, None),
        ("fanout", "", None, None),
        ("topic", "a.#", None, None),
        ("headers", "", {"x-match": "all", "h": "v"}, {"h": "v"}),
    ],
)
def test_unbind_stops_later_messages(
    connection: pika.BlockingConnection,
    kind: str,
    key: str,
    arguments: dict[str, Any] | None,
    headers: dict[str, Any] | None,
) -> None:
    channel = connection.channel()
    exchange = unique(kind)
    channel.exchange_declare(exchange, kind)
    queue = queue_bound(channel, exchange, key, arguments)
    properties = pika.BasicProperties(headers=headers)
    publish_key = "a.b" if kind == "topic" else key
    got: list[bytes] = []
    tag = channel.basic_consume(queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    channel.basic_publish(exchange, publish_key, b"before", properties)
    wait_for(lambda: got == [b"before"], connection, what="the message before unbind")
    channel.queue_unbind(queue, exchange, key, arguments=arguments)
    channel.basic_publish(exchange, publish_key, b"after", properties)
    channel.basic_cancel(tag)
    # Anything routed after the unbind would be in the queue now: a fresh consumer finds none.
    assert collect(connection, {queue: 0}) == {queue: []}
    assert got == [b"before"]


def test_unbind_keeps_messages_routed_before_it(running: Running) -> None:
    """Messages already in the queue stay there (on Pulsar the unbound subscription drains,
    docs/mapping.md); only later ones are not routed."""
    connection = running.connect()
    channel = connection.channel()
    exchange = unique("direct")
    channel.exchange_declare(exchange, "direct")
    queue = queue_bound(channel, exchange, "k")
    channel.confirm_delivery()
    channel.basic_publish(exchange, "k", b"routed before unbind")
    assert wait_for_count(channel, queue, 1) == 1
    channel.queue_unbind(queue, exchange, "k")
    channel.basic_publish(exchange, "k", b"after unbind")
    assert collect(connection, {queue: 1}) == {queue: [b"routed before unbind"]}
    connection.close()


def test_unbind_and_rebind(connection: pika.BlockingConnection) -> None:
    """What is published while unbound never reaches the queue, even once bound again."""
    channel = connection.channel()
    exchange = unique("direct")
    channel.exchange_declare(exchange, "direct")
    queue = queue_bound(channel, exchange, "k")
    channel.confirm_delivery()
    channel.queue_unbind(queue, exchange, "k")
    channel.basic_publish(exchange, "k", b"while unbound")
    channel.queue_bind(queue, exchange, "k")
    channel.basic_publish(exchange, "k", b"bound again")
    assert collect(connection, {queue: 1}) == {queue: [b"bound again"]}


def test_unbind_is_idempotent(channel: BlockingChannel) -> None:
    exchange = unique("direct")
    channel.exchange_declare(exchange, "direct")
    queue = queue_bound(channel, exchange, "k")
    channel.queue_unbind(queue, exchange, "other-key")  # never bound: still Unbind-Ok
    channel.queue_unbind(queue, exchange, "k")
    channel.queue_unbind(queue, exchange, "k")


def test_bind_to_missing_entities_is_404(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue, exchange = unique("q"), unique("x")
    channel.queue_declare(queue)
    channel.exchange_declare(exchange, "direct")
    missing_exchange, missing_queue = unique("nox"), unique("noq")
    with channel_closed(404, f"NOT_FOUND - no exchange '{missing_exchange}' in vhost '/'"):
        channel.queue_bind(queue, missing_exchange, "k")
    with channel_closed(404, f"NOT_FOUND - no queue '{missing_queue}' in vhost '/'"):
        connection.channel().queue_bind(missing_queue, exchange, "k")
    connection.close()
