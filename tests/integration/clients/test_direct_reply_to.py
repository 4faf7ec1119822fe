"""Direct reply-to (``amq.rabbitmq.reply-to``) as RabbitMQ's direct-reply-to.md describes it:
the RPC pattern with pika and aio-pika, RabbitMQ's refusals, and dropped replies."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aio_pika
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from tests.support.clients import amqp_url, channel_closed, connect, wait_for
from tests.support.gateway_thread import GatewayInThread

REPLY_TO = "amq.rabbitmq.reply-to"


@pytest.fixture
def gateway() -> Iterator[GatewayInThread]:
    with GatewayInThread(backend=MemoryBackend()) as running:
        yield running


def serve_one(server: BlockingChannel, queue: str) -> str:
    """Answer one request from ``queue`` ("re: <body>", correlation id kept); its reply_to."""
    method, props, body = None, None, b""
    deadline_polls = 200
    while method is None and deadline_polls:
        method, props, body = server.basic_get(queue, auto_ack=True)
        if method is None:
            server.connection.process_data_events(time_limit=0.05)
            deadline_polls -= 1
    assert method is not None and props is not None, "no request arrived"
    server.basic_publish(
        "",
        props.reply_to,
        b"re: " + body,
        pika.BasicProperties(correlation_id=props.correlation_id),
    )
    return str(props.reply_to)


def test_pika_request_and_reply(gateway: GatewayInThread) -> None:
    requester = connect(gateway.port).channel()
    requester.queue_declare("rpc")
    replies: list[tuple[str, bytes]] = []
    requester.basic_consume(
        REPLY_TO, lambda ch, m, p, body: replies.append((p.correlation_id, body)), auto_ack=True
    )
    requester.basic_publish(
        "", "rpc", b"ping", pika.BasicProperties(reply_to=REPLY_TO, correlation_id="c1")
    )
    server = connect(gateway.port).channel()
    reply_to = serve_one(server, "rpc")
    # The request carries a generated name routing back to this channel, not the pseudo-queue.
    assert reply_to.startswith(REPLY_TO + ".")
    wait_for(lambda: replies == [("c1", b"re: ping")], requester.connection)
    # The server may check the requester is still there: 0 messages, 1 consumer.
    declared = server.queue_declare(reply_to, passive=True).method
    assert (declared.message_count, declared.consumer_count) == (0, 1)


def test_the_pseudo_queue_can_be_declared_but_is_no_queue(gateway: GatewayInThread) -> None:
    channel = connect(gateway.port).channel()
    declared = channel.queue_declare(REPLY_TO, passive=True).method
    assert (declared.queue, declared.message_count, declared.consumer_count) == (REPLY_TO, 0, 1)
    # Not passive either: nothing is created, the same answer.
    assert channel.queue_declare(REPLY_TO).method.queue == REPLY_TO


def test_reply_consumer_must_not_acknowledge(gateway: GatewayInThread) -> None:
    channel = connect(gateway.port).channel()
    with channel_closed(406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"):
        channel.basic_consume(REPLY_TO, lambda *_: None, auto_ack=False)


def test_one_reply_consumer_per_channel(gateway: GatewayInThread) -> None:
    channel = connect(gateway.port).channel()
    channel.basic_consume(REPLY_TO, lambda *_: None, auto_ack=True)
    with channel_closed(406, "PRECONDITION_FAILED - reply consumer already set"):
        channel.basic_consume(REPLY_TO, lambda *_: None, auto_ack=True)


def test_a_request_needs_the_reply_consumer_on_its_channel(gateway: GatewayInThread) -> None:
    connection = connect(gateway.port)
    connection.channel().basic_consume(REPLY_TO, lambda *_: None, auto_ack=True)
    other = connection.channel()
    other.queue_declare("rpc")
    with channel_closed(406, "PRECONDITION_FAILED - fast reply consumer does not exist"):
        other.basic_publish("", "rpc", b"x", pika.BasicProperties(reply_to=REPLY_TO))
        other.queue_declare("rpc", passive=True)  # the refusal arrives by then


def test_a_reply_to_a_gone_requester_is_dropped_yet_routed(gateway: GatewayInThread) -> None:
    requester = connect(gateway.port).channel()
    requester.queue_declare("rpc")
    requester.basic_consume(REPLY_TO, lambda *_: None, auto_ack=True, consumer_tag="replies")
    requester.basic_publish("", "rpc", b"q", pika.BasicProperties(reply_to=REPLY_TO))
    server = connect(gateway.port).channel()
    method, props, _ = server.basic_get("rpc", auto_ack=True)
    assert method is not None
    requester.basic_cancel("replies")
    # RabbitMQ: a reply-to name counts as routed even for mandatory messages, and the
    # publish is confirmed; the reply itself is dropped.
    server.confirm_delivery()
    server.basic_publish("", props.reply_to, b"late", mandatory=True)
    with channel_closed(404, f"NOT_FOUND - no queue '{props.reply_to}' in vhost '/'"):
        server.queue_declare(props.reply_to, passive=True)


def test_aio_pika_request_and_reply(gateway: GatewayInThread) -> None:
    async def scenario() -> list[tuple[str | None, bytes]]:
        requester = await aio_pika.connect(amqp_url(gateway.port))
        server = await aio_pika.connect(amqp_url(gateway.port))
        async with requester, server:
            channel = await requester.channel()
            replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
            reply_queue = await channel.declare_queue(REPLY_TO, passive=True)
            await reply_queue.consume(replies.put, no_ack=True)
            await channel.declare_queue("rpc")

            server_channel = await server.channel()
            requests = await server_channel.declare_queue("rpc", passive=True)

            async def answer(request: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with request.process():
                    assert request.reply_to is not None
                    await server_channel.default_exchange.publish(
                        aio_pika.Message(
                            b"re: " + request.body, correlation_id=request.correlation_id
                        ),
                        routing_key=request.reply_to,
                    )

            await requests.consume(answer)
            for n in range(3):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"q{n}".encode(), reply_to=REPLY_TO, correlation_id=str(n)),
                    routing_key="rpc",
                )
            got = [await replies.get() for _ in range(3)]
            return sorted((m.correlation_id, m.body) for m in got)

    replies = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert replies == [("0", b"re: q0"), ("1", b"re: q1"), ("2", b"re: q2")]
