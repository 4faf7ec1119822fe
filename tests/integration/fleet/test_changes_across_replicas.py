"""Two gateway replicas on one Pulsar and one ZooKeeper: a change made through one is in force
on the other (each replica has its own ZooKeeper session and its own view)."""

from __future__ import annotations

import os
import time
from typing import Any

import pika
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on, pump_until

pytestmark = pytest.mark.integration


def test_a_binding_made_on_one_replica_feeds_consumers_on_the_other(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    consumer = channel_on(a)
    consumer.queue_declare("shared")
    received: list[bytes] = []
    consumer.basic_consume("shared", lambda ch, m, p, body: received.append(body), auto_ack=True)

    other = channel_on(b)
    other.confirm_delivery()
    other.exchange_declare("orders", "direct")
    other.queue_bind("shared", "orders", "created")
    other.basic_publish("orders", "created", b"order-1")
    pump_until(consumer, lambda: received == [b"order-1"])


def test_a_queue_deleted_on_one_replica_cancels_consumers_on_the_other(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    consumer = channel_on(a)
    consumer.queue_declare("doomed")
    cancelled: list[object] = []
    consumer.basic_consume("doomed", lambda *args: None)
    consumer.add_on_cancel_callback(cancelled.append)
    channel_on(b).queue_delete("doomed")
    pump_until(consumer, lambda: bool(cancelled))


def test_a_queue_declared_on_one_replica_is_usable_on_the_other(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    channel_on(a).queue_declare("declared-on-a", durable=True)
    publisher = channel_on(b)
    publisher.confirm_delivery()
    deadline = time.monotonic() + 15
    while True:  # B's view may need a moment to see A's declare
        try:
            publisher.queue_declare("declared-on-a", passive=True)
            break
        except pika.exceptions.ChannelClosedByBroker:
            assert time.monotonic() < deadline
            publisher = channel_on(b)
            publisher.confirm_delivery()
    publisher.basic_publish("", "declared-on-a", b"hello", mandatory=True)
    getter = channel_on(a)
    pump_until(
        getter,
        lambda: getter.basic_get("declared-on-a", auto_ack=True)[2] == b"hello",
    )


def test_a_new_key_published_on_one_replica_reaches_a_pattern_bound_a_moment_before_on_the_other(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    """The race of a pattern binding on replica A and a new routing key's first message on
    replica B, round after round with no pause between Bind-Ok and the publish: every
    confirmed message reaches its queue (the two sides read each other's records from
    ZooKeeper after writing their own; watches alone lose some)."""
    a, b = replicas
    binder, publisher = channel_on(a), channel_on(b)
    binder.exchange_declare("events", "topic")
    publisher.confirm_delivery()
    for round_ in range(25):
        queue = f"q{round_}"
        binder.queue_declare(queue)
        binder.queue_bind(queue, "events", f"k{round_}.*")
        publisher.basic_publish("events", f"k{round_}.new", f"m{round_}".encode())
        body: bytes | None = None
        deadline = time.monotonic() + 10
        while body is None:
            assert time.monotonic() < deadline, f"round {round_}: the message never arrived"
            _, _, body = binder.basic_get(queue, auto_ack=True)
        assert body == f"m{round_}".encode()


@pytest.mark.parametrize("kind", ["direct", "topic", "fanout", "default"])
def test_a_mandatory_publish_right_after_a_bind_on_the_other_replica_is_not_returned(
    replicas: tuple[GatewayInThread, GatewayInThread], kind: str
) -> None:
    """Bind-Ok on replica A, then at once a mandatory publish on replica B: routed, as on
    RabbitMQ, even before B's watch reports the binding (B asks ZooKeeper before it returns
    a message as unroutable)."""
    a, b = replicas
    binder, publisher = channel_on(a), channel_on(b)
    exchange = "" if kind == "default" else f"x-{kind}"
    if exchange:
        binder.exchange_declare(exchange, kind)
        round_trip_on = channel_on(b)
        round_trip_on.exchange_declare(exchange, kind, passive=True)  # known on B
    returned: list[bytes] = []
    publisher.add_on_return_callback(lambda _ch, _m, _p, body: returned.append(body))
    publisher.confirm_delivery()
    for round_ in range(10):
        queue = f"{kind}-q{round_}"
        key = queue if kind == "default" else f"k{round_}"
        binder.queue_declare(queue)
        if exchange:
            binder.queue_bind(queue, exchange, key)
        publisher.basic_publish(exchange, key, f"m{round_}".encode(), mandatory=True)
        assert returned == [], f"round {round_}: returned as unroutable"
        _, _, body = binder.basic_get(queue, auto_ack=True)
        deadline = time.monotonic() + 10
        while body is None:
            assert time.monotonic() < deadline, f"round {round_}: the message never arrived"
            _, _, body = binder.basic_get(queue, auto_ack=True)
        assert body == f"m{round_}".encode()


def test_alternate_exchange_across_replicas(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    """Declared on one replica, used on the other: an unroutable message published through
    the second reaches the alternate exchange's queue, and a binding made on the first a
    moment before a publish on the second wins over the alternate exchange (ZooKeeper
    decides, not the second replica's view, which may lag)."""
    a, b = replicas
    on_a = channel_on(a)
    on_a.exchange_declare("ae", "fanout")
    on_a.exchange_declare("x", "direct", arguments={"alternate-exchange": "ae"})
    on_a.queue_declare("caught")
    on_a.queue_declare("late")
    on_a.queue_bind("caught", "ae")
    on_b = channel_on(b)
    on_b.confirm_delivery()
    on_b.basic_publish("x", "nobody", b"unroutable", mandatory=True)  # not returned
    for n in range(5):
        on_a.queue_bind("late", "x", f"k{n}")
        on_b.basic_publish("x", f"k{n}", b"m%d" % n, mandatory=True)
    got: dict[str, list[bytes]] = {"caught": [], "late": []}
    deadline = time.monotonic() + 15
    while len(got["caught"]) + len(got["late"]) < 6:
        assert time.monotonic() < deadline, got
        for queue, bodies in got.items():
            method, _, body = on_a.basic_get(queue, auto_ack=True)
            if method is not None:
                bodies.append(body)
                assert method.exchange == "x"
    assert got["caught"] == [b"unroutable"]
    assert sorted(got["late"]) == [b"m%d" % n for n in range(5)]


# Lazy subscriptions (docs/fleet.md): rounds per case of the race below.
LAZY_ROUNDS = int(os.environ.get("FLEET_RACE_ROUNDS", "12"))


@pytest.mark.parametrize("published_before", [True, False], ids=["key-known", "key-new"])
@pytest.mark.parametrize("kind", ["default", "direct", "topic"])
def test_a_message_published_on_one_replica_right_after_bind_ok_on_the_other_reaches_the_queue(
    replicas: tuple[GatewayInThread, GatewayInThread], kind: str, published_before: bool
) -> None:
    """Declare (and bind) on replica A, then at once publish on replica B, round after round:
    the message is in the queue, though declare and bind created no Pulsar subscription when
    nobody had published to the key. ``key-known``: B published to the key just before (its
    handshake is done and its view may not show the key yet on A: A must find it in ZooKeeper
    and subscribe before Bind-Ok); ``key-new``: B's publish is the key's first (B must find
    A's binding in ZooKeeper and subscribe before it writes). The message published before
    the bind is not the queue's, as on RabbitMQ."""
    a, b = replicas
    binder, publisher = channel_on(a), channel_on(b)
    exchange = "" if kind == "default" else f"lazy-{kind}"
    if exchange:
        binder.exchange_declare(exchange, kind)
        publisher.exchange_declare(exchange, kind, passive=True)  # known on B
    publisher.confirm_delivery()
    for round_ in range(LAZY_ROUNDS):
        queue = f"{kind}-{published_before}-q{round_}"
        key = queue if kind == "default" else f"k{round_}"
        if published_before:
            publisher.basic_publish(exchange, key, b"before")  # routed nowhere: dropped
        binder.queue_declare(queue)
        if exchange:
            binder.queue_bind(queue, exchange, key)
        publisher.basic_publish(exchange, key, f"m{round_}".encode())
        assert _got(binder, queue, round_) == f"m{round_}".encode(), f"round {round_}"
        binder.queue_delete(queue)


def _got(channel: Any, queue: str, round_: int) -> bytes:
    """The first message of ``queue`` (basic.get until there is one, for 10 s at most)."""
    _, _, body = channel.basic_get(queue, auto_ack=True)
    deadline = time.monotonic() + 10
    while body is None:
        assert time.monotonic() < deadline, f"round {round_}: the message never arrived"
        _, _, body = channel.basic_get(queue, auto_ack=True)
    return bytes(body)


def test_a_server_named_queue_gets_a_message_published_elsewhere_right_after_declare_ok(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    """A server-named queue's declare skips the binder's read of its key (the name is made up
    for that declare: nobody can have published to it before): a publish on the other
    replica right after Declare-Ok still reaches it (the publisher's half of the handshake
    finds the queue), round after round, exclusive or not."""
    a, b = replicas
    declarer, publisher = channel_on(a), channel_on(b)
    publisher.confirm_delivery()
    for round_ in range(LAZY_ROUNDS):
        queue = declarer.queue_declare("", exclusive=round_ % 2 == 0).method.queue
        assert queue.startswith("amq.gen-")
        publisher.basic_publish("", queue, f"m{round_}".encode())
        assert _got(declarer, queue, round_) == f"m{round_}".encode(), f"round {round_}"
        declarer.queue_delete(queue)


def test_a_consumer_started_before_any_message_gets_the_first_one_published_elsewhere(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    """A consumer of a queue none of whose topics has had a message consumes nothing in
    Pulsar yet; the first message, published on the other replica, reaches it (its replica
    adds the topic once the key's registration reaches its view)."""
    a, b = replicas
    consumer = channel_on(a)
    consumer.exchange_declare("lazy-consumed", "direct")
    received: list[bytes] = []
    for n in range(5):
        consumer.queue_declare(f"c{n}")
        consumer.queue_bind(f"c{n}", "lazy-consumed", f"k{n}")
        consumer.basic_consume(f"c{n}", lambda ch, m, p, body: received.append(body), auto_ack=True)
    publisher = channel_on(b)
    publisher.confirm_delivery()
    for n in range(5):
        publisher.basic_publish("lazy-consumed", f"k{n}", b"via-exchange-%d" % n)
        publisher.basic_publish("", f"c{n}", b"direct-to-%d" % n)
    pump_until(consumer, lambda: len(received) == 10)
    assert sorted(received) == sorted(
        [b"via-exchange-%d" % n for n in range(5)] + [b"direct-to-%d" % n for n in range(5)]
    )
