"""Publishing as RabbitMQ has it, on both backends: publisher confirms in publish order (pika
SelectConnection, pika BlockingConnection, aio-pika), mandatory returns before the confirm,
``immediate`` refused with 540, publishing to a missing exchange refused with 404."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    SelectFlow,
    amqp_url,
    channel_closed,
    collect,
    round_trip,
    unique,
    wait_for,
)

MANY = 300


def confirmed_tags(events: list[tuple[str, int, bool]], last: int) -> list[int]:
    """Expand (kind, tag, multiple) confirms into the tags they confirm, checking that each
    confirm covers only tags above the previous one (publish order) and is an ack."""
    confirmed: list[int] = []
    for kind, tag, multiple in events:
        assert kind == "ack", (kind, tag)
        previous = confirmed[-1] if confirmed else 0
        assert tag > previous, f"confirm of {tag} after {previous}: out of publish order"
        confirmed.extend(range(previous + 1, tag + 1) if multiple else [tag])
    assert confirmed == list(range(1, last + 1))
    return confirmed


def test_select_connection_confirms_in_publish_order(running: Running) -> None:
    """pika's callback adapter, publishing a burst without waiting: every message is
    confirmed once, in publish order (multiple=true coalescing allowed), none is nacked."""
    queue = unique("confirmed")
    flow = SelectFlow(running.port)
    confirms: list[tuple[str, int, bool]] = []

    def on_confirm(frame: Any) -> None:
        method = frame.method
        confirms.append((method.NAME.split(".")[-1].lower(), method.delivery_tag, method.multiple))
        covered = confirms[-1][1]
        if covered >= MANY:
            flow.finish()

    def start(channel: Any) -> None:
        def declared(_frame: Any) -> None:
            channel.confirm_delivery(ack_nack_callback=on_confirm, callback=confirmed_mode)

        def confirmed_mode(_frame: Any) -> None:
            for n in range(MANY):
                channel.basic_publish("", queue, f"m{n}".encode())

        channel.queue_declare(queue, callback=declared)

    flow.run(start)
    confirmed_tags(confirms, MANY)
    # Everything confirmed is there, in publish order (one queue, one topic).
    connection = running.connect()
    got = collect(connection, {queue: MANY})
    assert got[queue] == [f"m{n}".encode() for n in range(MANY)]
    connection.channel().queue_delete(queue)
    connection.close()


def test_blocking_connection_confirms_every_publish(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = unique("confirmed")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for n in range(100):
        channel.basic_publish("", queue, f"m{n}".encode())  # raises if nacked
    got = collect(connection, {queue: 100})
    assert got[queue] == [f"m{n}".encode() for n in range(100)]
    connection.close()


def test_aio_pika_confirms_many_concurrent_publishes(running: Running) -> None:
    """aio-pika's channel has confirms on by default; publishes awaited together all get
    their acks (aiormq matches them by delivery tag and fails on a nack or a gap)."""
    exchange_name = unique("direct")
    queues = [unique("aio"), unique("aio")]

    async def scenario() -> dict[str, list[bytes]]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(exchange_name, "direct")
            declared = []
            for name in queues:
                queue = await channel.declare_queue(name)
                await queue.bind(exchange, routing_key=name)
                declared.append(queue)
            confirmations = await asyncio.gather(
                *(
                    exchange.publish(aio_pika.Message(f"m{n}".encode()), routing_key=queues[n % 2])
                    for n in range(MANY)
                )
            )
            assert all(isinstance(c, aiormq.spec.Basic.Ack) for c in confirmations)
            got: dict[str, list[bytes]] = {}
            for queue in declared:
                bodies: list[bytes] = []
                async with queue.iterator() as messages:
                    async for message in messages:
                        await message.ack()
                        bodies.append(message.body)
                        if len(bodies) == MANY // 2:
                            break
                got[queue.name] = bodies
            return got

    got = asyncio.run(asyncio.wait_for(scenario(), 60))
    # Publish order holds per routing key (one Pulsar topic each).
    assert got[queues[0]] == [f"m{n}".encode() for n in range(0, MANY, 2)]
    assert got[queues[1]] == [f"m{n}".encode() for n in range(1, MANY, 2)]


def test_mandatory_return_comes_before_the_confirm(running: Running) -> None:
    """pika SelectConnection: routable, unroutable, routable — the unroutable one comes back
    (312 NO_ROUTE) before any ack that covers its tag; every tag is acked in order."""
    queue = unique("routable")
    exchange = unique("direct")
    flow = SelectFlow(running.port)
    events: list[tuple[Any, ...]] = []

    def on_confirm(frame: Any) -> None:
        method = frame.method
        events.append((method.NAME.split(".")[-1].lower(), method.delivery_tag, method.multiple))
        if method.delivery_tag >= 3:
            flow.finish()

    def on_return(_channel: Any, method: Any, _properties: Any, body: bytes) -> None:
        events.append(("return", method.reply_code, method.reply_text, method.routing_key, body))

    def start(channel: Any) -> None:
        channel.add_on_return_callback(on_return)

        def publish(_frame: Any) -> None:
            channel.basic_publish(exchange, "yes", b"one", mandatory=True)
            channel.basic_publish(exchange, "no", b"two", mandatory=True)
            channel.basic_publish(exchange, "yes", b"three", mandatory=True)

        def select(_frame: Any) -> None:
            channel.confirm_delivery(on_confirm, callback=publish)

        def bind(_frame: Any) -> None:
            channel.queue_bind(queue, exchange, "yes", callback=select)

        def declare_queue(_frame: Any) -> None:
            channel.queue_declare(queue, callback=bind)

        channel.exchange_declare(exchange, "direct", callback=declare_queue)

    flow.run(start)
    returns = [e for e in events if e[0] == "return"]
    assert returns == [("return", 312, "NO_ROUTE", "no", b"two")]
    confirms = [e for e in events if e[0] != "return"]
    confirmed_tags(confirms, 3)  # type: ignore[arg-type]
    first_covering_two = next(i for i, e in enumerate(events) if e[0] == "ack" and e[1] >= 2)
    assert events.index(returns[0]) < first_covering_two


def confirmed_topic_queue(channel: BlockingChannel, binding_key: str) -> tuple[str, str]:
    """A new topic exchange and a queue bound to it with ``binding_key``; confirms on."""
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic")
    queue = unique("q")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, binding_key)
    channel.confirm_delivery()
    return exchange, queue


def test_mandatory_return_with_blocking_connection(channel: BlockingChannel) -> None:
    exchange, _ = confirmed_topic_queue(channel, "a.*")
    channel.basic_publish(exchange, "a.b", b"routed", mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError) as unroutable:
        channel.basic_publish(exchange, "b.a", b"unroutable", mandatory=True)
    (returned,) = unroutable.value.messages
    assert (returned.method.reply_code, returned.method.routing_key) == (312, "b.a")
    assert returned.body == b"unroutable"
    # Without mandatory an unroutable message is simply confirmed and dropped.
    channel.basic_publish(exchange, "b.a", b"dropped")


def test_immediate_is_540_not_implemented(running: Running) -> None:
    """No client library offers ``immediate`` any more except at the frame level; aiormq's
    channel does."""

    async def scenario() -> BaseException:
        connection = await aiormq.connect(amqp_url(running.port))
        channel = await connection.channel()
        try:
            await channel.basic_publish(b"x", routing_key="anything", immediate=True)
            await asyncio.wait_for(connection.closing, 10)
        except BaseException as error:  # what the client surfaces for the Close
            return error
        finally:
            await connection.close()
        raise AssertionError("the connection stayed open")

    error = asyncio.run(asyncio.wait_for(scenario(), 30))
    text = repr(error)
    assert "540" in text or "NOT_IMPLEMENTED" in text, text
    assert "immediate=true" in text, text


def test_publishing_to_a_missing_exchange_is_404(running: Running) -> None:
    connection = running.connect()
    name = unique("missing")
    for confirm in (False, True):
        channel = connection.channel()
        if confirm:
            channel.confirm_delivery()
        with channel_closed(404, f"NOT_FOUND - no exchange '{name}' in vhost '/'"):
            channel.basic_publish(name, "k", b"nowhere")
            round_trip(channel)
    # The connection is still fine.
    connection.channel().queue_declare("", exclusive=True)
    connection.close()


def test_a_nul_in_the_routing_key_and_a_header_arrives_whole(channel: BlockingChannel) -> None:
    """AMQP strings may hold NUL; Pulsar's C API, which the gateway's compiled module reads
    messages through, cuts strings at one (gateway/pulsar/nul_properties.py)."""
    exchange, queue = confirmed_topic_queue(channel, "#")
    headers = {"odd": "x\x00y", "plain": "p"}
    channel.basic_publish(
        exchange, "a\x00b", b"body", pika.BasicProperties(headers=headers, type="t\x00u")
    )
    method, properties, body = wait_for_get(channel, queue)
    assert (method.routing_key, body) == ("a\x00b", b"body")
    assert properties.headers == headers and properties.type == "t\x00u"


def wait_for_get(channel: BlockingChannel, queue: str) -> tuple[Any, Any, bytes]:
    got: list[tuple[Any, Any, bytes]] = []

    def fetched() -> bool:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            got.append((method, properties, body))
        return bool(got)

    wait_for(fetched, channel.connection, what=f"a message in {queue}")
    return got[0]
