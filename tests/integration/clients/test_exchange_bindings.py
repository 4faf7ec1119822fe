"""Exchange-to-exchange bindings (Exchange.Bind / Exchange.Unbind), RabbitMQ's semantics, with
pika and aio-pika, on both backends.

What RabbitMQ does (its e2e page, ``rabbit_exchange:route``, ``rabbit_binding``,
``rabbit_channel:binding_action_with_checks``): the destination routes what the source routes
to it as if it had been published there (same routing key, same headers); every exchange is
visited once per message, so cycles are fine and a queue reached by two paths gets one copy;
an exchange whose bindings match nothing passes the message on to its alternate exchange;
deleting an exchange removes the bindings it is the source or the destination of; an
auto-delete exchange goes when the last binding it is the *source* of goes; a missing source
or destination is 404 (the source named first), the default exchange at either end 403;
Exchange.Unbind is idempotent; and what was routed before an unbind stays in the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import kombu
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    amqp_url,
    channel_closed,
    drain,
    get_bodies,
    unique,
    wait_for_count,
)

# One binding per exchange type, and messages that match it or not: a key (direct and topic
# bindings match "k.z", not "other") and a header (the headers binding wants h = "1").
BINDING: dict[str, tuple[str, dict[str, Any] | None]] = {
    "direct": ("k.z", None),
    "topic": ("k.*", None),
    "fanout": ("", None),
    "headers": ("", {"x-match": "all", "h": "1"}),
}
MESSAGES = [(key, h) for key in ("other", "k.z") for h in ("2", "1")]


def matches(kind: str, key: str, h: str) -> bool:
    if kind in ("direct", "topic"):
        return key == "k.z"
    if kind == "headers":
        return h == "1"
    return True


@pytest.fixture
def channel(running: Running) -> Iterator[BlockingChannel]:
    connection = running.connect()
    opened = connection.channel()
    opened.confirm_delivery()
    yield opened
    if connection.is_open:
        connection.close()


def publish(channel: BlockingChannel, exchange: str, key: str, body: bytes, **headers: str) -> bool:
    """A confirmed, mandatory publish; whether it was routed (no Basic.Return)."""
    try:
        channel.basic_publish(
            exchange,
            key,
            body,
            pika.BasicProperties(headers=headers or None),
            mandatory=True,
        )
    except pika.exceptions.UnroutableError:
        return False
    return True


def only(
    channel: BlockingChannel, queue: str, expected: list[bytes], *, ordered: bool = True
) -> None:
    """``queue`` holds exactly ``expected`` (in order, if from one topic), nothing more: the
    last one of them is published last, on the topic everything else came through or on one
    the queue does not read at all, so once it is got whatever came before has been judged.
    (Messages of several topics interleave as their consumers deliver: docs/mapping.md,
    "Ordering".)"""
    got = get_bodies(channel, queue, len(expected))
    assert (got if ordered else sorted(got)) == (expected if ordered else sorted(expected))
    assert drain(channel, queue) == []
    assert wait_for_count(channel, queue, 0) == 0


def declare(channel: BlockingChannel, kind: str, **options: Any) -> str:
    name = unique(kind)
    channel.exchange_declare(name, kind, **options)
    return name


def bind(channel: BlockingChannel, destination: str, source: str, kind: str) -> None:
    key, arguments = BINDING[kind]
    channel.exchange_bind(destination, source, key, arguments)


def bind_queue(channel: BlockingChannel, queue: str, exchange: str, kind: str) -> None:
    key, arguments = BINDING[kind]
    channel.queue_bind(queue, exchange, key, arguments)


@pytest.mark.parametrize("source_kind", list(BINDING))
def test_every_exchange_type_as_source_and_destination(
    channel: BlockingChannel, source_kind: str
) -> None:
    for destination_kind in BINDING:
        source = declare(channel, source_kind)
        destination = declare(channel, destination_kind)
        queue = channel.queue_declare(unique("q")).method.queue
        bind(channel, destination, source, source_kind)
        bind_queue(channel, queue, destination, destination_kind)
        expected = []
        for index, (key, h) in enumerate(MESSAGES):
            body = f"{source_kind}>{destination_kind} {index}".encode()
            wanted = matches(source_kind, key, h) and matches(destination_kind, key, h)
            assert publish(channel, source, key, body, h=h) == wanted, body
            if wanted:
                expected.append(body)
        # The last message matches every binding: the queue's last, whatever the types.
        assert expected and expected[-1].endswith(b" 3")
        only(channel, queue, expected)


def test_a_chain_of_three_keeps_the_key_and_headers(channel: BlockingChannel) -> None:
    first, second, third = (declare(channel, k) for k in ("topic", "headers", "direct"))
    queue = channel.queue_declare(unique("q")).method.queue
    channel.exchange_bind(second, first, "a.#")
    channel.exchange_bind(third, second, arguments={"h": "1"})
    channel.queue_bind(queue, third, "a.b")
    assert not publish(channel, first, "a.b", b"no header", h="2")
    assert not publish(channel, first, "a.c", b"other key", h="1")
    assert publish(channel, first, "a.b", b"routed", h="1")
    method, _, body = channel.basic_get(queue, auto_ack=True)
    while method is None:
        method, _, body = channel.basic_get(queue, auto_ack=True)
    # Delivered with the exchange and key it was published with, as on RabbitMQ.
    assert (method.exchange, method.routing_key, body) == (first, "a.b", b"routed")
    only(channel, queue, [])


def test_cycles_and_diamonds_deliver_one_copy(channel: BlockingChannel) -> None:
    x, a, b = (declare(channel, "fanout") for _ in range(3))
    queue = channel.queue_declare(unique("q")).method.queue
    channel.exchange_bind(a, x)
    channel.exchange_bind(b, x)
    channel.exchange_bind(x, a)  # a cycle: x -> a -> x
    channel.exchange_bind(x, x)  # an exchange bound to itself
    channel.queue_bind(queue, a)
    channel.queue_bind(queue, b)  # a diamond: x -> a -> q and x -> b -> q
    channel.queue_bind(queue, x)  # and straight from x
    for exchange in (x, a, b):
        assert publish(channel, exchange, "k", exchange.encode())
    only(channel, queue, [x.encode(), a.encode(), b.encode()], ordered=False)


def test_unbind_stops_routing_keeps_what_was_routed_and_is_idempotent(
    channel: BlockingChannel,
) -> None:
    source, destination = declare(channel, "direct"), declare(channel, "fanout")
    queue = channel.queue_declare(unique("q")).method.queue
    channel.queue_bind(queue, destination)
    channel.exchange_bind(destination, source, "k")
    assert publish(channel, source, "k", b"before")
    channel.exchange_unbind(destination, source, "k")
    channel.exchange_unbind(destination, source, "k")  # idempotent
    channel.exchange_unbind(destination, unique("missing"), "k")  # so is a missing end
    assert not publish(channel, source, "k", b"after")
    only(channel, queue, [b"before"])
    # Bound again: routed again (a new binding, from now on).
    channel.exchange_bind(destination, source, "k")
    assert publish(channel, source, "k", b"again")
    only(channel, queue, [b"again"])


def test_unbinding_one_of_two_paths_keeps_the_other(channel: BlockingChannel) -> None:
    source = declare(channel, "fanout")
    left, right = declare(channel, "direct"), declare(channel, "direct")
    queue = channel.queue_declare(unique("q")).method.queue
    channel.exchange_bind(left, source)
    channel.exchange_bind(right, source)
    channel.queue_bind(queue, left, "a")
    channel.queue_bind(queue, right, "b")
    assert publish(channel, source, "a", b"a1")
    assert publish(channel, source, "b", b"b1")
    channel.exchange_unbind(right, source)
    assert publish(channel, source, "a", b"a2")
    assert not publish(channel, source, "b", b"b2")
    assert publish(channel, source, "a", b"a3")
    # b1 was routed before the unbind: it stays, whatever the queue reads now.
    only(channel, queue, [b"a1", b"b1", b"a2", b"a3"])


def test_deleting_an_exchange_removes_the_bindings_it_is_an_end_of(
    channel: BlockingChannel,
) -> None:
    upstream, middle, downstream = (declare(channel, "fanout") for _ in range(3))
    queue = channel.queue_declare(unique("q")).method.queue
    channel.exchange_bind(middle, upstream)
    channel.exchange_bind(downstream, middle)
    channel.queue_bind(queue, downstream)
    assert publish(channel, upstream, "", b"through")
    channel.exchange_delete(middle)
    assert not publish(channel, upstream, "", b"gone")
    channel.exchange_declare(middle, "fanout")  # declared again: no binding came back
    assert not publish(channel, upstream, "", b"still gone")
    assert not publish(channel, middle, "", b"nor from it")
    only(channel, queue, [b"through"])
    # if-unused looks only at what the exchange is the source of.
    channel.exchange_bind(middle, upstream)
    channel.exchange_delete(middle, if_unused=True)
    with channel_closed(406, f"PRECONDITION_FAILED - exchange '{downstream}' in vhost '/' in use"):
        channel.exchange_bind(downstream, upstream)
        channel.exchange_delete(downstream, if_unused=True)


def test_auto_delete_exchanges_go_with_their_last_binding_as_source(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    source = declare(channel, "fanout", auto_delete=True)
    destination = declare(channel, "fanout", auto_delete=True)
    sink = declare(channel, "fanout", auto_delete=True)
    queue = channel.queue_declare(unique("q")).method.queue
    channel.exchange_bind(destination, source)
    channel.exchange_bind(sink, destination)  # sink: only ever a destination
    channel.queue_bind(queue, destination)
    # The destination loses a binding it is the source of, but keeps one: it stays.
    channel.exchange_unbind(sink, destination)
    channel.exchange_declare(sink, passive=True)  # only a destination: not deleted
    channel.exchange_declare(destination, passive=True)
    # Its last binding as source goes: deleted, and the binding from the source with it,
    # which was the source's last: the source goes too.
    channel.queue_unbind(queue, destination)
    for gone in (destination, source):
        with channel_closed(404, f"NOT_FOUND - no exchange '{gone}' in vhost '/'"):
            connection.channel().exchange_declare(gone, passive=True)
    connection.channel().exchange_declare(sink, passive=True)
    connection.close()


def test_alternate_exchanges_on_the_way(channel: BlockingChannel) -> None:
    caught_at_source, caught_midway = declare(channel, "fanout"), declare(channel, "fanout")
    source = declare(channel, "direct", arguments={"alternate-exchange": caught_at_source})
    midway = declare(channel, "direct", arguments={"alternate-exchange": caught_midway})
    routed, at_source, at_midway = (channel.queue_declare(unique(n)).method.queue for n in "rsm")
    channel.queue_bind(at_source, caught_at_source)
    channel.queue_bind(at_midway, caught_midway)
    channel.exchange_bind(midway, source, "in")
    channel.queue_bind(routed, midway, "in")
    channel.queue_bind(routed, midway, "only-direct")  # never reached: source routes "in"
    assert publish(channel, source, "in", b"routed")
    # The source routes nothing: its alternate exchange (not midway's).
    assert publish(channel, source, "out", b"at source")
    # Midway routes nothing for a key the source passed on: midway's alternate exchange.
    channel.exchange_bind(midway, source, "lost")
    assert publish(channel, source, "lost", b"at midway")
    # Routed by both the binding and an alternate exchange: one copy.
    channel.queue_bind(routed, caught_midway)
    assert publish(channel, source, "lost", b"once")
    only(channel, routed, [b"routed", b"once"], ordered=False)
    only(channel, at_source, [b"at source"])
    only(channel, at_midway, [b"at midway", b"once"])


def test_mandatory_needs_a_queue_not_an_exchange(channel: BlockingChannel) -> None:
    source, destination = declare(channel, "topic"), declare(channel, "direct")
    channel.exchange_bind(destination, source, "#")
    assert not publish(channel, source, "k", b"to an exchange with no queue")
    queue = channel.queue_declare(unique("q")).method.queue
    channel.queue_bind(queue, destination, "k")
    assert publish(channel, source, "k", b"to a queue")
    assert not publish(channel, source, "j", b"to the exchange, not the queue")
    only(channel, queue, [b"to a queue"])


def test_internal_and_predeclared_exchanges(channel: BlockingChannel) -> None:
    internal = declare(channel, "fanout", internal=True)
    queue = channel.queue_declare(unique("q")).method.queue
    channel.queue_bind(queue, internal)
    channel.exchange_bind(internal, "amq.direct", queue)  # amq.* may be bound, both ways
    channel.exchange_bind("amq.fanout", internal)
    assert publish(channel, "amq.direct", queue, b"through amq.direct")
    only(channel, queue, [b"through amq.direct"])
    channel.exchange_unbind(internal, "amq.direct", queue)
    channel.exchange_unbind("amq.fanout", internal)


def test_refusals_in_rabbitmq_words(running: Running) -> None:
    connection = running.connect()
    present = unique("present")
    connection.channel().exchange_declare(present, "headers")
    missing, other = unique("missing"), unique("other")
    for destination, source, code, text in (
        (present, missing, 404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'"),
        (missing, present, 404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'"),
        (other, missing, 404, f"NOT_FOUND - no exchange '{missing}' in vhost '/'"),
        ("", present, 403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
        (present, "", 403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
    ):
        with channel_closed(code, text):
            connection.channel().exchange_bind(destination, source)
    with channel_closed(403, "ACCESS_REFUSED - operation not permitted on the default exchange"):
        connection.channel().exchange_unbind(present, "")
    # The source's type checks the binding's arguments.
    with channel_closed(
        406,
        'PRECONDITION_FAILED - Invalid x-match field value <<"most">>; expected all, any, '
        "all-with-x, or any-with-x",
    ):
        connection.channel().exchange_bind(present, present, arguments={"x-match": "most"})
    connection.close()


def test_aio_pika_bind_unbind_and_nowait(running: Running) -> None:
    async def scenario() -> list[tuple[str, bytes]]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()
            source = await channel.declare_exchange(unique("src"), "topic")
            destination = await channel.declare_exchange(unique("dst"), "fanout")
            nowait = await channel.declare_exchange(unique("nowait"), "direct")
            queue = await channel.declare_queue(unique("q"))
            await queue.bind(destination)
            await queue.bind(nowait, "a.n")
            await destination.bind(source, "a.*")
            # Exchange.Bind with nowait: no Bind-Ok; the next method on the channel is
            # answered after it took effect.
            underlay = await channel.get_underlay_channel()
            await underlay.exchange_bind(nowait.name, source.name, "a.n", nowait=True)
            await source.publish(aio_pika.Message(b"one"), "a.b")  # through destination
            await source.publish(aio_pika.Message(b"two"), "a.n")  # both paths: one copy
            await destination.unbind(source, "a.*")
            await source.publish(aio_pika.Message(b"not routed"), "a.b")
            await source.publish(aio_pika.Message(b"three"), "a.n")  # through nowait
            got: list[tuple[str, bytes]] = []
            deadline = time.monotonic() + 20
            while len(got) < 3:
                message = await queue.get(no_ack=True, fail=False)
                if message is not None:
                    got.append((message.exchange or "", message.body))
                assert time.monotonic() < deadline, got
            assert await queue.get(no_ack=True, fail=False) is None
            declared = await channel.declare_queue(queue.name, passive=True)
            assert declared.declaration_result.message_count == 0
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert sorted(got) == sorted([(e, b) for e, b in got if b in (b"one", b"two", b"three")])
    assert sorted(body for _, body in got) == [b"one", b"three", b"two"]
    assert {exchange for exchange, _ in got} == {got[0][0]}  # the source, for all of them


def test_kombu_bind_to(running: Running) -> None:
    """kombu's ``Exchange.bind_to`` / ``unbind_from`` (Exchange.Bind / Unbind), the way kombu
    applications route one exchange's messages into another."""
    events, audit, queue = unique("events"), unique("audit"), unique("q")
    with kombu.Connection(f"amqp://guest:guest@127.0.0.1:{running.port}//") as connection:
        channel = connection.channel()
        source = kombu.Exchange(events, "topic", channel=channel)
        destination = kombu.Exchange(audit, "fanout", channel=channel)
        source.declare()
        destination.declare()
        kombu.Queue(queue, destination, channel=channel).declare()
        destination.bind_to(source, routing_key="user.#")
        producer = kombu.Producer(channel, exchange=source)
        producer.publish({"n": 1}, routing_key="user.login")
        producer.publish({"n": 2}, routing_key="order.new")  # not bound
        simple = connection.SimpleQueue(kombu.Queue(queue, destination))
        message = simple.get(block=True, timeout=20)
        assert message.payload == {"n": 1}
        message.ack()
        destination.unbind_from(source, routing_key="user.#")
        producer.publish({"n": 3}, routing_key="user.logout")
        with pytest.raises(simple.Empty):
            simple.get(block=True, timeout=1)
        simple.close()


def test_a_stream_and_a_priority_queue_at_the_end_of_a_path(channel: BlockingChannel) -> None:
    """A fanout exchange bound to a direct exchange: a stream's feed and a priority queue's
    consumers read the fanout exchange's topic and judge its messages by key."""
    source, destination = declare(channel, "fanout"), declare(channel, "direct")
    stream = unique("stream")
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    priority = channel.queue_declare(unique("prio"), arguments={"x-max-priority": 5}).method.queue
    channel.queue_bind(stream, destination, "k")
    channel.queue_bind(priority, destination, "k")
    channel.exchange_bind(destination, source)
    assert not publish(channel, source, "other", b"not for them")
    assert publish(channel, source, "k", b"one")
    assert publish(channel, source, "k", b"two")
    only(channel, priority, [b"one", b"two"])
    got: list[bytes] = []
    channel.basic_qos(prefetch_count=10)
    tag = channel.basic_consume(
        stream,
        lambda ch, method, _p, body: (got.append(body), ch.basic_ack(method.delivery_tag)),
        arguments={"x-stream-offset": "first"},
    )
    deadline = time.monotonic() + 30
    while len(got) < 2:
        assert time.monotonic() < deadline, got
        channel.connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    assert got == [b"one", b"two"]
