"""Alternate exchanges (RabbitMQ's ``alternate-exchange`` argument), on both backends.

A message its exchange routes nowhere goes to the alternate exchange (and on to that one's,
each exchange once); Basic.Deliver still names the exchange and routing key it was published
with; a mandatory message routed there is not returned, and its confirm comes once it is
stored there. A missing alternate exchange routes nothing.
"""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import unique


def get(channel: BlockingChannel, queue: str, timeout: float = 10.0) -> tuple[str, str, bytes]:
    deadline = time.monotonic() + timeout
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return method.exchange, method.routing_key, body
        assert time.monotonic() < deadline, f"nothing in {queue}"


def confirmed_channel(running: Running) -> BlockingChannel:
    channel = running.connect().channel()
    channel.confirm_delivery()
    return channel


def test_unroutable_messages_go_to_the_alternate_exchange(running: Running) -> None:
    channel = confirmed_channel(running)
    x, ae, routed, caught = unique("x"), unique("ae"), unique("routed"), unique("caught")
    channel.exchange_declare(ae, "fanout")
    channel.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
    channel.queue_declare(routed)
    channel.queue_declare(caught)
    channel.queue_bind(routed, x, "known")
    channel.queue_bind(caught, ae)
    channel.basic_publish(x, "known", b"routed", mandatory=True)
    channel.basic_publish(x, "unknown", b"caught", mandatory=True)  # not returned: routed
    assert get(channel, routed) == (x, "known", b"routed")
    assert get(channel, caught) == (x, "unknown", b"caught")
    # Routed by x: nothing went to the alternate exchange.
    assert channel.basic_get(caught, auto_ack=True) == (None, None, None)


def test_chains_end_and_loops_stop(running: Running) -> None:
    channel = confirmed_channel(running)
    x, ae1, ae2, caught = unique("x"), unique("ae1"), unique("ae2"), unique("caught")
    channel.exchange_declare(ae2, "topic")
    channel.exchange_declare(ae1, "direct", arguments={"alternate-exchange": ae2})
    channel.exchange_declare(x, "direct", arguments={"alternate-exchange": ae1})
    channel.queue_declare(caught)
    channel.queue_bind(caught, ae2, "a.#")
    channel.basic_publish(x, "a.b", b"two hops", mandatory=True)
    assert get(channel, caught) == (x, "a.b", b"two hops")
    # Two exchanges naming each other: tried once each, then unroutable (returned).
    p, q = unique("p"), unique("q")
    channel.exchange_declare(p, "direct", arguments={"alternate-exchange": q})
    channel.exchange_declare(q, "direct", arguments={"alternate-exchange": p})
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(p, "k", b"loops", mandatory=True)


def test_a_missing_alternate_exchange_routes_nothing(running: Running) -> None:
    channel = confirmed_channel(running)
    x = unique("x")
    channel.exchange_declare(x, "direct", arguments={"alternate-exchange": unique("absent")})
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(x, "k", b"lost", mandatory=True)
    channel.basic_publish(x, "k", b"confirmed anyway")  # as RabbitMQ: acked, dropped


def test_across_replicas(running: Running) -> None:
    """The binding that makes a message routable, made a moment ago through another
    connection, wins over the alternate exchange; the view of this replica may lag, ZooKeeper
    decides (on the memory backend both connections share one view)."""
    channel = confirmed_channel(running)
    other = confirmed_channel(running)
    x, ae, late, caught = unique("x"), unique("ae"), unique("late"), unique("caught")
    channel.exchange_declare(ae, "fanout")
    channel.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
    channel.queue_declare(late)
    channel.queue_declare(caught)
    channel.queue_bind(caught, ae)
    for n in range(5):
        other.queue_bind(late, x, f"k{n}")
        channel.basic_publish(x, f"k{n}", b"m%d" % n, mandatory=True)
    assert sorted(get(channel, late)[2] for _ in range(5)) == [b"m%d" % n for n in range(5)]
    assert channel.basic_get(caught, auto_ack=True) == (None, None, None)
